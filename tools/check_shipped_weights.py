"""Check that every shipped run's weights reproduce its shipped numbers.

    python tools/check_shipped_weights.py [FILTER ...]    # FILTER: substrings of the runs' paths

For each run under ``pondernet_tutorial/pretrained`` this loads ``model.safetensors`` the way the
package does (:func:`~pondernet_tutorial.runs.checkpoints.load_model`, with the configuration that the
run's ``metadata.json`` records), evaluates it on the test sets that its ``evaluation.json`` names, and
compares the accuracy, the mean halting step and the mean expected steps of every row of its shipped
``summary.csv`` with the new ones. It prints one line per run and a last line with the largest
differences; the exit status is 1 if any run differs by more than ``TOLERANCE``.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pandas as pd

from pondernet_tutorial.data.base import EvalSet
from pondernet_tutorial.runs.checkpoints import available_pretrained, load_model
from pondernet_tutorial.runs.config import PRETRAINED_DIR, WEIGHTS, TrainConfig, identity_differences
from pondernet_tutorial.runs.evaluation import _datamodule_and_record, evaluate
from pondernet_tutorial.runs.evaluation import summarize as summarize_samples
from pondernet_tutorial.runs.registry import get_experiment
from pondernet_tutorial.untrusted import read_json

COLUMNS = ("accuracy", "halt_step", "expected_steps")
# the shipped tables are written to 6 significant digits ("%.6g"): a relative difference up to 5e-6 is the
# rounding of the table; anything beyond 1e-5 is a difference
TOLERANCE = 1e-5
_SETS: dict = {}  # the test sets of the last data module, by its settings
RUN_OWN = {"seed", "batch_size", "train_subset", "train_rotation", "val_size"}


def check_run(folder: Path) -> dict[str, float]:
    """The largest relative difference of each of :data:`COLUMNS` between the shipped ``summary.csv``
    of the run in ``folder`` and a new evaluation of its ``model.safetensors``."""
    metadata, record = read_json(folder / "metadata.json"), read_json(folder / "evaluation.json")
    config = TrainConfig.from_options(**{**metadata["config"], "output_dir": str(PRETRAINED_DIR)})
    assert config.run_dir.resolve() == folder.resolve(), f"{folder} is not the folder of its configuration"
    sets = shipped_test_sets(config, record, folder)
    module = load_model(folder / WEIGHTS, config=config)
    per_sample, _ = evaluate(module, sets, record["seed"])
    by = get_experiment(config.experiment).group_by
    new = summarize_samples(per_sample, by).reset_index(drop=True)
    shipped = pd.read_csv(folder / "summary.csv")
    assert len(new) == len(shipped), f"{folder}: {len(new)} rows, shipped {len(shipped)}"
    return relative_differences(new, shipped)


def relative_differences(new: pd.DataFrame, shipped: pd.DataFrame) -> dict[str, float]:
    """The largest relative difference of each of :data:`COLUMNS` between two summaries' rows."""
    relative = {}
    for c in COLUMNS:
        a, b = new[c].astype(float), shipped[c].astype(float)
        relative[c] = float(((a - b).abs() / b.abs().clip(lower=1e-12)).where(a != b, 0.0).max())
    return relative


def shipped_test_sets(config: TrainConfig, record: dict, folder: Path) -> list[EvalSet]:
    """The test sets of the shipped evaluation of the run in ``folder`` (``record``: its
    ``evaluation.json``, which must be what ``config`` asks for), as that evaluation made them; sets that
    runs share are made once, for consecutive runs (the last ones are kept)."""
    datamodule, asked = _datamodule_and_record(config, record["limit"], record["seed"], None)
    assert not identity_differences(record, asked), f"{folder}: {identity_differences(record, asked)}"
    # what the test sets depend on: the data module's settings but the run's own (seed, training data)
    settings = {k: v for k, v in datamodule.hparams.items() if k not in RUN_OWN}
    key = json.dumps([type(datamodule).__name__, settings, asked["sets"]], sort_keys=True, default=str)
    if key not in _SETS:  # the rotated MNIST test sets are the same for every run: made once
        _SETS.clear()
        _SETS[key] = datamodule.evaluation_sets()
    return _SETS[key]


def main(*patterns: str) -> int:
    worst = dict.fromkeys(COLUMNS, 0.0)
    runs = [r["path"] for r in available_pretrained() if any(p in str(r["path"]) for p in patterns or [""])]
    failed = 0
    for folder in runs:
        differences = check_run(folder)
        ok = all(d <= TOLERANCE for d in differences.values())
        failed += not ok
        worst = {c: max(worst[c], differences[c]) for c in COLUMNS}
        shown = ", ".join(f"{c} {d:.2g}" for c, d in differences.items())
        print(f"{'ok' if ok else 'DIFFERS'} {folder.relative_to(PRETRAINED_DIR)}: {shown}", flush=True)
    shown = ", ".join(f"{c} {d:.2g}" for c, d in worst.items())
    print(
        f"{len(runs) - failed} of {len(runs)} shipped runs reproduce their summary.csv; largest differences: {shown}"
    )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
