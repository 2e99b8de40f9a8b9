"""An independent re-score of a shipped halting-heads study: seed 0 of every configuration, on fresh walks.

For seed 0 of every configuration in the study's ``runs.csv`` (every head, the frozen control and the
fixed depth included), the shipped weights are loaded by the package's checked loader with the
configuration that the run's ``metadata.json`` records, and scored on test walks drawn afresh: for
each test set of the experiment (``test``: the training range of walk lengths, ``beyond``: the longer
one, as the experiment's data options give them), as many walks as the shipped ``halting.csv``
counts (or ``--samples``), the same number for every walk length as the shipped sets hold, from a
generator of another seed than the evaluation's. The scoring is this file's own: batches through the
method's early exit (``infer``; PonderNet's halting coins from a seeded generator of its own), the
argmax compared with the labels; nothing of ``runs/evaluation.py`` scores.

Each fresh accuracy is compared with the shipped one of the same run and set (for PonderNet the mean
over its coin draws, ``accuracy_draws``): they agree when the difference lies within 3 standard
errors of the two shares combined, sqrt(p1(1-p1)/n1 + p2(1-p2)/n2); where that is 0 (both shares 0 or
1), when they are equal.

    OMP_NUM_THREADS=1 python tools/rescore_heads.py                      # halting-heads-pointer
    python tools/rescore_heads.py halting-heads-pointer --samples 400 --variants trm hrm
    python tools/rescore_heads.py halting-heads-pointer --halting OTHER/halting.csv   # compare with it

Exit status: 0 when every row agrees, 1 when one does not, 2 on bad input (one line).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import pandas as pd
import torch

from pondernet_tutorial.analysis.paper_claims import difference_in_se
from pondernet_tutorial.runs.build import make_datamodule
from pondernet_tutorial.runs.checkpoints import CheckpointError, load_model
from pondernet_tutorial.runs.config import PRETRAINED_DIR, WEIGHTS, TrainConfig
from pondernet_tutorial.runs.studies import get_study
from pondernet_tutorial.untrusted import DamagedFileError, read_json, read_table

STUDY = "halting-heads-pointer"
# the evaluation's sets are drawn from seeds 3,100 and 4,100 (plus the size), its coins from 0: these
# are other seeds, one for each set's walks and one for its coins
FRESH_SEED, COIN_SEED = 917_000, 523_000
AGREE_SE = 3.0


class RescoreError(Exception):
    """A request this tool cannot serve; the message (one line) says what to do."""


def run_folder_model(folder: Path, root: Path):
    """``(model, config)`` of the run in ``folder``: the configuration its ``metadata.json`` records
    and its weights, loaded and checked against it by the package's loader."""
    metadata = read_json(folder / "metadata.json")
    if not isinstance(metadata, dict) or not isinstance(metadata.get("config"), dict):
        raise RescoreError(f"{folder} has no readable metadata.json: is the study shipped whole?")
    config = TrainConfig.from_options(**{**metadata["config"], "output_dir": str(root)})
    if config.run_dir.resolve() != folder.resolve():
        raise RescoreError(f"{folder} is not the folder its metadata.json names ({config.run_dir}).")
    return load_model(folder / WEIGHTS, config=config).model.eval(), config


def fresh_sets(config: TrainConfig, counts: dict[str, int], seed: int = FRESH_SEED) -> dict:
    """For every test set of the experiment named in ``counts``, ``counts[name]`` walks drawn afresh:
    as many for every walk length of the set's range as the shipped sets hold (the first lengths take
    one more where the count does not divide), from a generator seeded ``seed`` plus the set's place.
    Returns ``{name: (inputs, labels)}``, inputs as floats."""
    datamodule = make_datamodule(config)
    sets = {}
    for place, (name, (k_min, k_max)) in enumerate(datamodule.test_sets_k.items()):
        if name not in counts:
            continue
        generator = torch.Generator().manual_seed(seed + 1_000 * place)
        lengths = k_max - k_min + 1
        share, extra = divmod(int(counts[name]), lengths)
        parts = [
            datamodule.draw(share + (i < extra), (k, k), generator)
            for i, k in enumerate(range(k_min, k_max + 1))
            if share + (i < extra) > 0
        ]
        inputs, labels = (torch.cat([p[j] for p in parts]) for j in (0, 1))
        sets[name] = (inputs.float(), labels)
    return sets


@torch.inference_mode()
def score(model, inputs, labels, batch_size: int, seed: int) -> tuple[float, float]:
    """``(accuracy, mean halting step)`` of the model's early exit on ``inputs``, batch by batch;
    PonderNet's coins are drawn in sample order from a generator seeded ``seed``."""
    generator = torch.Generator().manual_seed(seed)
    correct, steps = 0, 0.0
    for i in range(0, len(labels), batch_size):
        prediction, halt_step = model.infer(inputs[i : i + batch_size], generator)
        correct += int((prediction.argmax(-1) == labels[i : i + batch_size]).sum())
        steps += float(halt_step.float().sum())
    return correct / len(labels), steps / len(labels)


def shipped_accuracy(row: pd.Series) -> float:
    """The shipped early-exit accuracy: the mean over the coin draws where the method drew coins."""
    draws = row.get("coin_draws")
    if pd.notna(draws) and draws > 0 and pd.notna(row.get("accuracy_draws")):
        return float(row["accuracy_draws"])
    return float(row["accuracy"])


def rescore(
    study: str = STUDY,
    samples: int = 0,
    variants: list[str] | None = None,
    halting: Path | None = None,
    root: Path = PRETRAINED_DIR,
    seed: int = FRESH_SEED,
) -> pd.DataFrame:
    """One row per seed-0 run of ``study`` and test set: the shipped accuracy (from ``halting``, by
    default the study's ``halting.csv``), the fresh one on ``samples`` walks (0: the shipped ``n``),
    their difference in standard errors and whether they agree. ``variants``: only these."""
    try:
        get_study(study)
    except ValueError as error:
        raise RescoreError(str(error)) from None
    folder = Path(root) / "studies" / study
    halting = Path(halting) if halting else folder / "halting.csv"
    try:
        runs, table = read_table(folder / "runs.csv"), read_table(halting)
    except FileNotFoundError as error:
        raise RescoreError(
            f"missing table {error.filename or error}: reproduce the study or give --halting."
        ) from None
    except DamagedFileError as error:
        raise RescoreError(str(error)) from None
    runs = runs[runs["seed"] == 0]
    if variants:
        unknown = sorted(set(variants) - set(runs["variant"]))
        if unknown:
            raise RescoreError(
                f"no variant {', '.join(unknown)} in {study}; choose among {', '.join(runs['variant'])}."
            )
        runs = runs[runs["variant"].isin(variants)]
    rows = []
    for _, run in runs.iterrows():
        shipped = table[table["path"] == run["path"]].set_index("set")
        if shipped.empty:
            raise RescoreError(f"{halting} has no row of {run['path']}: give the study's halting.csv.")
        model, config = run_folder_model(Path(root) / run["path"], Path(root))
        counts = {name: samples or int(shipped.loc[name, "n"]) for name in shipped.index}
        for place, (name, (inputs, labels)) in enumerate(fresh_sets(config, counts, seed).items()):
            accuracy, steps = score(model, inputs, labels, config.batch_size, COIN_SEED + place)
            before = shipped_accuracy(shipped.loc[name])
            n_before = int(shipped.loc[name, "n"])
            rows.append(
                {"variant": run["variant"], "method": run["method"], "set": name,
                 "shipped": before, "fresh": accuracy, "n_shipped": n_before, "n_fresh": len(labels),
                 "steps_shipped": float(shipped.loc[name, "steps"]), "steps_fresh": steps,
                 "difference_in_se": difference_in_se(before, n_before, accuracy, len(labels))}
            )  # fmt: skip
    result = pd.DataFrame(rows)
    result["agrees"] = result["difference_in_se"].abs() <= AGREE_SE
    return result


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("study", nargs="?", default=STUDY, help=f"a shipped study (default {STUDY})")
    parser.add_argument("--samples", type=int, default=0, help="walks per set (default: the shipped n)")
    parser.add_argument("--variants", nargs="+", default=None, help="only these configurations")
    parser.add_argument("--halting", type=Path, default=None, help="compare with this halting.csv instead")
    parser.add_argument("--seed", type=int, default=FRESH_SEED, help="the fresh walks' seed")
    args = parser.parse_args(argv)
    if args.samples < 0:
        parser.exit(2, f"rescore_heads: --samples must be 0 (the shipped n) or more, got {args.samples}\n")
    try:
        table = rescore(args.study, args.samples, args.variants, args.halting, seed=args.seed)
    except (RescoreError, CheckpointError) as error:
        parser.exit(2, f"rescore_heads: {error}\n")
    print(
        table.to_string(
            index=False,
            formatters={"difference_in_se": "{:+.2f}".format},
            float_format=lambda v: f"{v:.4f}",
        )
    )
    agree = int(table["agrees"].sum())
    print(f"{agree} of {len(table)} agree (|difference| <= {AGREE_SE:g} SE)")
    return 0 if agree == len(table) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
