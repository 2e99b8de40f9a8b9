"""The time halting saves: one trained run, on its own test sets, read three ways in one process.

* ``early exit``: the method's ``infer``, where a halted sample leaves the batch (what the package does);
* ``full unroll``: ``forward``, every sample through all ``eval_max_steps`` steps, and the answer of the
  last step (what TRM's and HRM's released code evaluate; ACT, whose answer mixes the steps, keeps
  its halting answer, computed from the whole unroll);
* ``fixed depth``: the unroll cut at the run's mean halting step on the set, rounded up, and that
  step's answer.

Each is timed as the median of ``--repeats`` passes over the samples, the three alternated (A B C A B
C ...), at every batch size of ``--batch-sizes`` (default: the test loader's and 1). labml's maintainer
expected early exit to gain time only when "the batch size and the complexity of step function [are]
large" (labmlai/annotated_deep_learning_paper_implementations issue 80): the batch sizes show it.

    python benchmarks/halting_time.py RUN_FOLDER                  # a run folder: <root>/<experiment>/<variant>/seed<k>
    python benchmarks/halting_time.py RUN_FOLDER --batch-sizes 128 1 --samples 1000 --csv times.csv
    python benchmarks/halting_time.py --quick                     # CI: a shipped pointer run, 32 samples a set
    python benchmarks/halting_time.py --study halting-heads-pointer --threads 1 --csv pondernet_tutorial/pretrained/halting-times.csv
    python benchmarks/halting_time.py --study halting-heads-noexit --threads 1 --csv pondernet_tutorial/pretrained/halting-times.csv

``--study`` times seed 0 of every head of a shipped study that halts by itself (not the fixed depth
nor the frozen control): at the loader's batch size on every sample of each set, and at batch size 1 on
``--samples`` of them (default 400, evenly spaced); with ``--csv`` it replaces that study's rows of the
file and keeps the other studies'. Chapter 13's time table is those commands', run with the machine's
background work paused.

Prints one row per set, batch size and reading: the mean steps, the accuracy, the samples, and the
milliseconds per 1,000 samples; ``--csv`` writes the same rows. The test sets are the run's
``evaluation.json``'s; with all their samples (``--samples 0``) early exit's accuracy is the run's
``per_sample.csv``'s and the full unroll's the last row of its ``per_step.csv``. ``--samples`` takes
an evenly spaced subset of each set (every difficulty kept); PonderNet then draws its coins for the
subset afresh.
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
import time
from pathlib import Path

import pandas as pd
import torch

from pondernet_tutorial.data.base import EvalSet
from pondernet_tutorial.runs.checkpoints import load_model
from pondernet_tutorial.runs.config import PRETRAINED_DIR, WEIGHTS, TrainConfig
from pondernet_tutorial.runs.evaluation import _datamodule_and_record
from pondernet_tutorial.runs.files import write_csv
from pondernet_tutorial.untrusted import read_json, read_table

QUICK_RUN = PRETRAINED_DIR / "pointer-extrapolation" / "pondernet-lambda_p=0.5-beta=0.01" / "seed0"
MODES = ("early exit", "full unroll", "fixed depth")


class BenchmarkError(Exception):
    """A request this benchmark cannot serve; the message says what to do."""


def load_run(folder: Path):
    """``(model, config, record)`` of the run in ``folder``: its configuration as ``metadata.json``
    records it (:func:`run_config`), its model loaded (and checked) by the package, and its
    ``evaluation.json``."""
    config, record = run_config(folder)
    module = load_model(Path(folder) / WEIGHTS, config=config)
    return module.model.eval(), config, record


def run_config(folder: Path) -> tuple[TrainConfig, dict]:
    """``(config, record)`` of the run in ``folder``: its configuration as ``metadata.json`` records it
    (in the folder it names), and its ``evaluation.json``; nothing is loaded."""
    folder = Path(folder)
    metadata, record = read_json(folder / "metadata.json"), read_json(folder / "evaluation.json")
    if not isinstance(metadata, dict) or not isinstance(metadata.get("config"), dict):
        raise BenchmarkError(f"{folder} has no readable metadata.json: give a trained run's folder.")
    if not isinstance(record, dict):
        raise BenchmarkError(f"{folder} has no readable evaluation.json: evaluate the run first.")
    root = folder.resolve().parents[2]  # <root>/<experiment>/<variant>/seed<k>
    config = TrainConfig.from_options(**{**metadata["config"], "output_dir": str(root)})
    if config.run_dir.resolve() != folder.resolve():
        raise BenchmarkError(f"{folder} is not the folder its metadata.json names ({config.run_dir}).")
    return config, record


def evaluated_sets(config: TrainConfig, record: dict, samples: int = 0) -> list[tuple[EvalSet, int]]:
    """The run's evaluated test sets (``evaluation.json``'s limit) as floats, each with the seed of
    its halting coins; ``samples`` > 0 keeps that many, evenly spaced, of each."""
    datamodule, _ = _datamodule_and_record(config, record.get("limit"), record.get("seed", 0), None)
    sets = []
    for eval_set in datamodule.evaluation_sets():
        x, y = eval_set.inputs, eval_set.labels
        if not x.is_floating_point():
            x = x.float() / 255.0  # as the evaluation reads images
        if 0 < samples < len(y):
            picked = torch.linspace(0, len(y) - 1, samples).round().long()
            x, y = x[picked], y[picked]
        sets.append((EvalSet(eval_set.name, x, y), record.get("seed", 0)))
    return sets


def early_exit(model, x, batch_size: int, seed: int):
    """``infer`` batch by batch, the coins of the set drawn in sample order from ``seed``."""
    generator = torch.Generator().manual_seed(seed)
    answers = [model.infer(x[i : i + batch_size], generator) for i in range(0, len(x), batch_size)]
    return torch.cat([a[0] for a in answers]), torch.cat([a[1] for a in answers]).float()


def full_unroll(model, x, batch_size: int, seed: int):
    """``forward`` (all ``eval_max_steps`` steps) and the last step's answer (ACT: its halting answer)."""
    predictions = []
    for i in range(0, len(x), batch_size):
        out = model(x[i : i + batch_size])
        predictions.append(out.logits[-1] if model.step_answers else model.answer(out)[0])
    prediction = torch.cat(predictions)
    return prediction, torch.full((len(x),), float(model.eval_steps))


def fixed_depth(model, x, batch_size: int, depth: int):
    """The unroll cut at ``depth`` steps, and that step's answer ``ŷ_depth``."""
    step_function, predictions = model.step_function, []
    for i in range(0, len(x), batch_size):
        context = step_function.encode(x[i : i + batch_size])
        h = step_function.initial_state(context)
        for _ in range(depth):
            y_n, _, h = step_function.step(context, h)
        predictions.append(y_n)
    return torch.cat(predictions), torch.full((len(x),), float(depth))


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


@torch.no_grad()
def time_set(model, eval_set: EvalSet, seed: int, batch_size: int, repeats: int) -> list[dict]:
    """The three readings of one set at one batch size, alternated ``repeats`` times after one
    pass of each that is not timed; one row per reading."""
    device = next(model.parameters()).device
    x, y = eval_set.inputs.to(device), eval_set.labels.to(device)
    _, steps = early_exit(model, x, batch_size, seed)  # also the warm-up of the early exit
    depth = max(1, math.ceil(float(steps.mean()) - 1e-9))  # the mean halting step, rounded up
    runs = {
        "early exit": lambda: early_exit(model, x, batch_size, seed),
        "full unroll": lambda: full_unroll(model, x, batch_size, seed),
        "fixed depth": lambda: fixed_depth(model, x, batch_size, depth),
    }
    results = {mode: runs[mode]() for mode in MODES[1:]}  # their warm-up
    seconds = {mode: [] for mode in MODES}
    for _ in range(repeats):
        for mode in MODES:  # A B C A B C ...
            synchronize(device)
            start = time.perf_counter()
            results[mode] = runs[mode]()
            synchronize(device)
            seconds[mode].append(time.perf_counter() - start)
    rows = []
    for mode in MODES:
        prediction, mode_steps = results[mode]
        median = statistics.median(seconds[mode])
        rows.append(
            {
                "set": eval_set.name,
                "batch_size": batch_size,
                "mode": mode,
                "steps": float(mode_steps.mean()),
                "accuracy": float((prediction.argmax(-1) == y).double().mean()),
                "n": len(y),
                "ms_per_1000": 1e6 * median / len(y),
                "median_s": median,
                "repeats": repeats,
            }
        )
    full = rows[1]["ms_per_1000"]
    for row in rows:
        row["time_vs_full"] = row["ms_per_1000"] / full
    return rows


def measure(
    folder: Path, batch_sizes=None, samples: int = 0, repeats: int = 5, device: str = "cpu", sets=None
) -> pd.DataFrame:
    """The table of :func:`time_set` over the run's test sets (``sets``: only those named) and the
    batch sizes (None: the test loader's and 1)."""
    model, config, record = load_run(folder)
    model.to(device)
    batch_sizes = batch_sizes or [config.batch_size, 1]
    chosen = evaluated_sets(config, record, samples)
    names = [eval_set.name for eval_set, _ in chosen]
    if unknown := sorted(set(sets or ()) - set(names)):
        raise BenchmarkError(f"the run has no test set {', '.join(unknown)}; its sets: {', '.join(names)}.")
    rows = []
    for eval_set, seed in chosen:
        if sets and eval_set.name not in sets:
            continue
        for batch_size in batch_sizes:
            for row in time_set(model, eval_set, seed, batch_size, repeats):
                rows.append({"run": f"{config.experiment}/{config.variant}/seed{config.seed}", **row})
    table = pd.DataFrame(rows)
    table.insert(1, "method", config.method)
    table["device"] = torch.cuda.get_device_name(device) if torch.device(device).type == "cuda" else "cpu"
    table["threads"] = torch.get_num_threads()
    return table


def study_heads(name: str) -> list[tuple[Path, TrainConfig]]:
    """Seed 0 of every head of the shipped study ``name`` that halts by itself (its family, as the book
    names it, not one of :data:`~pondernet_tutorial.analysis.heads.BUILT_STEPS`): each folder and its
    configuration (:func:`run_config`)."""
    from pondernet_tutorial.analysis.heads import BUILT_STEPS
    from pondernet_tutorial.analysis.verdicts import config_label
    from pondernet_tutorial.runs.studies import get_study, load_study

    runs = load_study(get_study(name).name, PRETRAINED_DIR)["runs"]
    heads = [
        (PRETRAINED_DIR / path, run_config(PRETRAINED_DIR / path)[0])
        for path in runs.loc[runs["seed"] == 0, "path"]
    ]
    return [
        (folder, config) for folder, config in heads if config_label(config.options())[1] not in BUILT_STEPS
    ]


def measure_study(name: str, samples: int = 400, repeats: int = 5, device: str = "cpu") -> pd.DataFrame:
    """:func:`measure` on every head of :func:`study_heads`: the loader's batch size on every sample,
    and batch size 1 on ``samples`` of each set; one table, its first column the study."""
    tables = []
    for folder, config in study_heads(name):
        tables.append(measure(folder, [config.batch_size], 0, repeats, device))
        tables.append(measure(folder, [1], samples, repeats, device))
    table = pd.concat(tables, ignore_index=True)
    table.insert(0, "study", name)
    return table


def positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def main(argv=None) -> pd.DataFrame:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("run", nargs="?", type=Path, help="a trained run's folder (with its evaluation)")
    parser.add_argument("--study", help="instead of RUN: seed 0 of every head of this shipped study")
    parser.add_argument("--batch-sizes", type=positive, nargs="+", default=None)
    parser.add_argument("--samples", type=int, default=0, help="samples per set, evenly spaced (0: all)")
    parser.add_argument("--sets", nargs="+", default=None, help="only these test sets (default: all)")
    parser.add_argument("--repeats", type=positive, default=5)
    parser.add_argument("--threads", type=positive, default=None, help="PyTorch's CPU threads")
    parser.add_argument("--device", default="cpu", help="cpu, or cuda where a GPU is")
    parser.add_argument("--csv", type=Path, default=None, help="also write the table here")
    parser.add_argument(
        "--quick", action="store_true", help=f"CI: {QUICK_RUN.name} of the shipped pointer study"
    )
    args = parser.parse_args(argv)
    if args.quick:
        args.run = args.run or QUICK_RUN
        args.samples = args.samples or 32
        args.repeats = min(args.repeats, 2)
    if args.run is None and not args.study:
        parser.error("give a run folder (or --study NAME, or --quick)")
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        parser.error("--device cuda: no GPU is visible; leave --device out to time on the CPU")
    kept = None  # with --study, the other studies' rows of --csv: read (bounded) before the timing starts
    if args.study and args.csv and args.csv.exists():
        try:
            kept = read_table(args.csv)
        except (OSError, ValueError) as error:
            parser.exit(2, f"halting_time: {error}\n")
        if "study" not in kept:
            parser.exit(2, f"halting_time: {args.csv} holds no study column: give --csv another file\n")
        kept = kept[kept["study"] != args.study]
    if args.threads:
        torch.set_num_threads(args.threads)
    try:
        if args.study:
            table = measure_study(args.study, args.samples or 400, args.repeats, args.device)
        else:
            table = measure(args.run, args.batch_sizes, args.samples, args.repeats, args.device, args.sets)
    except (BenchmarkError, FileNotFoundError, ValueError) as error:
        parser.exit(2, f"halting_time: {error}\n")
    columns = ["set", "batch_size", "mode", "steps", "accuracy", "n", "ms_per_1000", "time_vs_full"]
    print(
        f"{table['run'].iloc[0]} ({table['method'].iloc[0]}), {table['device'].iloc[0]}, "
        f"{table['threads'].iloc[0]} threads, median of {table['repeats'].iloc[0]} alternated passes"
    )
    print(table[columns].to_string(index=False, float_format=lambda v: f"{v:.4g}"))
    if args.csv:  # written whole: one file for every study, this study's rows replaced
        written = table if kept is None else pd.concat([kept, table], ignore_index=True)
        write_csv(args.csv, written, index=False, float_format="%.6g")
    return table


if __name__ == "__main__":
    main(sys.argv[1:])
