"""Train one run of any registered experiment with a standard Lightning ``Trainer``.

``train(TrainConfig(experiment="mnist-extrapolation", seed=0))`` trains the reference PonderNet on
digits rotated within ±22.5°. The run folder (:attr:`TrainConfig.run_dir`) gets ``history.csv`` (one
row per epoch, from Lightning's csv logger in ``logs/``), ``metadata.json`` (the configuration and its identity, stopping, timing, hardware,
versions; no path of the machine) and, last, ``model.safetensors`` (weights only, the epoch with the best
validation accuracy, picked by Lightning's ``ModelCheckpoint``). Each file is written whole, and one
process at a time trains into a folder (:mod:`~pondernet_tutorial.runs.files`). A run counts as finished
only when its metadata parses and its ``model.safetensors`` is a whole model file of the hyperparameters
that the metadata records (:func:`~.resume.completed_run`): one that failed or was killed is simply
trained again.
"""

from __future__ import annotations

import contextlib
import logging
import os
import platform
import re
import statistics
import time
import warnings
from pathlib import Path

import lightning as L
import pandas as pd
import torch
from lightning.pytorch.callbacks import Callback

from ..checkpointing import FolderCheckpoint, checkpoint_bound
from ..fast_path import GraphedPonderLitModule
from ..fitting import early_stopping, fit, mode
from ..untrusted import read_json, says_nothing_of_files
from .build import (
    check_fits_data,
    check_logger_available,
    check_trainer,
    make_datamodule,
    make_loggers,
    make_module,
    trainer_options,
    use_cuda_graph,
)
from .checkpoints import save_weights
from .config import WEIGHTS, TrainConfig, check_not_shipped
from .files import (
    WriteFailedError,
    check_inside,
    check_unlocked,
    folder_lock,
    is_write_refusal,
    remove_inside,
    remove_stale_temps,
    write_csv,
    write_failed,
    write_json,
)
from .module import RunModule
from .processes import PicklableError, end_with_parent, is_rank_zero, mark_parent, stop_on_signals
from .resume import (
    BEST,
    LAST,
    RESUME_FILE,
    TRAINED,
    DamagedHistoryError,
    RunCheckpointIO,
    cannot_continue,
    check_only_run_files,
    completed_run,
    kept_unfinished,
    last_checkpoint,
    loop_ended,
    read_history,
    resumable,
)

# Paths of the machine that trained a run: never recorded in its metadata (results are shared).
MACHINE_FIELDS = ("data_dir", "output_dir")


class EpochClock(Callback):
    """Each epoch's wall time (training and validation, ``epoch_time_s``), its training steps' own
    (``train_time_s``, up to the start of the validation) and the learning rate, logged to the run's
    loggers beside the module's metrics. :attr:`first_epoch`: the first epoch this process trains (the
    epochs before it were restored from a checkpoint), set once everything restored has been restored."""

    def __init__(self):
        self.first_epoch: int | None = None
        self._start = self._trained = None  # this epoch's start; its training steps' time

    def on_train_start(self, trainer, pl_module):
        self.first_epoch = trainer.current_epoch

    def on_train_epoch_start(self, trainer, pl_module):
        self._start, self._trained = time.perf_counter(), None

    @staticmethod
    def _now(pl_module) -> float:
        """The time once the device has done what the training steps queued (CUDA runs ahead)."""
        if pl_module.device.type == "cuda":
            torch.cuda.synchronize()
        return time.perf_counter()

    def on_validation_start(self, trainer, pl_module):
        fitting = trainer.state.fn == "fit" and not trainer.sanity_checking
        if fitting and self._start is not None and self._trained is None:
            self._trained = self._now(pl_module) - self._start

    def on_train_epoch_end(self, trainer, pl_module):
        now = self._now(pl_module) - self._start
        row = {"epoch": trainer.current_epoch, "epoch_time_s": round(now, 3)}
        row["train_time_s"] = round(self._trained if self._trained is not None else now, 3)
        if trainer.optimizers:
            row["lr"] = float(trainer.optimizers[0].param_groups[0]["lr"])
        for logger in trainer.loggers:
            logger.log_metrics(row, step=trainer.global_step)
            logger.save()


# The training engine's version, recorded in every run's metadata: 1 flipped coins in training and
# drew the training data from the global generator; 2 has no host synchronisation in a training step,
# logs expectations in training, draws the data from a generator of its own and drops the last,
# partial batch of an epoch; 3 builds parity_rnn's tanh cell without first building and discarding a
# GRU cell, so a seed of parity_rnn starts from other weights than under 2 (other steps are unchanged);
# 4 computes ACT's validation loss over training's N steps, as the other methods do (3 counted the
# whole evaluation unroll: pointer chasing keeps ACT's epoch of the lowest validation loss by it).
# Runs of an older engine are not retrained for a newer one.
ENGINE_VERSION = 4


def library_versions() -> dict:
    import lightning
    import torchmetrics

    return {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "lightning": lightning.__version__,
        "torchmetrics": torchmetrics.__version__,
    }


def hardware(trainer: L.Trainer) -> dict:
    info = {
        "accelerator": type(trainer.accelerator).__name__,
        "devices": trainer.num_devices,
        "cpu_count": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "machine": platform.machine(),
        "processor": platform.processor() or platform.machine(),
    }
    if torch.cuda.is_available() and "CUDA" in info["accelerator"]:
        info["gpu"] = torch.cuda.get_device_name(0)
    return info


# What the package's own use of Lightning prints and a user cannot act on, silenced by its exact words
# (every other warning and message is kept): Lightning's advertisement for its cloud logger and its
# device lines, and PyTorch's deprecation of the LeafSpec that Lightning itself calls.
NOISE_WARNINGS = (r"`isinstance\(treespec, LeafSpec\)` is deprecated", r"`LeafSpec` is deprecated")
NOISE_LOGS = (
    re.compile(r"Tip: For seamless cloud logging .*litlogger"),
    # Lightning's start-up lines, once per Trainer (twice per `train`: training, then evaluation); the
    # run's accelerator is in its metadata.json and in the command's own output
    re.compile(r"^(?:GPU|TPU|HPU|IPU) available: "),
)
NOISE_LOGGERS = ("lightning.pytorch.utilities.rank_zero", "lightning.fabric.utilities.rank_zero")


class _DropNoise(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return not any(pattern.search(record.getMessage()) for pattern in NOISE_LOGS)


@contextlib.contextmanager
def quiet_lightning():
    """Within the block, drop :data:`NOISE_WARNINGS` and :data:`NOISE_LOGS`, and nothing else; the
    caller's warning filters and loggers come back after it."""
    noise = _DropNoise()
    loggers = [logging.getLogger(name) for name in NOISE_LOGGERS]
    with warnings.catch_warnings():
        for message in NOISE_WARNINGS:
            warnings.filterwarnings("ignore", message=message)
        for logger in loggers:
            logger.addFilter(noise)
        try:
            yield
        finally:
            for logger in loggers:
                logger.removeFilter(noise)


def train(
    config: TrainConfig, overwrite: bool = False, wait: bool = False, ship: bool = False
) -> tuple[RunModule, dict]:
    """Train one run and write ``history.csv``, ``metadata.json`` and ``model.safetensors`` to its folder.

    Everything is checked before the folder is made. A finished run (:func:`~.resume.completed_run`) is
    replaced only with ``overwrite``; an unfinished one of this configuration on a generated task
    continues (:func:`resumable`), as does one on any task that was killed in its final save. An
    unfinished run of another configuration, or one that cannot continue as it is (its logs or records
    damaged, an entry in its folder that no run writes), is kept and replaced only with ``overwrite``; any other (MNIST's, a damaged checkpoint) is trained again, in
    one line that says why. Another process training into the folder
    raises :class:`~.files.FolderLockedError`, or with ``wait`` is waited for. In a multi-process (DDP)
    run only rank 0 writes; the other ranks return ``(module, None)``.

    Args:
        config: the run (:class:`~.config.TrainConfig`; its ``run_dir`` is the folder).
        overwrite: train a finished run again, in place of the one there, and an unfinished one that
            is kept without it (an unfinished run of this configuration that can continue still
            continues: rerunning an interrupted ``overwrite`` loses no epoch).
        wait: wait for another process that trains into the folder, instead of refusing.
        ship: train into the package's shipped ``pretrained/`` folder (what ``reproduce --ship``
            does); without it an ``output_dir`` there or below it is refused (``ValueError``).

    Returns:
        the module with its best weights loaded (eval mode) and the metadata dictionary.

    Raises:
        RunExistsError: the folder holds this run, finished, and ``overwrite`` is not given.
        ConfigMismatchError: it holds a run of another configuration, and ``overwrite`` is not given.
        KeptRunError: it holds an unfinished run that cannot continue as it is, a finished one whose
            records or model file are damaged, or an entry that no run writes (a file of the user's),
            and ``overwrite`` is not given.
        StepDoesNotFitError: the step function fails on the experiment's data (checked on two samples).
        TrainingDivergedError: the loss or the weights stopped being finite; no model is saved.
        Interrupted: (a ``KeyboardInterrupt``) on Ctrl-C, SIGTERM or SIGHUP; the folder keeps no
            ``model.safetensors``, and the next call continues the run (a generated task) or trains
            it again (MNIST).
    """
    with stop_on_signals(), quiet_lightning():  # a stop is a failure, never Lightning's exit status 0
        return _train(config, overwrite, wait, ship)


def _train(config: TrainConfig, overwrite: bool, wait: bool, ship: bool) -> tuple[RunModule, dict]:
    end_with_parent()  # a rank started by Lightning for a multi-process run ends with rank 0
    if not ship:  # the shipped runs are the package's data: only reproduce --ship replaces them
        check_not_shipped(config.output_dir, "output_dir")
    run_dir = config.run_dir
    check_inside(run_dir, config.output_dir)  # never a lock, mkdir or rmtree outside the output folder
    if not wait:
        check_unlocked(run_dir, doing="training it")  # say so before anything is built
    check_logger_available(config.logger)
    graphed = use_cuda_graph(config, check_trainer(config))  # the Trainer's settings, checked

    def prepare():  # the same draws every time: the seed first, then the data module and the weights
        L.seed_everything(config.seed, workers=True, verbose=False)
        datamodule = make_datamodule(config)
        datamodule.prepare_data()  # the data is there (or downloaded) before anything is written
        return datamodule, make_module(config, graphed=graphed)

    datamodule, module = prepare()
    check_fits_data(config, module, datamodule)  # one dry forward pass: the step takes this data
    identity = config.identity()  # what the folder's records must hold
    check_inside(run_dir, config.output_dir)  # again: the folders on the way may have changed meanwhile
    with folder_lock(run_dir, wait=wait, doing="training it"):  # one process at a time per run folder
        if not overwrite and is_rank_zero():  # the other ranks of a DDP run join rank 0's and write nothing
            if completed_run(run_dir, identity, module.hparams) is not None:
                raise RunExistsError(run_dir, "already holds this trained run")
        # every rank of a DDP run decides alike: they all read the same last checkpoint, or none
        # never a finished run: its model file is there
        resume = resumable(run_dir, identity, datamodule, overwrite)
        start = time.perf_counter()
        while True:
            if is_rank_zero():
                if run_dir.exists() and not resume:  # an unfinished or damaged run, or one to overwrite
                    if not overwrite:
                        check_only_run_files(run_dir)  # a file of the user's is never removed unasked
                    remove_inside(run_dir, config.output_dir)
                check_inside(run_dir, config.output_dir)  # what the lock's wait may have let change
                # the folder made with it, never through a link (files.atomic_file); a run whose loop had
                # ended keeps saying so, whatever stops this sitting
                ended = resume and loop_ended(read_json(run_dir / RESUME_FILE, follow_links=False))
                write_json(
                    run_dir / RESUME_FILE,
                    {"identity": identity, **({TRAINED: True} if ended else {})},
                    config.output_dir,
                )
                if resume:  # an earlier sitting's metrics.csv is never written again: a kill's temp goes
                    for sitting in sorted((run_dir / "logs").glob("version_*")):
                        remove_stale_temps(sitting, config.output_dir)
                mark_parent()  # the ranks that fit() starts end with this process
            clock, loggers = EpochClock(), None
            try:
                checkpoints = run_dir / "checkpoints"
                trainer, best_epoch = fit(
                    module,
                    datamodule,
                    config.epochs,
                    select_by=config.select_by,
                    patience=config.early_stopping_patience,
                    stop_at_val_acc=config.stop_at_val_acc or None,
                    best=FolderCheckpoint(
                        checkpoints, BEST, monitor=config.select_by, mode=mode(config.select_by)
                    ),
                    # the file resumable() checked (ckpt_path="last" takes the newest last*.ckpt by its time)
                    ckpt_path=last_checkpoint(checkpoints) if resume else None,
                    # last.ckpt after every epoch (not save_last=True: Lightning then writes it only
                    # in the epochs that improve the best): what a resumed run reads
                    callbacks=[FolderCheckpoint(checkpoints, LAST, enable_version_counter=False), clock],
                    logger=(loggers := make_loggers(config, run_dir / "logs")),
                    checkpoint_io=RunCheckpointIO(
                        checkpoint_bound(module),
                        run_dir,
                        module,
                        datamodule,
                        stopping=lambda: early_stopping(
                            config.early_stopping_patience, config.stop_at_val_acc or None, config.epochs
                        ),
                        select_by=config.select_by,
                        inside=config.output_dir,
                    ),
                    **trainer_options(config),
                )
                break
            except Exception as error:  # restoring the unfinished run failed: trained again, from scratch
                if is_write_refusal(error) and not isinstance(error, WriteFailedError):
                    # the logger's own write (no file name in the error): name its file in the run folder
                    raise write_failed(
                        error, error.filename or _log_file(loggers, run_dir / "logs"), whole=False
                    ) from None
                if not resume or clock.first_epoch is not None:
                    raise
                # out of memory, an I/O error: the run is kept, not retrained
                if says_nothing_of_files(error):
                    kept_unfinished(run_dir, error)
                    raise
                if isinstance(error, DamagedHistoryError):  # its logs, not its last.ckpt: kept unless asked
                    if not overwrite:
                        raise
                    cannot_continue(run_dir, error.reason)
                else:
                    cannot_continue(run_dir, f"Lightning could not restore it: {error}")
                resume = False
                datamodule, module = prepare()
        wall = time.perf_counter() - start
        if not trainer.is_global_zero:
            return module, None

        # the loop has ended: a kill in the final save below leaves a run that continues without a batch
        write_json(run_dir / RESUME_FILE, {"identity": identity, TRAINED: True}, config.output_dir)
        rows = read_history(run_dir / "logs")
        write_csv(run_dir / "history.csv", pd.DataFrame(rows), config.output_dir, index=False)
        restored = len(rows) if clock.first_epoch is None else clock.first_epoch  # by earlier processes
        epoch_times = [row["epoch_time_s"] for row in rows]
        train_times = [row.get("train_time_s", row["epoch_time_s"]) for row in rows]
        wall += sum(epoch_times[:restored])  # a resumed run: the epochs of earlier processes
        n_train = getattr(datamodule, "train_size", None)
        metadata = {
            "identity": identity,
            # every field but the machine's paths, as TrainConfig.from_options reads it back
            "config": {k: v for k, v in config.options().items() if k not in MACHINE_FIELDS},
            "hparams": dict(module.hparams),
            "epochs_run": len(rows),
            "best_epoch": best_epoch,
            "best_val_acc": rows[best_epoch].get("val/acc") if rows else None,
            "stopped_by": _stopping_reason(trainer.early_stopping_callback, len(rows), config.epochs),
            "wall_time_s": round(wall, 1),
            "resumed": restored > 0,
            "epoch_times_s": epoch_times,
            "train_samples_per_epoch": n_train,
            # the training steps' own speed (validation left out) in the median epoch: the first one
            # also holds torch.compile's compilation and the graph's capture
            "train_samples_per_s": round(n_train / statistics.median(train_times), 1)
            if n_train and train_times
            else None,
            "compiled": module.compiled,
            # a graph was captured and replayed (not when capture failed and every step ran eagerly)
            "cuda_graph": isinstance(module, GraphedPonderLitModule) and module.graph_replays > 0,
            "engine": ENGINE_VERSION,
            "hardware": hardware(trainer),
            "versions": library_versions(),
            "quick": bool(config.quick or config.train_subset),
        }
        write_json(run_dir / "metadata.json", metadata, config.output_dir)
        # the model file first (written whole, then renamed into place): a run with it is complete.
        # Only then go what a rerun would resume from, so that a kill at any moment leaves a finished
        # run or a resumable one, never a lost training
        save_weights(module, run_dir / WEIGHTS, config.output_dir)
        remove_inside(run_dir / "checkpoints", config.output_dir, missing_ok=True)
        remove_inside(run_dir / RESUME_FILE, config.output_dir, missing_ok=True)
        return module, metadata


class RunExistsError(PicklableError, FileExistsError):
    """The run folder holds a finished run: one line that says to pass ``overwrite=True``;
    :attr:`command_line` says it in the command line's words (``--overwrite``)."""

    def __init__(self, run_dir: Path, why: str):
        super().__init__(f"{run_dir} {why}; pass overwrite=True to train it again.")
        self.command_line = f"{run_dir} {why}; pass --overwrite to train it again."


def _log_file(loggers, folder: Path) -> Path:
    """The file that the csv logger among ``loggers`` writes (its metrics.csv), else ``folder``."""
    from lightning.pytorch.loggers import CSVLogger

    csv = next((logger for logger in loggers or () if isinstance(logger, CSVLogger)), None)
    return Path(csv.log_dir) / "metrics.csv" if csv is not None else folder


def _stopping_reason(stopping, epochs_run: int, max_epochs: int) -> str:
    """Why training ended: the epoch budget, or the early-stopping rule that fired (its reason in
    lower case, e.g. ``stopping_threshold`` or ``patience_exhausted``)."""
    reason = getattr(stopping, "stopping_reason", None)  # an enum in Lightning >= 2.5
    if reason is not None and reason.name != "NOT_STOPPED":
        return reason.name.lower()
    if epochs_run >= max_epochs:
        return "max_epochs"
    return "early_stopping" if stopping is not None else "interrupted"
