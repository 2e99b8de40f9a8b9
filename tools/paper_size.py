"""The paper's parity at its own size: 64 elements, and 96 trained on k 1-48, each to 500,000 updates.

Eight runs of the paper's network (Banino et al. 2021, §3.1 and appendix B; the set-up of
``parity-paper64-interpolation`` and ``parity-paper96-extrapolation`` in the registry): PonderNet at
λ_p = 0.1 and ACT at Graves's halting bias +1 and τ = 2e-3 (the 16-element study's τ), two seeds each.
Each run trains to 500,000 updates whatever its accuracy: the stopping rule is the update count. Every
10,000 updates it scores the weights of that moment on 8,000 vectors of the training range and, at 96
elements, 8,000 of the unseen range (the same vectors and the same halting coins each time), and
appends the scores to ``curve.csv``; the scores never select weights: a run ends with its last update's.

    python tools/paper_size.py OUT --runs 64:pondernet:0 64:act:0     # train (or continue) these runs
    python tools/paper_size.py OUT --cost 64:pondernet:0              # seconds per 10,000 updates
    python tools/paper_size.py OUT --quick                            # tests only: 2 epochs of 4 batches
    python tools/paper_size.py OUT --ship [--runs ...]                # the runs so far into the study
    python tools/paper_size.py OUT --rescore                          # the shipped weights on fresh vectors

Resumable across sittings: ``checkpoints/last.ckpt`` is written after every 1,000 updates with the
weights, Adam's moments and step counts, the training batches' generator and the curve's clock, so a
run continued from it goes on as one uninterrupted run (``tests/runs/test_paper_size.py`` kills one
and checks that it ends on the same weights). A finished run has ``model.safetensors`` (the last
update's weights, the package's model file) and ``metadata.json`` (the update count reached, the
measured wall time of the kept epochs, the sittings, the code it ran).

Run it from a frozen copy of the code (``git worktree add --detach DIR COMMIT``, then
``PYTHONPATH=DIR python DIR/tools/paper_size.py ...``) so that editing the package never touches a
run; ``metadata.json`` records which copy of the package ran.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

import lightning as L
import pandas as pd
import torch
from lightning.pytorch.callbacks import Callback

import pondernet_tutorial
from pondernet_tutorial.analysis.paper_claims import SEEDS, STUDY, UPDATES, difference_in_se, wilson
from pondernet_tutorial.checkpointing import FolderCheckpoint
from pondernet_tutorial.data.base import EvalSet
from pondernet_tutorial.fitting import AS_DATA, StopOnNonFinite
from pondernet_tutorial.runs.build import make_datamodule, make_module, trainer_options
from pondernet_tutorial.runs.checkpoints import CheckpointError, load_model, save_weights
from pondernet_tutorial.runs.config import PRETRAINED_DIR, TrainConfig
from pondernet_tutorial.runs.evaluation import range_scores
from pondernet_tutorial.runs.files import write_csv, write_json
from pondernet_tutorial.runs.resume import LAST, last_checkpoint, read_checkpoint
from pondernet_tutorial.runs.training import hardware, library_versions, quiet_lightning
from pondernet_tutorial.untrusted import read_json, read_table

BATCHES_PER_EPOCH = 1_000  # an epoch of the data module: 1,000 batches of 128
EVERY = 10  # epochs between two points of the curve: 10,000 updates
VECTORS = 8_000  # vectors per scored range
SCORE_SEED = 2107_05407  # the scored vectors' generator (plus the range's first k): none of training's
EXPERIMENTS = {64: "parity-paper64-interpolation", 96: "parity-paper96-extrapolation"}
METHODS = {"pondernet": {}, "act": {"tau": 2e-3}}  # λ_p = 0.1 and the halting bias +1: the experiments'
RUNS = tuple(f"{n}:{method}:{seed}" for n in (64, 96) for method in METHODS for seed in SEEDS)


def parse_run(run: str) -> tuple[int, str, int]:
    """``"96:act:1"`` as ``(96, "act", 1)``; a one-line ``SystemExit`` (status 2) for anything else."""
    parts = run.split(":")
    if len(parts) != 3 or not parts[0].isdigit() or int(parts[0]) not in EXPERIMENTS:
        raise SystemExit(f"error: a run is SIZE:METHOD:SEED with SIZE 64 or 96, got {run!r}")
    if parts[1] not in METHODS or not parts[2].isdigit():
        raise SystemExit(f"error: a run is SIZE:METHOD:SEED, METHOD one of {', '.join(METHODS)}, got {run!r}")
    return int(parts[0]), parts[1], int(parts[2])


def run_config(n: int, method: str, seed: int, compile: bool | None = None) -> TrainConfig:
    """The configuration of one run: the paper's set-up of the experiment, no stopping but the count."""
    options = {"compile": compile} if compile is not None else {}
    return TrainConfig.from_options(
        experiment=EXPERIMENTS[n],
        method=method,
        seed=seed,
        epochs=UPDATES // BATCHES_PER_EPOCH,
        early_stopping_patience=0,
        stop_at_val_acc=0.0,
        progress_bar=False,
        **METHODS[method],
        **options,
    )


def score_sets(datamodule, vectors: int, offset: int = 0) -> dict[str, EvalSet]:
    """The scored ranges: the training range (``seen``) and, where training leaves some out, the unseen
    range (``unseen``); ``vectors`` each, ``k`` uniform over the range, drawn once from a generator of
    their own (the same vectors at every point of the curve; ``offset``: other, fresh vectors)."""
    ranges = {"seen": datamodule.train_k}
    if tuple(datamodule.test_k) != tuple(datamodule.train_k):
        ranges["unseen"] = datamodule.test_k
    sets = {}
    for name, k_range in ranges.items():
        generator = torch.Generator().manual_seed(SCORE_SEED + offset + datamodule.n_elements + k_range[0])
        inputs, labels, k = datamodule.draw(vectors, tuple(k_range), generator)
        sets[name] = EvalSet(name, inputs, labels, per_sample={"k": k})
    return sets


class Curve(Callback):
    """Every ``every`` epochs and at the last one: each range's accuracy and mean halting step (the same
    vectors and coins each time), the update count and the wall time so far, appended to ``curve.csv``.

    The wall time is measured, epoch by epoch, from the start of an epoch's first update to the end of
    its scoring; its sum travels in the checkpoint (``state_dict``), so a resumed run goes on counting
    (the unfinished epoch of a killed sitting is trained again and counted once)."""

    def __init__(self, path: Path, sets: dict[str, EvalSet], every: int):
        self.path, self.sets, self.every = path, sets, every
        self.wall_s, self.sittings, self._start = 0.0, 1, None

    def state_dict(self) -> dict:
        return {"wall_s": self.wall_s, "sittings": self.sittings}

    def load_state_dict(self, state_dict: dict) -> None:
        wall, sittings = state_dict.get("wall_s"), state_dict.get("sittings")
        if not isinstance(wall, float) or not isinstance(sittings, int) or wall < 0 or sittings < 1:
            raise ValueError("its curve's clock is not a time and a count of sittings")
        self.wall_s, self.sittings = wall, sittings + 1

    def on_train_epoch_start(self, trainer, pl_module):
        self._start = time.perf_counter()

    def on_train_epoch_end(self, trainer, pl_module):
        epoch = trainer.current_epoch + 1
        last = epoch == trainer.max_epochs
        row = None
        if epoch % self.every == 0 or last:
            row = {"updates": trainer.global_step, "epochs": epoch, **range_scores(pl_module, self.sets)}
        self.wall_s += time.perf_counter() - self._start
        if row is not None:
            row["wall_s"] = round(self.wall_s, 1)
            rows = read_table(self.path) if os.path.lexists(self.path) else pd.DataFrame()  # bounded, regular
            if len(rows):
                rows = rows[rows.epochs < epoch]  # an epoch trained again after a kill: its new row
            rows = pd.concat([rows, pd.DataFrame([row])]).sort_values("epochs")
            write_csv(self.path, rows, index=False, float_format="%.6g")  # written whole, never in place
            print(f"{self.path.parent.name}: {row}", flush=True)


def code_version() -> dict:
    """Which copy of the package ran, and at which commit."""
    root = Path(pondernet_tutorial.__file__).resolve().parents[1]
    commit = subprocess.run(
        ["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True, check=False
    ).stdout.strip()
    dirty = subprocess.run(
        ["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"],
        capture_output=True,
        text=True,
        check=False,
    ).stdout.strip()
    return {"commit": commit or None, "changed_files": bool(dirty), "package": str(root.name)}


def train_run(
    spec: str,
    out: Path,
    epochs: int | None = None,
    batches: int = BATCHES_PER_EPOCH,
    every: int = EVERY,
    vectors: int = VECTORS,
    compile: bool | None = None,
) -> Path:
    """Train (or continue) one run into ``out/<size>-<method>-seed<k>``; return its folder."""
    n, method, seed = parse_run(spec)
    config = run_config(n, method, seed, compile)
    epochs = epochs or config.epochs
    folder = out / f"{n}-{method}-seed{seed}"
    if (folder / "model.safetensors").is_file():
        print(f"{folder}: finished", flush=True)
        return folder
    checkpoints = folder / "checkpoints"
    checkpoints.mkdir(parents=True, exist_ok=True)
    resume = last_checkpoint(checkpoints)
    if resume is not None:
        read_checkpoint(resume, checkpoints)  # the checks before Lightning reads it
    L.seed_everything(seed, workers=True, verbose=False)
    datamodule = make_datamodule(config)
    datamodule.batches_per_epoch = batches
    module = make_module(config)
    curve = Curve(folder / "curve.csv", score_sets(datamodule, vectors), every)
    last = FolderCheckpoint(dirpath=checkpoints, filename=LAST, enable_version_counter=False)
    options = trainer_options(config) | {"logger": False, "limit_val_batches": 0}
    trainer = L.Trainer(max_epochs=epochs, callbacks=[curve, StopOnNonFinite(), last], **options)
    trainer.fit(module, datamodule=datamodule, ckpt_path=resume, **AS_DATA)
    if trainer.current_epoch < epochs:  # stopped early (interrupted): stays resumable
        raise SystemExit(f"{folder}: stopped after {trainer.global_step:,} updates; run again to continue")
    record = {
        "run": spec,
        "experiment": config.experiment,
        "method": method,
        "seed": seed,
        "method_options": config.method_kwargs(),
        "updates": trainer.global_step,
        "updates_required": epochs * batches,
        "stopped_by": "update count",
        "selection": "none: the weights are the last update's",
        "wall_time_s": round(curve.wall_s, 1),
        "sittings": curve.sittings,
        "optimizer": "Adam, its moments and step counts kept across sittings in checkpoints/last.ckpt",
        "scored": {
            name: [int(s.per_sample["k"].min()), int(s.per_sample["k"].max())]
            for name, s in curve.sets.items()
        },
        "vectors_per_range": vectors,
        "code": code_version(),
        "hardware": hardware(trainer),
        "versions": library_versions(),
    }
    module.cpu()
    save_weights(module, folder / "model.safetensors.partial")
    write_json(folder / "metadata.json", record)
    (folder / "model.safetensors.partial").replace(folder / "model.safetensors")  # last: finished
    print(f"{folder}: done, {record['updates']:,} updates in {record['wall_time_s']:,.0f} s", flush=True)
    return folder


def last_weights(spec: str, folder: Path):
    """The run's weights after its last update (``model.safetensors``, or an unfinished run's
    ``last.ckpt``), as a module, the updates they have had, and the clock's state when they were
    kept (the measured wall time and the sittings)."""
    n, method, seed = parse_run(spec)
    module = make_module(run_config(n, method, seed, compile=False))
    if (folder / "model.safetensors").is_file():
        module.load_state_dict(load_model(folder / "model.safetensors").state_dict())
        record = read_json(folder / "metadata.json")
        return (
            module,
            int(record["updates"]),
            {"wall_s": record["wall_time_s"], "sittings": record["sittings"]},
        )
    checkpoint = read_checkpoint(folder / "checkpoints" / "last.ckpt", folder / "checkpoints")
    module.load_state_dict(checkpoint["state_dict"])
    clock = next((v for k, v in checkpoint.get("callbacks", {}).items() if k.startswith("Curve")), {})
    return module, int(checkpoint["global_step"]), clock


def ship(out: Path, destination: Path, runs: tuple[str, ...] = RUNS) -> pd.DataFrame:
    """Each of ``runs`` trained so far into ``destination`` (the shipped study): ``curves.csv`` (every point of
    every run), ``runs.csv`` (one row a run: the updates it reached, finished or not, its measured wall
    time and sittings, the score of its last weights with 95% Wilson intervals: the curve's last point,
    or for an unfinished run that kept weights past it, those weights scored now) and each run's last weights
    (``weights/<size>-<method>-seed<k>.safetensors``). An unfinished run ships what it reached, marked
    so, and stays resumable in ``out``; a run left out of ``runs`` (one that has only just started) is
    not shipped."""
    curves, rows = [], []
    (destination / "weights").mkdir(parents=True, exist_ok=True)
    for spec in RUNS:
        if spec not in runs:
            continue
        n, method, seed = parse_run(spec)
        folder = out / f"{n}-{method}-seed{seed}"
        if not (folder / "curve.csv").is_file():
            continue
        module, updates, clock = last_weights(spec, folder)
        curve = read_table(folder / "curve.csv")
        curve = curve[curve["updates"] <= updates]  # a point past the weights kept: a killed epoch's
        end = curve.iloc[-1].to_dict()
        finished = (folder / "model.safetensors").is_file()
        if end["updates"] != updates:  # an unfinished run kept weights past its last point: score them
            datamodule = make_datamodule(run_config(n, method, seed, compile=False))
            end = {"updates": updates, **range_scores(module, score_sets(datamodule, VECTORS))}
        row = {"size": n, "method": method, "seed": seed, "updates": updates, "finished": finished}
        row["stopped_by"] = "update count" if finished else f"not finished: {updates:,} of {UPDATES:,}"
        row["wall_time_s"], row["sittings"] = clock.get("wall_s"), clock.get("sittings")
        for name in ("seen", "unseen"):
            if pd.notna(end.get(f"{name}_accuracy")):
                share, count = float(end[f"{name}_accuracy"]), int(end[f"{name}_n"])
                low, high = wilson(share, count)
                row |= {f"{name}_accuracy": share, f"{name}_low": low, f"{name}_high": high}
                row |= {f"{name}_steps": float(end[f"{name}_steps"]), f"{name}_n": count}
        rows.append(row)
        curves.append(curve.assign(size=n, method=method, seed=seed))
        save_weights(module, destination / "weights" / f"{n}-{method}-seed{seed}.safetensors")
    if not rows:
        raise SystemExit(f"error: no run in {out} has a point of its curve yet")
    runs = pd.DataFrame(rows)
    table = pd.concat(curves)
    first = ["size", "method", "seed"]
    write_csv(destination / "curves.csv", table[first + [c for c in table if c not in first]], index=False)
    write_csv(destination / "runs.csv", runs, index=False, float_format="%.6g")
    print(f"shipped {len(runs)} runs ({int(runs['finished'].sum())} finished) to {destination}")
    return runs


def rescore(study: Path, vectors: int = VECTORS, seed: int = 1) -> pd.DataFrame:
    """Each shipped run's weights scored again on ``vectors`` fresh vectors per range (drawn from a
    generator of another seed than the curve's, with other coins) and compared with the shipped last
    point: agreement is a difference within 3 standard errors of the two shares combined."""
    runs, rows = read_table(study / "runs.csv"), []
    for _, run in runs.iterrows():
        n, method, seed_run = int(run["size"]), str(run["method"]), int(run["seed"])
        module = load_model(study / "weights" / f"{n}-{method}-seed{seed_run}.safetensors")
        datamodule = make_datamodule(run_config(n, method, seed_run, compile=False))
        sets = score_sets(datamodule, vectors, offset=seed * 1_000_003)
        scores = range_scores(module, sets, seed=seed)
        for name in sets:
            fresh, fresh_n = scores[f"{name}_accuracy"], scores[f"{name}_n"]
            shipped, count = float(run[f"{name}_accuracy"]), int(run[f"{name}_n"])
            rows.append(
                {"size": n, "method": method, "seed": seed_run, "range": name, "shipped": shipped,
                 "fresh": fresh, "difference_in_se": difference_in_se(shipped, count, fresh, fresh_n)}
            )  # fmt: skip
    table = pd.DataFrame(rows)
    table["agrees"] = table["difference_in_se"].abs() <= 3
    print(table.to_string(index=False, float_format=lambda v: f"{v:.4f}"))
    return table


def cost(spec: str, out: Path, batches: int = 300) -> None:
    """Seconds per 10,000 updates of one run's training step (no scoring), from the median of three
    epochs of ``batches`` updates after one epoch that compiles; written to ``out/cost.json``."""
    n, method, seed = parse_run(spec)
    config = run_config(n, method, seed)
    L.seed_everything(seed, verbose=False)
    datamodule = make_datamodule(config)
    datamodule.batches_per_epoch = batches
    module = make_module(config)
    times = []

    class Clock(Callback):
        def on_train_epoch_start(self, trainer, pl_module):
            self.start = time.perf_counter()

        def on_train_epoch_end(self, trainer, pl_module):
            times.append(time.perf_counter() - self.start)

    options = trainer_options(config) | {
        "logger": False,
        "limit_val_batches": 0,
        "enable_checkpointing": False,
    }
    L.Trainer(max_epochs=4, callbacks=[Clock()], **options).fit(module, datamodule=datamodule)
    per_10k = sorted(t / batches * 10_000 for t in times[1:])[1]
    out.mkdir(parents=True, exist_ok=True)
    costs = read_json(out / "cost.json") or {}
    costs[spec] = {"s_per_10k_updates": round(per_10k, 1), "torch_threads": torch.get_num_threads()}
    write_json(out / "cost.json", costs)
    print(f"{spec}: {per_10k:.0f} s per 10,000 updates ({torch.get_num_threads()} thread)", flush=True)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--runs", nargs="+", default=list(RUNS), help="SIZE:METHOD:SEED, e.g. 96:act:1")
    parser.add_argument("--cost", action="store_true", help="time the training step of each run instead")
    parser.add_argument("--quick", action="store_true", help="tests only: 2 epochs of 4 batches")
    study = PRETRAINED_DIR / "studies" / STUDY
    for flag, what in (
        ("--ship", "write the runs so far into the shipped study"),
        (
            "--rescore",
            "score the shipped weights again on fresh vectors and compare with the shipped last points",
        ),
    ):
        parser.add_argument(
            flag,
            nargs="?",
            const=study,
            type=Path,
            metavar="DIR",
            help=f"{what} (default: pretrained/studies/{STUDY})",
        )
    parser.add_argument("--updates", type=int, help=argparse.SUPPRESS)  # tests: fewer updates
    parser.add_argument("--batches", type=int, default=BATCHES_PER_EPOCH, help=argparse.SUPPRESS)  # per epoch
    parser.add_argument("--no-compile", action="store_true", help=argparse.SUPPRESS)  # tests
    args = parser.parse_args(argv)
    torch.set_num_threads(1)  # two runs side by side on two cores
    for run in args.runs:
        parse_run(run)
    if args.ship:
        ship(args.out, args.ship, tuple(args.runs))
        return 0
    if args.rescore:
        return 0 if rescore(args.rescore)["agrees"].all() else 1
    for run in args.runs:
        try:
            with quiet_lightning():
                one(run, args)
        except (OSError, CheckpointError) as error:  # a damaged or odd file in the run's folder: one line
            print(f"error: {error}", file=sys.stderr)
            return 2
    return 0


def one(run: str, args) -> None:
    """Time, quick-train or train one run, as the arguments say."""
    if args.cost:
        cost(run, args.out)
    elif args.quick:
        train_run(run, args.out, epochs=2, batches=4, every=1, vectors=50, compile=False)
    else:
        epochs = args.updates // args.batches if args.updates else None
        compile = False if args.no_compile else None
        train_run(run, args.out, epochs=epochs, batches=args.batches, compile=compile)


if __name__ == "__main__":
    sys.exit(main())
