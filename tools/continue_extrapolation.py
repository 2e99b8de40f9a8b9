"""Continue the paper-parity extrapolation runs to 500,000 updates and record the unseen range.

The shipped runs of ``parity-paper16-long`` on extrapolation (trained on k 1-8 of 16 elements) stopped
once their validation accuracy reached 99.9%, after 50,000 to 216,000 updates, while the interpolation
runs went on to 500,000. This continues each of the four PonderNet and ACT runs from its shipped
weights to 500,000 updates, whatever its validation accuracy, and every 10,000 updates measures the
accuracy on the unseen range (k 9-16, 1,000 vectors per k: the shipped test set) and on the
training range (k 1-8, 1,000 per k). The curve never selects the weights: the run ends with the last update's.

What the shipped runs did not keep is told in ``metadata.json``: the optimiser's moments (Adam starts
again from zero at the shipped weights); the training batches continue the run's own stream exactly
(the stream is replayed up to the shipped update).

    python tools/continue_extrapolation.py OUT [--runs pondernet:0 act:1] [--quick]
    python tools/continue_extrapolation.py OUT --ship    # the finished curves into the shipped study

Resumable: a run folder with ``last.ckpt`` continues from it; a finished one (``model.safetensors``)
is skipped. ``--quick`` (tests only) trains 2 epochs of 4 batches and records every epoch. ``--ship``
writes ``continued.csv`` (every run's curve), ``continued.json`` (what each run continued from) and
each run's last weights (``continued/<method>-seed<k>.safetensors``) into the study's shipped tables.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import lightning as L
import pandas as pd
import torch
from lightning.pytorch.callbacks import Callback

from pondernet_tutorial.checkpointing import FolderCheckpoint
from pondernet_tutorial.data.base import EvalSet, data_generator
from pondernet_tutorial.fitting import AS_DATA
from pondernet_tutorial.runs.build import make_datamodule, make_module
from pondernet_tutorial.runs.checkpoints import CheckpointError, load_model, save_weights
from pondernet_tutorial.runs.cli import Parser  # a mistake in the arguments: one line, exit status 2
from pondernet_tutorial.runs.config import PRETRAINED_DIR
from pondernet_tutorial.runs.evaluation import range_scores
from pondernet_tutorial.runs.files import write_csv
from pondernet_tutorial.runs.resume import last_checkpoint, read_checkpoint
from pondernet_tutorial.runs.studies import get_study
from pondernet_tutorial.runs.training import trainer_options
from pondernet_tutorial.untrusted import read_json, read_table

TOTAL_EPOCHS = 500  # an epoch is 1,000 batches of 128: 500,000 updates
EVERY = 10  # epochs between two points of the curve: 10,000 updates
UNSEEN, SEEN = (9, 16), (1, 8)
RUNS = ("pondernet:0", "pondernet:1", "act:0", "act:1")


def shipped_config(method: str, seed: int):
    """The shipped extrapolation run of ``parity-paper16-long`` (PonderNet, or ACT at τ = 2e-3)."""
    for config in get_study("parity-paper16-long").configs(output_dir=str(PRETRAINED_DIR)):
        if (
            config.experiment == "parity-paper16-extrapolation"
            and config.method == method
            and config.seed == seed
            and config.method_options.get("learn_halting") is not False
        ):
            return config
    raise SystemExit(f"no shipped run {method} seed {seed}")


def ranges(datamodule) -> dict[str, EvalSet]:
    """The shipped test set (k 9-16, the unseen range) and a set like it on the training range (k 1-8)."""
    seen = type(datamodule)(
        n_elements=datamodule.n_elements, train_k=SEEN, test_k=SEEN, test_subset=datamodule.test_subset
    )
    (unseen,), (seen,) = datamodule.evaluation_sets(), seen.evaluation_sets()
    assert unseen.per_sample["k"].min() == UNSEEN[0] and unseen.per_sample["k"].max() == UNSEEN[1]
    return {"unseen": unseen, "seen": seen}


class Curve(Callback):
    """Every ``every`` epochs (counted from the first update of the original run), the accuracy on each
    range and the mean halting step, appended to ``curve.csv``; a resumed run keeps the rows before."""

    def __init__(self, path: Path, sets: dict[str, EvalSet], start_epoch: int, every: int):
        self.path, self.sets, self.start_epoch, self.every = path, sets, start_epoch, every

    def record(self, module, epoch: int) -> None:
        row = {"updates": epoch * 1000, "epochs": epoch, **range_scores(module, self.sets)}
        rows = read_table(self.path) if os.path.lexists(self.path) else pd.DataFrame()  # bounded, regular
        rows = pd.concat([rows[rows.epochs != epoch] if len(rows) else rows, pd.DataFrame([row])])
        write_csv(self.path, rows.sort_values("epochs"), index=False, float_format="%.6g")  # whole
        print(f"{self.path.parent.name}: {row}", flush=True)

    def on_train_epoch_end(self, trainer, pl_module):
        epoch = self.start_epoch + trainer.current_epoch + 1
        if epoch % self.every == 0 or trainer.current_epoch + 1 == trainer.max_epochs:
            self.record(pl_module, epoch)


def continue_run(method: str, seed: int, out: Path, quick: bool) -> None:
    config = shipped_config(method, seed)
    shipped = config.run_dir
    metadata = read_json(shipped / "metadata.json")
    start_epoch = int(metadata["epochs_run"])
    assert metadata["best_epoch"] == start_epoch - 1, "the shipped weights are not the last epoch's"
    folder = out / f"{method}-seed{seed}"
    if (folder / "model.safetensors").is_file():
        print(f"{folder}: finished")
        return
    (folder / "checkpoints").mkdir(parents=True, exist_ok=True)
    torch.manual_seed(seed)
    module = make_module(config)
    module.load_state_dict(load_model(shipped / "model.safetensors", config=config).state_dict())
    datamodule = make_datamodule(config, test_subset=50 if quick else None)
    if quick:
        datamodule.batches_per_epoch = 4
    sets = ranges(datamodule)
    curve = Curve(folder / "curve.csv", sets, start_epoch, 1 if quick else EVERY)
    checkpoint_dir = folder / "checkpoints"
    resume = last_checkpoint(checkpoint_dir)
    if resume is None:
        curve.record(module, start_epoch)  # the shipped weights themselves
        # the training batches continue the run's own stream: replay it up to the shipped update, and
        # hand its state to the data module as a resumed run's checkpoint would
        generator = data_generator(config.seed, datamodule.stream)
        for _ in range(start_epoch * datamodule.batches_per_epoch):
            datamodule.draw(datamodule.batch_size, datamodule.train_k, generator)
        datamodule.load_state_dict({"train_generator": generator.get_state()})
    else:
        read_checkpoint(resume, checkpoint_dir)  # the checks before Lightning reads it
    epochs = 2 if quick else TOTAL_EPOCHS - start_epoch
    last = FolderCheckpoint(dirpath=checkpoint_dir, filename="last", enable_version_counter=False)
    options = trainer_options(config) | {"enable_progress_bar": False, "logger": False}
    trainer = L.Trainer(max_epochs=epochs, callbacks=[last, curve], **options)
    began = time.time()
    trainer.fit(module, datamodule=datamodule, ckpt_path=resume, **AS_DATA)
    record = {
        "continues": str(shipped.relative_to(shipped.parents[2])),
        "from_updates": start_epoch * 1000,
        "to_updates": (start_epoch + epochs) * 1000,
        "optimizer": "Adam restarted from zero moments at the shipped weights (the shipped run kept none)",
        "training_batches": "the run's own stream, continued where the shipped run stopped",
        "selection": "none: the weights are the last update's",
        "unseen_k": list(UNSEEN),
        "seen_k": list(SEEN),
        "wall_time_s_last_sitting": round(time.time() - began, 1),
        "torch_threads": torch.get_num_threads(),
    }
    (folder / "metadata.json").write_text(json.dumps(record, indent=2) + "\n")
    save_weights(module, folder / "model.safetensors")
    print(f"{folder}: done", flush=True)


def ship(out: Path) -> None:
    """The four finished runs' curves, records and last weights into the shipped study's folder."""
    import shutil

    study = PRETRAINED_DIR / "studies" / "parity-paper16-long"
    curves, records = [], {}
    (study / "continued").mkdir(exist_ok=True)
    for run in RUNS:
        method, _, seed = run.partition(":")
        folder = out / f"{method}-seed{seed}"
        record = read_json(folder / "metadata.json")
        if record is None or not (folder / "model.safetensors").is_file():
            raise SystemExit(f"{folder} has not finished: continue it first")
        curve = read_table(folder / "curve.csv")
        assert curve["updates"].max() == TOTAL_EPOCHS * 1000, f"{folder} stops before 500,000 updates"
        curves.append(curve.assign(method=method, seed=int(seed)))
        records[f"{method}-seed{seed}"] = {k: v for k, v in record.items() if not k.startswith("wall")}
        shutil.copyfile(
            folder / "model.safetensors", study / "continued" / f"{method}-seed{seed}.safetensors"
        )
    table = pd.concat(curves)[["method", "seed", *curves[0].columns[:-2]]]
    write_csv(study / "continued.csv", table, index=False, float_format="%.6g")
    (study / "continued.json").write_text(json.dumps(records, indent=2) + "\n")
    print(f"shipped {len(table)} points of {len(curves)} runs to {study}")


def main(argv=None) -> int:
    parser = Parser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", type=Path)
    parser.add_argument(
        "--runs",
        nargs="+",
        default=list(RUNS),
        choices=RUNS,
        metavar="METHOD:SEED",
        help=f"the runs to continue, method:seed: {', '.join(RUNS)} [all four]",
    )
    parser.add_argument("--quick", action="store_true", help="tests only: 2 epochs of 4 batches")
    parser.add_argument("--ship", action="store_true", help="write the finished curves into the study")
    args = parser.parse_args(argv)
    if args.ship:
        ship(args.out)
        return 0
    torch.set_num_threads(1)
    for run in args.runs:
        method, _, seed = run.partition(":")
        try:
            continue_run(method, int(seed), args.out, args.quick)
        except (OSError, CheckpointError) as error:  # a damaged or odd file in the run's folder: one line
            print(f"error: {error}", file=sys.stderr)
            return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
