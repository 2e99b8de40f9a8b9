"""What a run folder holds: a finished run (:func:`completed_run`), or an unfinished one that continues
(:func:`resumable`), trusting nothing in it but weights and counters.

A run on a generated task writes ``checkpoints/last.ckpt`` after every epoch and ``resume.json`` (its
identity) until its model file is written; a later ``train()`` of the same configuration continues
from that checkpoint once the folder (:func:`resumable`) and the checkpoint (:class:`RunCheckpointIO`)
are checked, and the earlier processes' history (:func:`read_history`) holds its epochs.
"""

from __future__ import annotations

import copy
import math
import os
import re
import stat
import sys
from pathlib import Path

import lightning as L
import torch

from ..checkpointing import (
    CheckedCheckpointIO,
    check_adam_settings,
    check_fits,
    check_plateau_schedule,
    holds_adam_state,
    read_checkpoint_file,
    saved_path,
)
from ..untrusted import (
    MAX_TABLE_BYTES,
    CheckpointError,
    DamagedFileError,
    printable,
    read_json,
    read_table,
    shown,
)
from .checkpoints import comparable, read_header
from .config import WEIGHTS, check_same_identity, identity_differences
from .files import atomic_file, plain, remove_inside
from .options import MAX_PARAMETERS
from .processes import PicklableError, is_rank_zero

LAST = "last"  # checkpoints/last.ckpt: the state after the last epoch, what a resumed run reads
BEST = "best"  # checkpoints/best.ckpt (best-v1.ckpt, ...): the best epoch so far
# a Lightning checkpoint of this package's models: the weights and the optimizer's two moments (4 bytes
# each, at most MAX_PARAMETERS of them), and a few MB of counters and callback states
MAX_CHECKPOINT_BYTES = 3 * 4 * MAX_PARAMETERS + 64 * 2**20


def last_checkpoint(checkpoint_dir) -> Path | None:
    """``checkpoint_dir/last.ckpt`` if it is a regular file (never a symbolic link), else ``None``."""
    last = Path(checkpoint_dir) / f"{LAST}.ckpt"
    return last if last.is_file() and not last.is_symlink() else None


def read_checkpoint(path, folder) -> dict:
    """A Lightning checkpoint that this package's ``fit`` wrote in ``folder``, read with every check
    made before the read: the file lies in ``folder`` itself (its real path, no link on the way), and
    :func:`~pondernet_tutorial.checkpointing.read_checkpoint_file` reads it as data (a regular file of
    bounded size, inflating to a bounded size, weights-only).

    Raises:
        CheckpointError: one line on why the file cannot be read; never PyTorch's advice to load it
            unsafely.
    """
    path, folder = Path(path), Path(folder)
    if path.is_symlink() or path.resolve().parent != folder.resolve():
        raise CheckpointError(f"{path} does not lie in {folder}: a checkpoint names only its own folder.")
    return read_checkpoint_file(path, MAX_CHECKPOINT_BYTES)


class RunCheckpointIO(CheckedCheckpointIO):
    """The checkpoints of a run, each written whole (:func:`~.files.atomic_file`), not staged in
    ``$TMPDIR``; the ``last.ckpt`` that a resumed run continues from is read as data
    (:func:`read_checkpoint`) and checked to be this very run's (:func:`check_last_checkpoint`) before
    Lightning restores anything: a refusal is a :class:`CheckpointError`, and ``train()`` starts over."""

    def __init__(
        self,
        max_bytes: int,
        run_dir: Path,
        module,
        datamodule,
        stopping=lambda: None,
        select_by=None,
        inside=None,
    ):
        super().__init__(max_bytes)
        self.run_dir, self.module, self.datamodule = run_dir, module, datamodule
        self.inside = inside  # the output folder: checkpoints are written in it, never through a link
        self.stopping = stopping  # a new EarlyStopping as fit() builds it for the run, or None
        self.select_by = select_by  # what the best epoch is chosen by

    def load_checkpoint(self, path, map_location=None, weights_only=True) -> dict:
        checkpoint = read_checkpoint(path, self.run_dir / "checkpoints")
        # the weights' names first (Lightning's error would quote them); Adam's state below, in detail
        check_fits(checkpoint, self.module, "its last.ckpt", optimizer=False)
        history = check_last_checkpoint(checkpoint, self.run_dir, self.module, self.datamodule)
        replay_plateau_step(checkpoint, history[checkpoint["epoch"]])
        check_early_stopping(checkpoint, history, self.stopping())
        if self.select_by is not None:
            check_best_score(checkpoint, history, self.select_by)
        return checkpoint

    def save_checkpoint(self, checkpoint: dict, path, storage_options=None) -> None:
        if storage_options is not None:
            raise TypeError(f"{type(self).__name__}.save_checkpoint takes no storage_options.")
        self.saved.add(saved_path(path))  # (a removal without inside goes by the parent's rule)
        with atomic_file(self._in_checkpoints(path), "wb", self.inside) as handle:
            torch.save(checkpoint, handle)

    def remove_checkpoint(self, path) -> None:
        if self.inside is None:
            return super().remove_checkpoint(path)
        remove_inside(self._in_checkpoints(path), self.inside, missing_ok=True)  # never through a link

    def _in_checkpoints(self, path) -> Path:
        """``path``, which Lightning names by its real path, as the run's own checkpoints folder names it
        (the output folder may be given through a link of the user's)."""
        folder = self.run_dir / "checkpoints"
        if self.inside is None:
            return Path(path)
        if Path(path).parent.resolve() != folder.resolve():
            raise CheckpointError(f"{path} does not lie in {folder}: a run writes checkpoints only there.")
        return folder / Path(path).name


def replay_plateau_step(checkpoint: dict, last: dict) -> None:
    """Give a ``last.ckpt`` the plateau schedule's step of its own epoch, which it lacks.

    Lightning saves ``last.ckpt`` in ``on_train_epoch_end`` and steps a ``ReduceLROnPlateau`` only
    after that hook, so the checkpoint of epoch E holds the schedule (and the learning rate) from
    before E's step; restored as it is, a resumed run would skip that step and keep a higher rate than
    the same run trained in one go. A schedule that has taken E steps (``last_epoch == E``: epochs 0
    to E−1) is stepped here once more with epoch E's ``val/acc`` (``last``, its row of the history),
    on a stand-in optimiser with the saved rates; one that has taken E + 1 (the fast path steps it
    before the save) is left as it is."""
    schedules, optimizers = checkpoint.get("lr_schedulers") or [], checkpoint.get("optimizer_states") or []
    metric = last.get("val/acc")
    for schedule, optimizer in zip(schedules, optimizers):
        if not isinstance(schedule, dict) or "num_bad_epochs" not in schedule:  # not a plateau schedule
            continue
        if schedule.get("last_epoch") != checkpoint["epoch"] or metric is None or metric != metric:
            continue
        groups = optimizer["param_groups"]
        stand_in = torch.optim.SGD([{"params": [torch.zeros(1)], "lr": float(g["lr"])} for g in groups])
        plateau = torch.optim.lr_scheduler.ReduceLROnPlateau(stand_in)
        plateau.load_state_dict(schedule)
        plateau.step(float(metric))
        schedule.update(plateau.state_dict())
        for group, stepped in zip(groups, stand_in.param_groups):
            group["lr"] = stepped["lr"]


# the identity of the run being trained in a folder, until its model file is written
RESUME_FILE = "resume.json"
TRAINED = "trained"  # resume.json's field: true once the training loop has ended, before the final save


def loop_ended(recorded) -> bool:
    """Whether a run's ``resume.json`` (``recorded``, as read) says that its training loop had ended: a
    run killed in its final save, which draws no batch when it continues."""
    return isinstance(recorded, dict) and recorded.get(TRAINED) is True


# what an unfinished run's folder holds: Lightning's checkpoints (checked one by one) and logs, its
# resume.json, the temporary files of whole writes, and the history and metadata of a run killed in its
# final save (both written again whole when it ends; nothing is read from them)
UNFINISHED = {"checkpoints", "logs", RESUME_FILE, "history.csv", "metadata.json"}
CHECKPOINT_NAME = re.compile(r"(best|last)(-v\d+)?\.ckpt")
# one of them being written whole (files.atomic_file) when its process was killed: removed by the next write
CHECKPOINT_TEMP = re.compile(r"\.(best|last)(-v\d+)?\.ckpt\.\d+-[0-9a-f]+\.tmp")
MAX_ENTRIES = 10_000  # files in an unfinished run's folder: a few checkpoints and log files
# what the loggers write in logs/: the csv logger a folder version_<n> per sitting, with its metrics.csv
# (appended to by its own sitting), the temporary file of its whole writes, an older engine's hparams.yaml;
# tensorboard its event files and hparams.yaml in logs/ itself; wandb a tree of its own in logs/wandb
SITTING = re.compile(r"version_\d+")
SITTING_FILE = re.compile(r"metrics\.csv|hparams\.yaml|\.metrics\.csv\.\d+-[0-9a-f]+\.tmp")
# tensorboard's event file (events.out.tfevents.<time>.<host>.<pid>.<n>[.v2]) and hparams.yaml
LOGS_FILE = re.compile(r"events\.out\.tfevents\.\d+\..+\.\d+\.\d+(\.v2)?|hparams\.yaml")
# what wandb writes in logs/wandb: a run's folder (all of it is wandb's), latest-run, its debug logs
# (debug.log, debug-internal.log; `wandb sync` run there adds debug-cli.<user>.log)
WANDB_ENTRY = re.compile(r"(offline-)?run-\d{8}_\d{6}-.+|latest-run|debug(-[a-z]+)?(\.[^/]+)?\.log")


class KeptRunError(PicklableError, CheckpointError):
    """A run folder that train() would remove and train again, kept as it is: an unfinished run whose
    last.ckpt may be whole, or a folder that holds what no run writes (the user's), in one line that
    says why and what to do."""

    def __init__(self, run_dir: Path, reason: str, remedy: str, what: str = "unfinished run"):
        # a file's name may hold a line break: the error stays one line, and ends with one full stop
        reason = printable(reason).rstrip(".")
        super().__init__(f"the {what} in {run_dir} is kept: {reason}. {remedy}")
        self.reason = reason  # what --overwrite's line says when it trains the run again


class DamagedHistoryError(KeptRunError):
    """Its history logs cannot be read, or lack epochs that its ``last.ckpt`` trained."""

    def __init__(self, run_dir: Path, reason: str):
        super().__init__(run_dir, reason, f"Mend its logs from a copy, or {RETRAIN}.")


RETRAIN = "train it again from its first epoch with --overwrite"


CLOCK = ("epoch_time_s", "train_time_s", "lr")  # EpochClock's columns, after the epoch and before the metrics


def read_history(logs: Path) -> list[dict]:
    """The run's history, one row per epoch (its epoch, :data:`CLOCK`, and every ``train/`` and ``val/``
    metric), from the ``metrics.csv`` that Lightning's csv logger writes in ``logs/version_<n>/``, one
    folder per process that trained the run (a resumed run has several). Each epoch is taken from the
    last process that logged it: a process killed mid-epoch logged part of an epoch that the next one
    trained again. A row that the logger did not finish (a full disk, a kill while it appended) is
    not read. Every file is read bounded and must hold numbers, the files together at most
    :data:`~pondernet_tutorial.untrusted.MAX_TABLE_BYTES`; a sitting or metrics file that is a link
    (Lightning makes neither) is not read, so no file is read twice.

    Raises:
        CheckpointError: a metrics file is not a table of numbers by epoch.
        DamagedFileError: a metrics file is not a regular file of bounded size (an ``OSError``).
    """
    import pandas as pd

    sittings = sorted(
        (int(match[1]), path / "metrics.csv")
        for path in (logs.iterdir() if logs.is_dir() else ())
        # any number of digits (a name holds at most 255): Lightning's next sitting after version_9999999999
        # is version_10000000000, and a sitting left unread would lose its epochs
        if (match := re.fullmatch(r"version_(\d+)", path.name))
        and not path.is_symlink()  # Lightning makes a folder per sitting: a link would read one twice
    )
    sittings = [path for _, path in sittings if path.is_file() and not path.is_symlink()]
    # a table's bound holds for the whole history, not for each sitting: checked before any read
    if sum(path.stat().st_size for path in sittings) > MAX_TABLE_BYTES:
        raise CheckpointError(f"its history logs hold more than {MAX_TABLE_BYTES:,} bytes")
    rows: dict[int, dict] = {}
    for path in sittings:
        # the rows the logger finished: a disk that filled, or a kill, while it appended leaves a last
        # row cut short (no newline), or an empty file; neither is a damaged history
        table = read_table(path, follow_links=False, float_precision="round_trip", whole_lines=True)
        if table.columns.empty:
            continue
        metrics = sorted(c for c in table.columns if str(c).startswith(("train/", "val/")))
        columns = [c for c in ("epoch", *CLOCK) if c in table] + metrics
        epochs = table.get("epoch", pd.Series(dtype=float)).dropna()
        if (
            "epoch" not in table
            or not all(pd.api.types.is_numeric_dtype(table[c]) for c in columns)
            or not ((epochs >= 0) & (epochs % 1 == 0) & (epochs < 2**31)).all()
        ):
            raise CheckpointError(f"its history {path.relative_to(logs)} is not a table of numbers by epoch")
        merged = table[columns].dropna(subset=["epoch"]).groupby("epoch", sort=True).first()
        if len(merged):
            for epoch in [e for e in rows if e >= merged.index.min()]:  # trained again by this process
                del rows[epoch]
        for epoch, values in merged.iterrows():
            rows[int(epoch)] = {
                "epoch": int(epoch),
                **{k: float(v) for k, v in values.items() if pd.notna(v)},
            }
    return [rows[epoch] for epoch in sorted(rows)]


def cannot_continue(run_dir: Path, reason) -> None:
    """Say in one line why an unfinished run is trained again; its folder is removed when training
    starts again (its last.ckpt and resume.json with it)."""
    if is_rank_zero():
        text = shown(reason, 400) or type(reason).__name__
        print(
            f"warning: the unfinished run in {run_dir} cannot be continued ({text}): trained again",
            file=sys.stderr,
        )


def kept_unfinished(run_dir: Path, error: BaseException) -> None:
    """Say in one line that the unfinished run in ``run_dir`` is kept: restoring it failed for a reason
    of the machine's (out of memory, an I/O error), which says nothing of its files."""
    if is_rank_zero():
        text = shown(error, 400) or type(error).__name__
        print(
            f"note: the unfinished run in {run_dir} is kept as it is; restoring it failed ({text}). "
            "Rerun the same command once that is fixed: it continues from its last epoch.",
            file=sys.stderr,
        )


def _check_unfinished_folder(run_dir: Path, top_level=UNFINISHED, what: str = "an unfinished run") -> None:
    """Raise ``CheckpointError`` unless every entry of the folder is one that a run writes: no link but
    in wandb's own tree, ``logs/wandb/`` (``logs`` or ``checkpoints`` pointing elsewhere would make
    Lightning write or delete there; no link is followed, and removing one removes the link), no FIFO or
    device, only Lightning's own checkpoint files in ``checkpoints/`` and the loggers' files in
    ``logs/``."""
    try:
        _check_entries(run_dir, top_level, what)
    except CheckpointError:  # (a RuntimeError too)
        raise
    except RecursionError as error:  # os.walk recurses once per level
        raise CheckpointError(f"its folders nest too deep ({type(error).__name__})") from None


def _check_entries(run_dir: Path, top_level=UNFINISHED, what: str = "an unfinished run") -> None:
    entries = 0
    for folder, names, files in os.walk(run_dir):  # os.walk never follows links
        here = Path(folder)
        for name in [*names, *files]:
            entries += 1
            if entries > MAX_ENTRIES:  # before the next lstat: a folder of millions is refused at once
                raise CheckpointError(f"it holds more than {MAX_ENTRIES:,} files")
            path = here / name
            info = os.lstat(path)
            relative = path.relative_to(run_dir)
            top, regular, folder_ = relative.parts[0], stat.S_ISREG(info.st_mode), stat.S_ISDIR(info.st_mode)
            if stat.S_ISLNK(info.st_mode):  # wandb's own (latest-run, its debug logs in ~/.cache/wandb):
                if relative.parts[:2] != ("logs", "wandb") or len(relative.parts) == 2:  # never followed
                    raise CheckpointError(f"{relative} is a symbolic link outside wandb's logs")
                continue
            if not (regular or folder_):
                raise CheckpointError(f"{relative} is not a regular file")
            if len(relative.parts) == 1:
                if top in ("checkpoints", "logs") and not folder_:
                    raise CheckpointError(f"{relative} is not a folder")
                temp = regular and _a_temp_of(name, {*top_level, WEIGHTS})  # a kill in the final save
                if top not in top_level and not temp:  # a whole write's temporary file, named by its file
                    raise CheckpointError(f"{relative} is not a file of {what}")
                if top in top_level and top not in ("checkpoints", "logs") and not regular:
                    raise CheckpointError(f"{relative} is not a regular file")
            elif top == "checkpoints" and not (
                len(relative.parts) == 2
                and (CHECKPOINT_NAME.fullmatch(name) or CHECKPOINT_TEMP.fullmatch(name))
                and regular
            ):
                raise CheckpointError(f"{relative} is not a checkpoint of the run")
            elif top == "logs" and not _a_log(relative.parts[1:], regular, folder_):
                if len(relative.parts) == 2 and SITTING.fullmatch(name):  # the csv logger would fail on it
                    raise CheckpointError(f"{relative} is not a folder of the run's history")
                raise CheckpointError(f"{relative} is not a file of the run's logs")


def _a_temp_of(name: str, files) -> bool:
    """Whether ``name`` is the temporary file of a whole write (files.atomic_file) of one of ``files``."""
    return any(re.fullmatch(rf"\.{re.escape(file)}\.\d+-[0-9a-f]+\.tmp", name) for file in files)


def _a_log(parts: tuple, regular: bool, folder: bool) -> bool:
    """Whether ``logs/<parts>`` is what a logger writes (:data:`SITTING`, :data:`LOGS_FILE`)."""
    if parts[0] == "wandb":  # wandb's own tree (its links are checked above)
        return folder if len(parts) == 1 else bool(WANDB_ENTRY.fullmatch(parts[1]))
    if SITTING.fullmatch(parts[0]):  # the csv logger takes the next version_<n> not held by a folder
        return (
            folder
            if len(parts) == 1
            else len(parts) == 2 and regular and bool(SITTING_FILE.fullmatch(parts[1]))
        )
    return len(parts) == 1 and regular and bool(LOGS_FILE.fullmatch(parts[0]))


def check_last_checkpoint(checkpoint: dict, run_dir: Path, module, datamodule) -> list[dict]:
    """Raise ``CheckpointError`` unless the run's ``last.ckpt`` (read) is this very run's: with the
    hyperparameters of the module and of the data module that this configuration builds, a history
    that holds its epochs, and optimizer states of the module's shapes. These are what Lightning would
    restore without a word; what fails in its restore (weights of other shapes, a damaged generator
    state or history) is one line in :func:`train`, which then trains the run again. Returns the
    run's history (:func:`read_history`), which holds the checkpoint's epochs."""
    for what, saved, expected in (
        ("model", checkpoint.get("hyper_parameters"), module.hparams),
        ("data", checkpoint.get("datamodule_hyper_parameters"), datamodule.hparams),
    ):
        if not isinstance(saved, dict) or comparable(saved) != comparable(expected):
            differences = "; ".join(identity_differences(dict(saved or {}), dict(expected)))
            raise CheckpointError(f"its {what} hyperparameters are not this configuration's: {differences}")
    epochs = checkpoint.get("epoch")
    if not isinstance(epochs, int) or epochs < 0:
        raise CheckpointError(f"its epoch is {epochs!r}, not a count")
    # a history that cannot be read, or that lacks epochs, says nothing of the checkpoint: kept
    try:
        history = read_history(run_dir / "logs")
    except (CheckpointError, DamagedFileError) as error:
        raise DamagedHistoryError(run_dir, str(error)) from None
    # the bound first: a forged epoch of 10^9 must not build a list of 10^9 numbers
    if epochs >= len(history) or [row["epoch"] for row in history[: epochs + 1]] != list(range(epochs + 1)):
        raise DamagedHistoryError(
            run_dir, f"its history does not hold epochs 0 to {epochs}, which its last.ckpt trained"
        )
    if any(row.keys() != history[0].keys() for row in history[: epochs + 1]):
        raise DamagedHistoryError(run_dir, "its history lacks values of the epochs of its last.ckpt")
    parameters = [tuple(p.shape) for p in module.parameters()]
    optimizers = checkpoint.get("optimizer_states")
    if not isinstance(optimizers, list) or len(optimizers) != 1:  # the module's one Adam
        raise CheckpointError("it does not hold the state of the run's one optimizer")
    (optimizer,) = optimizers  # Lightning restores it unchecked
    state = optimizer.get("state", {}) if isinstance(optimizer, dict) else None
    if not holds_adam_state(state, parameters):
        raise CheckpointError("its optimizer state is not Adam's for this model's weights")
    if set(state) != trained_weights(module, datamodule):  # (a weight without state restarts Adam's)
        raise CheckpointError("its optimizer holds Adam's state for other weights than a step trains")
    steps = {float(values["step"]) for values in state.values()}
    if steps != {float(checkpoint.get("global_step", -1))}:  # every weight stepped at every update
        raise CheckpointError("its optimizer's step counts are not its number of updates")
    check_adam_settings(optimizer.get("param_groups"), float(module.hparams.lr), len(parameters))
    progress = ((checkpoint.get("loops") or {}).get("fit_loop") or {}).get("epoch_progress") or {}
    total = progress.get("total") if isinstance(progress, dict) else None
    if (
        not isinstance(total, dict)
        or any(total.get(key) != epochs + 1 for key in ("ready", "started", "processed"))
        or total.get("completed") not in (epochs, epochs + 1)
    ):  # Lightning resumes from these counters: forged, they skip or repeat epochs
        raise CheckpointError("its training loop's epoch counters are not those of its epoch")
    for schedule in checkpoint.get("lr_schedulers") or []:
        check_plateau_schedule(schedule, module.hparams, epochs)
    return history


def trained_weights(module, datamodule) -> set[int]:
    """The indices (in ``module.parameters()``) of the weights that a training step gives a gradient,
    found by one forward and backward pass of a copy of the model on two validation samples: Adam keeps
    state for exactly these (every weight, but a halting head that the method never trains, as
    FixedSteps's). The module itself and the random state are left as they were."""
    model = copy.deepcopy(module.model).train()  # batch-norm statistics and gradients move in the copy
    index = {name: i for i, (name, _) in enumerate(module.named_parameters())}
    devices = [p.device for p in model.parameters() if p.device.type == "cuda"][:1]
    with torch.random.fork_rng(devices=devices):
        x, y = (t[:2].to(module.device) for t in next(iter(datamodule.val_dataloader()))[:2])
        model.loss(model(x), y)["loss"].backward()
    return {index[f"model.{name}"] for name, p in model.named_parameters() if p.grad is not None}


def check_early_stopping(checkpoint: dict, history: list[dict], stopping) -> None:
    """Raise ``CheckpointError`` unless ``checkpoint`` holds the early-stopping state that ``stopping``
    (a new ``EarlyStopping``, as :func:`~pondernet_tutorial.fitting.fit` builds it for the run; ``None``
    for a run without one) reaches over the history's validation accuracies up to the checkpoint's
    epoch, Lightning's own rule applied again. Lightning restores the saved state as it is: a forged one
    (a patience of 0, a best score of three values) would end the run early or break every resume, and
    a forged history would not match it."""
    states = checkpoint.get("callbacks")
    if not isinstance(states, dict):
        raise CheckpointError("it does not hold its callbacks' states")
    key = stopping.state_key if stopping is not None else None
    if any(str(k).startswith("EarlyStopping") and k != key for k in states):
        raise CheckpointError("its early stopping is not the run's")
    if stopping is None or not hasattr(stopping, "_evaluate_stopping_criteria"):
        return  # (the rule is Lightning's private method: a version without it restores the state as is)
    last = checkpoint["epoch"]  # within the history (check_last_checkpoint)
    for epoch, row in enumerate(history[: last + 1]):
        accuracy = row.get("val/acc")
        if not isinstance(accuracy, float):
            raise CheckpointError(f"its history holds no validation accuracy for epoch {epoch}")
        stop, reason = stopping._evaluate_stopping_criteria(torch.tensor(accuracy))
        if stop:  # as EarlyStopping._run_early_stopping_check records it
            stopping.stopped_epoch, stopping.stopping_reason_message = epoch, reason
            if epoch < last:
                raise CheckpointError(f"its history stopped early at epoch {epoch}, before its last.ckpt's")
    saved, replayed = states.get(key), stopping.state_dict()
    fields = ("wait_count", "stopped_epoch", "best_score", "patience", "stopping_reason")
    if not isinstance(saved, dict) or any(
        not _same(saved.get(field), replayed.get(field)) for field in fields if field in replayed
    ):
        raise CheckpointError("its early stopping's state is not the one its history gives")


def check_best_score(checkpoint: dict, history: list[dict], select_by: str) -> None:
    """Raise ``CheckpointError`` unless the best epoch's score that ``checkpoint`` records (the state of
    the callback that keeps the best epoch by ``select_by``) is the best value of ``select_by`` in the
    history up to the checkpoint's epoch: a forged score (-1 for a loss) would keep a worse epoch."""
    from ..fitting import mode

    values = [row.get(select_by) for row in history[: checkpoint["epoch"] + 1]]
    for key, state in checkpoint["callbacks"].items():
        if not (str(key).startswith("FolderCheckpoint") and isinstance(state, dict)):
            continue
        if state.get("monitor") != select_by:
            continue
        if not values or not all(isinstance(v, (int, float)) and math.isfinite(v) for v in values):
            raise CheckpointError(f"its history lacks finite values of {select_by}")
        best = torch.tensor(float((min if mode(select_by) == "min" else max)(values)))  # float32, as logged
        if not _same(state.get("best_model_score"), best):
            raise CheckpointError(f"its best epoch's score is not the best {select_by} of its history")


def _same(saved, replayed) -> bool:
    """Whether a saved value is the replayed one: equal plain numbers, or one-element tensors of one value."""
    if torch.is_tensor(replayed):
        return torch.is_tensor(saved) and saved.numel() == 1 and float(saved) == float(replayed)
    return type(saved) is type(replayed) and saved == replayed


def resumable(run_dir: Path, identity: dict, datamodule, overwrite: bool = False) -> bool:
    """Whether ``run_dir`` holds an unfinished run of this very configuration (``identity`` in its
    ``resume.json``) that can continue: the data module keeps its batches' state (not MNIST's) or the
    training loop had ended (a kill in the final save), the folder
    holds only what a run writes, and it has a ``checkpoints/last.ckpt`` (:class:`RunCheckpointIO` checks
    it as it is loaded). Nothing that is not this run's is removed unless ``overwrite`` asks for it.

    Raises:
        KeptRunError: the folder holds an entry that no run writes (a file of the user's, a link).
        ConfigMismatchError: it holds an unfinished run of another configuration.
    """
    if not (run_dir / RESUME_FILE).exists() or (run_dir / WEIGHTS).exists() or run_dir.is_symlink():
        return False
    stateless = type(datamodule).state_dict is L.LightningDataModule.state_dict  # MNIST's: never continues
    try:
        _check_unfinished_folder(run_dir)  # before resume.json is read
    except CheckpointError as error:  # any other error (an I/O error) is raised: the run is kept
        if not overwrite:
            raise KeptRunError(
                run_dir,
                str(error),
                "Move that entry away to train the run here, or pass --overwrite, which removes it."
                if stateless
                else f"Remove that entry to continue it, or {RETRAIN}.",
            ) from None
        cannot_continue(run_dir, error)
        return False
    recorded = read_json(run_dir / RESUME_FILE, follow_links=False)
    saved = recorded.get("identity") if isinstance(recorded, dict) else None
    trained = os.path.lexists(run_dir / "checkpoints" / "last.ckpt")  # a link too: refused above
    if trained and not isinstance(saved, dict):  # written whole: damaged by hand
        reason = f"its {RESUME_FILE} records no configuration"
        if not overwrite:
            raise KeptRunError(run_dir, reason, f"Mend it from a copy, or {RETRAIN}.")
        cannot_continue(run_dir, reason)
        return False
    if isinstance(saved, dict) and not overwrite:  # another configuration's epochs are never removed unasked
        check_same_identity(saved, identity, f"the unfinished run in {run_dir}")
    # a run killed in its final save (resume.json says "trained": the loop had ended) draws no batch
    # when it continues: it continues, data module or not, and loses no epoch
    if stateless and not loop_ended(recorded):
        if trained:
            cannot_continue(run_dir, "its data module keeps no state of its batches, as MNIST's")
        return False
    return trained and saved == plain(identity)


def check_only_run_files(run_dir: Path) -> None:
    """Raise :class:`KeptRunError` if ``run_dir``, which train() is about to remove and train again (a
    run not finished, damaged, or pruned of its model file), holds an entry that no run writes: a file
    of the user's is never removed unasked."""
    from .evaluation import EVALUATION_FILES

    try:  # every entry, at every depth, as an unfinished run's are checked, with a finished run's names
        _check_unfinished_folder(run_dir, {*UNFINISHED, WEIGHTS, *EVALUATION_FILES}, "a run")
    except CheckpointError as error:
        raise KeptRunError(
            run_dir,
            str(error),
            "Move it away to train the run here, or pass --overwrite, which removes it.",
            "folder",
        ) from None


def read_metadata(run_dir: Path) -> dict | None:
    """A run's ``metadata.json``; ``None`` if it is missing or damaged (empty, not JSON)."""
    return read_json(Path(run_dir) / "metadata.json", follow_links=False)  # no link out of the run


def completed_run(run_dir: Path, identity: dict | None = None, expected: dict | None = None) -> dict | None:
    """The metadata of a finished run: its ``metadata.json`` parses and records ``identity`` (the
    requested configuration's, :meth:`TrainConfig.identity`), and its ``model.safetensors`` is a whole
    model file (:func:`~.checkpoints.read_header`) of the hyperparameters that the metadata records
    and the requested module has (``expected``). ``None`` for a run that is not there or not finished
    (no model file). Nothing is built or loaded: whoever loads the model checks it whole
    (:func:`~.checkpoints.load_model`).

    Raises:
        ConfigMismatchError: the folder holds a run of another configuration than ``identity``.
        KeptRunError: it holds a model file, and its records or the file are damaged: the run is kept
            (train() with ``overwrite`` trains it again without asking this function).
    """
    run_dir = Path(run_dir)
    if not (run_dir / WEIGHTS).exists():
        return None  # not trained, or killed before its weights were written: trained again
    metadata = read_metadata(run_dir)
    problem = None
    if metadata is None or not isinstance(metadata.get("identity"), dict):
        problem = "its metadata.json is missing or damaged"
    else:
        if identity is not None:  # a run of another configuration is never replaced silently
            check_same_identity(metadata["identity"], identity, f"the run in {run_dir}")
        try:
            recorded = plain(read_header(run_dir / WEIGHTS, follow_links=False)[0])  # no link out of the run
            if recorded != plain(metadata.get("hparams")):
                problem = f"its {WEIGHTS} is not the model that its metadata.json records"
            elif expected is not None and comparable(recorded) != comparable(expected):
                problem = f"its {WEIGHTS} is not the model of this configuration"
        except CheckpointError as error:
            problem = str(error)
    if problem is None:
        return metadata
    # its model file is written last: a kill never leaves it beside a damaged record, so the damage
    # is someone's, and the training it holds is never removed unasked
    raise KeptRunError(run_dir, problem, f"Mend it from a copy, or {RETRAIN}.", "finished run")
