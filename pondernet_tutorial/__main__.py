"""Command line: ``python -m pondernet_tutorial {train, evaluate, reproduce} --help``."""

from __future__ import annotations

import argparse
import sys
from dataclasses import fields

from .training import TrainConfig

HELP = {
    "experiment": "interpolation (plain MNIST) or extrapolation (train and validate on digits rotated uniformly in ±22.5°)",
    "seed": "random seed of the run (weights, batches, rotations, dropout)",
    "epochs": "training epochs (reference: 20)",
    "batch_size": "batch size (reference: 128)",
    "lr": "Adam learning rate (reference: 1e-3)",
    "grad_clip": "gradient-norm clipping (reference: 0.5)",
    "max_steps": "N, the most pondering steps (reference: 20)",
    "lambda_p": "λ_p of the geometric prior, in (0, 1]; its mean is 1/λ_p steps (reference: 0.2)",
    "beta": "β, weight of the KL regularisation (reference: 0.01)",
    "hidden_size": "size of the hidden state and MLP layers (reference: 64)",
    "embedding_size": "size of the CNN embedding (reference: 64)",
    "dropout": "Dropout2d probability in the CNN (reference: 0.5)",
    "kl_direction": "forward = the paper's KL(p || p_G); reverse = KL(p_G || p) as popular implementations",
    "renormalize_prior": "renormalise the truncated geometric prior to sum to 1",
    "early_stopping_patience": "stop when validation accuracy has not improved for this many epochs (default: off)",
    "accelerator": "Lightning accelerator: auto, cpu, gpu, mps",
    "devices": "Lightning devices: auto, a count, or a list such as 0,1 (several GPUs use --strategy ddp)",
    "strategy": "Lightning strategy: auto, ddp, ...",
    "precision": "Lightning precision: 32-true, bf16-mixed, 16-mixed",
    "data_dir": "folder holding MNIST/raw (the environment variable PONDERNET_DATA_DIR overrides it)",
    "output_dir": "folder for runs: <output_dir>/<experiment>/seed<k>/",
    "logger": "csv (default), tensorboard or wandb",
    "train_subset": "train on the first N images only (quick runs; never shipped)",
    "progress_bar": "show Lightning's progress bar",
}


def _add_train_options(parser: argparse.ArgumentParser, skip=()) -> None:
    defaults = TrainConfig()
    for f in fields(TrainConfig):
        if f.name in ("extra", *skip):
            continue
        default = getattr(defaults, f.name)
        flag = "--" + f.name.replace("_", "-")
        if isinstance(default, bool):
            parser.add_argument(
                flag, action=argparse.BooleanOptionalAction, default=default, help=HELP[f.name]
            )
            continue
        kind = {int: int, float: float}.get(type(default), str)
        if f.name in ("early_stopping_patience", "train_subset"):
            kind = int
        choices = {
            "experiment": ["interpolation", "extrapolation"],
            "kl_direction": ["forward", "reverse"],
            "logger": ["csv", "tensorboard", "wandb"],
        }.get(f.name)
        parser.add_argument(
            flag, type=kind, default=default, choices=choices, help=f"{HELP[f.name]} [default: {default}]"
        )


def _config(args, skip=()) -> TrainConfig:
    values = {f.name: getattr(args, f.name) for f in fields(TrainConfig) if f.name not in ("extra", *skip)}
    if isinstance(values.get("devices"), str) and values["devices"].isdigit():
        values["devices"] = int(values["devices"])
    return TrainConfig(**values)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m pondernet_tutorial",
        description="Train and evaluate PonderNet on MNIST, and reproduce the book's results.",
    )
    sub = parser.add_subparsers(dest="command", required=True)

    p_train = sub.add_parser("train", help="train one run", description="Train one PonderNet run on MNIST.")
    _add_train_options(p_train)
    p_train.add_argument(
        "--overwrite", action="store_true", help="replace a run already in the output folder"
    )

    p_eval = sub.add_parser(
        "evaluate",
        help="evaluate a checkpoint on the rotation sweep",
        description="Evaluate a checkpoint on rotated test sets; prints the per-angle table.",
    )
    src = p_eval.add_mutually_exclusive_group(required=True)
    src.add_argument("--checkpoint", help="a model.pt written by `train`")
    src.add_argument("--pretrained", choices=["interpolation", "extrapolation"], help="a shipped model")
    p_eval.add_argument("--seed", type=int, default=0, help="seed of the shipped model [default: 0]")
    p_eval.add_argument(
        "--angles",
        type=float,
        nargs="*",
        default=None,
        help="exact angles in degrees [default: 0 15 ... 180]",
    )
    p_eval.add_argument(
        "--uniform",
        type=float,
        nargs="*",
        default=None,
        help="half-ranges ±θ of uniform rotation [default: 22.5 45 67.5 90]",
    )
    p_eval.add_argument("--limit", type=int, default=None, help="evaluate on the first N test images only")
    p_eval.add_argument("--data-dir", default=None, help=HELP["data_dir"])
    p_eval.add_argument("--output", default=None, help="write the per-sample table to this CSV file")

    p_rep = sub.add_parser(
        "reproduce",
        help="train and evaluate every run behind the shipped results",
        description="Train interpolation and extrapolation for every seed, evaluate them on "
        "the rotation sweep, aggregate the tables and draw the figures.",
    )
    _add_train_options(p_rep, skip=("experiment", "seed", "output_dir"))
    p_rep.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2], help="seeds [default: 0 1 2]")
    p_rep.add_argument(
        "--experiments",
        nargs="+",
        default=["interpolation", "extrapolation"],
        choices=["interpolation", "extrapolation"],
        help="experiments [default: both]",
    )
    p_rep.add_argument(
        "--output-dir",
        default="results/reproduce",
        help="results folder [default: results/reproduce]; never the shipped one unless --ship",
    )
    p_rep.add_argument(
        "--limit", type=int, default=None, help="evaluate on the first N test images (quick runs)"
    )
    p_rep.add_argument("--overwrite", action="store_true", help="retrain runs already in the results folder")
    p_rep.add_argument(
        "--reevaluate",
        action="store_true",
        help="evaluate existing runs again, rewriting their per-sample tables",
    )
    p_rep.add_argument(
        "--ship",
        action="store_true",
        help="write into the package's pretrained/ folder, replacing the shipped results",
    )
    return parser


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    if args.command == "train":
        from .training import train

        _, metadata = train(_config(args), overwrite=args.overwrite)
        print(
            f"best val accuracy {metadata['best_val_acc']:.4f} (epoch {metadata['best_epoch'] + 1}), "
            f"{metadata['wall_time_s']} s -> {_config(args).run_dir}"
        )
    elif args.command == "evaluate":
        from .checkpoints import load_model, load_pretrained
        from .data import RotationSpec
        from .evaluation import EXACT_ANGLES, REFERENCE_ANGLES, evaluate_sweep, summarize

        module = (
            load_model(args.checkpoint) if args.checkpoint else load_pretrained(args.pretrained, args.seed)
        )
        angles = EXACT_ANGLES if args.angles is None else args.angles
        uniform = REFERENCE_ANGLES if args.uniform is None else args.uniform
        specs = [RotationSpec(float(a)) for a in angles] + [
            RotationSpec(float(a), "uniform") for a in uniform
        ]
        per_sample = evaluate_sweep(module, specs, data_dir=args.data_dir, limit=args.limit)
        print(summarize(per_sample).to_string(index=False, float_format=lambda v: f"{v:.4f}"))
        if args.output:
            per_sample.to_csv(args.output, index=False)
    elif args.command == "reproduce":
        from .experiments import reproduce

        base = _config(args, skip=("experiment", "seed", "output_dir"))
        reproduce(
            args.output_dir,
            tuple(args.seeds),
            tuple(args.experiments),
            base,
            args.limit,
            args.overwrite,
            args.ship,
            args.reevaluate,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
