"""Command line: ``python -m pondernet_tutorial {train, evaluate, reproduce, list} --help``.

A mistake in the input (a value out of range, an unknown name, a missing checkpoint or data set) prints
one line ``error: ...`` that says what to do, and exits with status 2. The parser and ``--help`` load
neither PyTorch nor Lightning.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import fields

from .config import DEFAULTS, LOGGERS, LR_SCHEDULES, TrainConfig
from .methods import METHODS
from .registry import EXPERIMENTS
from .steps import STEPS

HELP = {
    "experiment": "the experiment: " + "; ".join(f"{e.name} ({e.description})" for e in EXPERIMENTS.values()),
    "method": "halting method: pondernet, act (Adaptive Computation Time) or fixed (always --max-steps steps)",
    "seed": "random seed of the run (weights, batches, rotations, dropout)",
    "step": f"step function: {', '.join(STEPS)} [default: the experiment's]",
    "step_options": "an option of the step function as KEY=VALUE, e.g. hidden_size=32 (repeatable)",
    "epochs": "most training epochs (parity: an epoch is 1,000 batches)",
    "batch_size": "batch size",
    "lr": "Adam learning rate",
    "grad_clip": "gradient-norm clipping, 0 for none",
    "max_steps": "N, the most steps (fixed: the number of steps)",
    "lambda_p": "PonderNet: λ_p of the geometric prior, strictly between 0 and 1; its mean is 1/λ_p steps",
    "beta": "PonderNet: β, weight of the KL regularisation, >= 0",
    "kl_direction": "PonderNet: p_prior = the paper's KL(p || p_G); prior_p = KL(p_G || p) as in the "
    "article's, labml's and mildlyoverfitted's code",
    "renormalize_prior": "PonderNet: renormalise the truncated geometric prior to sum to 1",
    "tau": "ACT: τ, weight of the ponder cost, >= 0",
    "epsilon": "ACT: ε, a sample halts once its halting units sum to 1 − ε",
    "halting_bias": "PonderNet and ACT: initial bias of the halting layer (none: PyTorch's initialisation)",
    "lr_schedule": "plateau (ReduceLROnPlateau on val/acc) or constant",
    "lr_patience": "ReduceLROnPlateau: epochs without improvement before the rate is lowered",
    "lr_factor": "ReduceLROnPlateau: factor by which the rate is lowered",
    "early_stopping_patience": "stop after this many epochs without a better val/acc, 0 for never",
    "stop_at_val_acc": "stop once val/acc reaches this value, 0 for never",
    "precision": "Lightning precision: 32-true, bf16-mixed, 16-mixed, ... [32-true]",
    "train_subset": "training samples per epoch (MNIST: the first N images; quick runs only, never shipped)",
    "quick": "the experiment's quick settings (CI only; never shipped)",
    "compile": "torch.compile the unroll and loss of training and validation, for methods without early exit (off in quick mode)",
    "accelerator": "Lightning accelerator: auto, cpu, gpu, mps [auto]",
    "devices": "Lightning devices: auto, a count, or a list such as 0,1 [auto]",
    "strategy": "Lightning strategy: auto, ddp, ddp_spawn, ... [auto]",
    "data_dir": "folder holding MNIST/raw [$PONDERNET_DATA_DIR, else ~/.cache/pondernet_tutorial]",
    "output_dir": "folder for runs: <output_dir>/<experiment>/<variant>/seed<k>/ [runs]",
    "logger": "csv, tensorboard or wandb (offline) [csv]",
    "progress_bar": "show Lightning's progress bar",
}
CHOICES = {
    "experiment": list(EXPERIMENTS),
    "method": list(METHODS),
    "step": list(STEPS),
    "kl_direction": ["p_prior", "prior_p"],
    "lr_schedule": list(LR_SCHEDULES),
    "logger": list(LOGGERS),
}
TYPES = {
    "seed": int,
    "epochs": int,
    "batch_size": int,
    "max_steps": int,
    "lr_patience": int,
    "early_stopping_patience": int,
    "train_subset": int,
    "lr": float,
    "grad_clip": float,
    "lambda_p": float,
    "beta": float,
    "tau": float,
    "epsilon": float,
    "halting_bias": float,
    "lr_factor": float,
    "stop_at_val_acc": float,
}
BOOLEANS = ("renormalize_prior", "quick", "compile", "progress_bar")
REPRODUCE_OPTIONS = ("accelerator", "devices", "strategy", "precision", "data_dir", "compile", "logger")


class UserError(Exception):
    """A mistake in the command line's input: printed as one line, exit status 2."""


class Parser(argparse.ArgumentParser):
    def error(self, message):
        self.exit(2, f"error: {message} (see {self.prog} --help)\n")


def _value(text: str):
    """A KEY=VALUE value: a number, a boolean or a string."""
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return {"true": True, "false": False, "none": None}.get(text.lower(), text)


def _default_text(name: str) -> str:
    """`` [default: X]``, or the default of each task where they differ (from the registry)."""
    if name not in DEFAULTS:
        return ""
    by_task = {}
    for experiment in EXPERIMENTS.values():
        by_task.setdefault(experiment.task, experiment.defaults.get(name, DEFAULTS[name]))
    values = set(map(repr, by_task.values()))
    if len(values) == 1:
        return f" [default: {next(iter(by_task.values()))}]"
    return " [default: " + "; ".join(f"{task}: {value}" for task, value in by_task.items()) + "]"


def _add_options(parser: argparse.ArgumentParser, names) -> None:
    for name in names:
        flag = "--" + name.replace("_", "-")
        text = HELP[name] + _default_text(name)
        if name in BOOLEANS:
            parser.add_argument(flag, action=argparse.BooleanOptionalAction, default=None, help=text)
        elif name == "step_options":
            parser.add_argument(
                "--step-option",
                dest="step_options",
                action="append",
                default=[],
                metavar="KEY=VALUE",
                help=text,
            )
        else:
            parser.add_argument(
                flag, type=TYPES.get(name, str), default=None, choices=CHOICES.get(name), help=text
            )


def _config_values(args, names) -> dict:
    values = {}
    for name in names:
        value = getattr(args, name, None)
        if name == "step_options":
            options = {}
            for item in value or []:
                key, sep, text = item.partition("=")
                if not sep or not key:
                    raise UserError(f"--step-option takes KEY=VALUE, got {item!r}.")
                options[key] = _value(text)
            value = options or None
        if value is not None:
            values[name] = value
    if isinstance(values.get("devices"), str) and values["devices"].isdigit():
        values["devices"] = int(values["devices"])
    return values


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(
        prog="python -m pondernet_tutorial",
        description="Train and evaluate PonderNet, ACT and fixed-step networks on MNIST and parity, and "
        "reproduce the book's results.",
    )
    sub = parser.add_subparsers(dest="command", required=True, parser_class=Parser)
    config_names = [f.name for f in fields(TrainConfig)]

    p_train = sub.add_parser(
        "train", help="train one run", description="Train one run; see --experiment and --method."
    )
    _add_options(p_train, config_names)
    p_train.add_argument(
        "--overwrite", action="store_true", help="replace a run already in the output folder"
    )

    p_eval = sub.add_parser(
        "evaluate",
        help="evaluate a checkpoint on its experiment's test sets",
        description="Evaluate a checkpoint on its experiment's test sets (MNIST: rotated test sets) and "
        "print the per-set table.",
    )
    src = p_eval.add_mutually_exclusive_group(required=True)
    src.add_argument(
        "--checkpoint", help="a model.pt written by `train` (its metadata.json names the experiment)"
    )
    src.add_argument("--pretrained", choices=list(EXPERIMENTS), help="a shipped run of this experiment")
    p_eval.add_argument(
        "--experiment",
        choices=list(EXPERIMENTS),
        help="the checkpoint's experiment, if no metadata.json lies beside it",
    )
    p_eval.add_argument(
        "--method",
        choices=list(METHODS),
        default="pondernet",
        help="with --pretrained: the method [pondernet]",
    )
    p_eval.add_argument("--seed", type=int, default=0, help="with --pretrained: the seed [0]")
    p_eval.add_argument(
        "--angles",
        type=float,
        nargs="*",
        default=None,
        help="MNIST: exact angles in degrees, counter-clockwise positive [-180 -165 ... 180]",
    )
    p_eval.add_argument(
        "--uniform",
        type=float,
        nargs="*",
        default=None,
        help="MNIST: half-ranges ±θ of uniform rotation [22.5 45 67.5 90]",
    )
    p_eval.add_argument("--limit", type=int, default=None, help="evaluate on the first N test samples only")
    p_eval.add_argument("--data-dir", default=None, help=HELP["data_dir"])
    p_eval.add_argument("--output", default=None, help="write the per-sample table to this CSV file")
    p_eval.add_argument(
        "--trust-code",
        action="store_true",
        help="let the checkpoint name step functions and losses by import path (code that is imported and "
        "run): only for files you trust [off: registered components only]",
    )

    from .studies import STUDIES

    p_rep = sub.add_parser(
        "reproduce",
        help="train and evaluate the runs behind the book",
        description="Train (unless trained) and evaluate (unless evaluated) every run of the chosen "
        "studies, and write their tables. Studies: "
        + "; ".join(f"{s.name} ({s.description})" for s in STUDIES.values()),
    )
    p_rep.add_argument(
        "--study",
        nargs="+",
        default=["mnist-reference"],
        choices=[*STUDIES, "all"],
        help="studies to reproduce [mnist-reference]",
    )
    p_rep.add_argument(
        "--output-dir",
        default="results/reproduce",
        help="results folder [results/reproduce]; never the shipped one unless --ship",
    )
    p_rep.add_argument("--quick", action="store_true", help=HELP["quick"])
    p_rep.add_argument("--jobs", type=int, default=1, help="runs trained at once, in separate processes [1]")
    p_rep.add_argument("--overwrite", action="store_true", help="retrain runs that are already trained")
    p_rep.add_argument(
        "--reevaluate", action="store_true", help="evaluate runs again even where their tables are up to date"
    )
    p_rep.add_argument("--ship", action="store_true", help="write into the package's pretrained/ folder")
    _add_options(p_rep, [n for n in REPRODUCE_OPTIONS if n != "quick"])

    sub.add_parser("list", help="list experiments, methods, step functions, studies and shipped runs")
    return parser


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return _run(args)
    except UserError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2


def _user_errors():
    """The exception types that mean a mistake in the input (imported only when a command runs)."""
    from .checkpoints import CheckpointError
    from .config import ConfigMismatchError
    from .data.mnist import MNISTDamagedError, MNISTNotFoundError
    from .training import MissingPackageError

    try:  # Lightning's error for a bad --accelerator, --devices or --strategy
        from lightning.fabric.utilities.exceptions import MisconfigurationException
    except ImportError:  # pragma: no cover - Lightning moved it
        MisconfigurationException = UserError
    return (
        CheckpointError,
        ConfigMismatchError,
        MNISTDamagedError,
        MNISTNotFoundError,
        FileExistsError,
        MissingPackageError,
        MisconfigurationException,
    )


def _config(values: dict) -> TrainConfig:
    try:
        return TrainConfig(**values)
    except (ValueError, TypeError) as error:
        raise UserError(str(error)) from error


def _run(args) -> int:
    if args.command == "list":
        return _list()
    errors = _user_errors()
    try:
        if args.command == "train":
            from .training import train

            config = _config(_config_values(args, [f.name for f in fields(TrainConfig)]))
            _, metadata = train(config, overwrite=args.overwrite)
            if metadata is not None:  # None on the other ranks of a multi-process run: rank 0 reports
                print(
                    f"best val accuracy {metadata['best_val_acc']:.4f} (epoch {metadata['best_epoch'] + 1}, "
                    f"stopped by {metadata['stopped_by']}), {metadata['wall_time_s']} s -> {config.run_dir}"
                )
        elif args.command == "evaluate":
            _evaluate(args)
        elif args.command == "reproduce":
            from .studies import STUDIES, reproduce

            if args.jobs < 1:
                raise UserError(f"--jobs must be >= 1, got {args.jobs}.")
            if args.ship and args.quick:
                raise UserError("quick runs are never shipped as pretrained results: drop --quick or --ship.")
            studies = list(STUDIES) if "all" in args.study else args.study
            common = _config_values(args, REPRODUCE_OPTIONS)
            _config({"quick": args.quick, **common})  # check the shared options before any training
            reproduce(
                studies,
                args.output_dir,
                args.quick,
                args.jobs,
                args.overwrite,
                args.reevaluate,
                args.ship,
                **common,
            )
    except errors as error:
        raise UserError(str(error)) from error
    return 0


def _evaluate(args) -> None:
    from pathlib import Path

    from .checkpoints import load_model, load_pretrained
    from .config import PRETRAINED_DIR
    from .evaluation import evaluate, summarize
    from .files import read_json
    from .registry import get_experiment
    from .training import make_datamodule

    if args.pretrained:
        config = _config(
            {
                "experiment": args.pretrained,
                "method": args.method,
                "seed": args.seed,
                "output_dir": str(PRETRAINED_DIR),
            }
        )
        module = load_pretrained(config.experiment, config.method, config.seed, trust_code=args.trust_code)
    else:
        meta = read_json(Path(args.checkpoint).with_name("metadata.json")) or {}
        experiment = args.experiment or (meta.get("config") or {}).get("experiment")
        if experiment is None:
            raise UserError(
                f"no readable metadata.json beside {args.checkpoint}: say which experiment it is with --experiment."
            )
        config = _config({"experiment": experiment})
        module = load_model(args.checkpoint, trust_code=args.trust_code)
    if args.data_dir:
        config.data_dir = args.data_dir
    experiment = get_experiment(config.experiment)
    rotations = None
    if args.angles is not None or args.uniform is not None:
        if experiment.task != "mnist":
            raise UserError("--angles and --uniform apply to the MNIST experiments only.")
        from .data.mnist import EXACT_ANGLES, REFERENCE_ANGLES, rotation_sweep

        angles = EXACT_ANGLES if args.angles is None else tuple(args.angles)
        uniform = REFERENCE_ANGLES if args.uniform is None else tuple(args.uniform)
        try:
            rotations = rotation_sweep(angles, uniform)
        except ValueError as error:
            raise UserError(str(error)) from error
    datamodule = make_datamodule(
        config, test_rotations=rotations or experiment.evaluation.get("sweep"), test_subset=args.limit
    )
    per_sample, _ = evaluate(module, datamodule.evaluation_sets())
    table = summarize(per_sample, experiment.group_by)
    columns = [*experiment.group_by, "accuracy", "halt_step", "expected_steps", "n"]
    print(table[columns].to_string(index=False, float_format=lambda v: f"{v:.4f}"))
    if args.output:
        per_sample.to_csv(args.output, index=False)


def _list() -> int:
    from .config import PRETRAINED_DIR
    from .studies import STUDIES

    print("experiments:")
    for e in EXPERIMENTS.values():
        print(f"  {e.name}: {e.description}")
    print("methods: " + ", ".join(METHODS))
    print("step functions: " + ", ".join(STEPS))
    print("studies:")
    for s in STUDIES.values():
        print(f"  {s.name}: {s.description}")
    shipped = sorted(
        p.parent.parent.relative_to(PRETRAINED_DIR) for p in PRETRAINED_DIR.glob("*/*/seed*/model.pt")
    )
    print("shipped runs with weights:")
    for run in dict.fromkeys(shipped):
        print(f"  {run}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
