"""From a configuration to the objects Lightning trains: the data module, the LightningModule (plain,
or with its training step replayed from one CUDA graph where that can be done), the Trainer's
arguments and the run's loggers."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import lightning as L
import torch

from ..fast_path import graph_blockers
from .config import FIELD_OPTIONS, PLATEAU_SETTINGS, TrainConfig
from .module import GraphedRunModule, RunModule
from .options import MAX_PARAMETERS, PARAMETERS_REASON
from .registry import get_experiment, import_path


def make_datamodule(config: TrainConfig, test_rotations=None, test_subset=None):
    """The experiment's data module for a configuration."""
    experiment = get_experiment(config.experiment)
    cls = import_path(experiment.datamodule)
    options = dict(experiment.data_options)
    if test_rotations is not None:
        options["test_rotations"] = test_rotations
    if test_subset is not None:
        options["test_subset"] = test_subset
    return cls(
        data_dir=config.data_dir,
        batch_size=config.batch_size,
        train_subset=config.train_subset,
        seed=config.seed,
        **options,
    )


def make_module(config: TrainConfig, graphed: bool = False) -> RunModule:
    """The LightningModule a configuration describes; ``graphed``: its training step replayed from one
    CUDA graph (:class:`~.module.GraphedRunModule`)."""
    experiment = get_experiment(config.experiment)
    cls = GraphedRunModule if graphed else RunModule
    # the plateau schedule's settings, at their defaults where no plateau schedule reads them: the
    # run's identity leaves them out there, so the module (and its saved record) must too
    plateau = {name: getattr(config, name) for name in PLATEAU_SETTINGS}
    if config.lr_schedule != "plateau":
        plateau = {name: FIELD_OPTIONS[name].default for name in plateau}
    return cls(
        step=config.step,
        n_classes=experiment.n_classes,
        method=config.method,
        step_options=config.step_options,
        method_options=config.method_kwargs(),
        lr=config.lr,
        lr_schedule=config.lr_schedule,
        **plateau,
        grad_clip=config.grad_clip,
        compile=config.compile,
    )


def one_line(error: BaseException) -> str:
    """An error's message on one line of at most 300 characters, ending with a full stop."""
    text = " ".join(line.strip() for line in str(error).splitlines() if line.strip())
    return (text[:300] or type(error).__name__).rstrip(".") + "."


class StepDoesNotFitError(ValueError):
    """The step function fails on the experiment's data (MNIST's step on parity's vectors)."""


def check_fits_data(config: TrainConfig, module: RunModule, datamodule) -> None:
    """One forward pass and loss on two validation samples, before any folder is made: a step function
    that does not fit the experiment's data is one :class:`StepDoesNotFitError`, not a traceback from
    inside Lightning's first step. The validation set is the one training uses (drawn
    from its own seed), and the global random state is left as it was, so training draws the same."""
    datamodule.setup("fit")
    model, training = module.model, module.model.training
    with torch.random.fork_rng(devices=[]), torch.no_grad():
        x, y = (t[:2] for t in next(iter(datamodule.val_dataloader()))[:2])  # a loader draws its seed
        try:  # eagerly (never compiled here), in eval mode: no batch-norm statistics move
            model.eval()
            model.loss(model(x), y)
        except (ValueError, TypeError, RuntimeError, IndexError) as error:
            raise StepDoesNotFitError(
                f"the step function {config.step} does not fit the data of {config.experiment} "
                f"({one_line(error)[:-1]}): choose the experiment's own step function, "
                f"{get_experiment(config.experiment).step}, or one whose input fits."
            ) from None
        finally:
            model.train(training)


class ModelTooLargeError(ValueError):
    """A model of more weights than ``MAX_PARAMETERS``."""


def count_weights(build, what: str | None = None) -> int:
    """The weights and buffers of the module that ``build()`` makes, built on PyTorch's ``meta``
    device, which holds shapes and no memory: the constructors check their options (a ``ValueError``
    that names ``what``), and a model of more than ``MAX_PARAMETERS`` weights is refused before
    anything is allocated."""
    try:
        with torch.device("meta"):
            model = build()
    except (TypeError, ValueError, RuntimeError, OverflowError) as error:
        if isinstance(error, OverflowError) or "Overflow when unpacking" in str(error):  # PyTorch's own words
            raise ModelTooLargeError(
                f"{what or 'the configuration'} gives a size past what PyTorch can count (a model may hold "
                f"{MAX_PARAMETERS:,} weights): choose smaller sizes."
            ) from None
        raise ValueError(f"{what}: {one_line(error)}" if what else one_line(error)) from None
    n = sum(t.numel() for t in model.parameters()) + sum(t.numel() for t in model.buffers())
    if n > MAX_PARAMETERS:
        raise ModelTooLargeError(
            f"{what or 'the configuration'} describes a model of {n:,} weights, more than {MAX_PARAMETERS:,} ({PARAMETERS_REASON}): "
            "choose smaller sizes."
        )
    return n


def check_model(config: TrainConfig) -> None:
    """Check the options of the configuration's method and step function where they are declared, in
    their constructors, before any folder is made or any data is read (:func:`count_weights`)."""
    count_weights(lambda: make_module(config))


class GraphUnavailableError(ValueError):
    """``--cuda-graph`` asked for on a machine or with settings that cannot replay a CUDA graph."""


def use_cuda_graph(config: TrainConfig, trainer: L.Trainer) -> bool:
    """Whether training replays each step from one CUDA graph: ``config.cuda_graph``, or by default
    wherever it can (:func:`~pondernet_tutorial.fast_path.graph_blockers`): every method's training
    step is capturable."""
    reasons = graph_blockers(trainer, config.precision)
    if config.cuda_graph and reasons:
        raise GraphUnavailableError(
            f"--cuda-graph needs {', '.join(reasons)}: drop it or pass --no-cuda-graph."
        )
    return not reasons if config.cuda_graph is None else bool(config.cuda_graph)


def make_loggers(config: TrainConfig, save_dir: Path) -> list:
    """The run's loggers, offline: Lightning's csv logger, always (``version_<n>/metrics.csv``, one
    folder per process that trains the run: the history, :func:`~.resume.read_history`), its file
    written whole in the run folder held open (:func:`held_csv_logger`), and the configured one
    besides: tensorboard or wandb (``offline=True``; they write by path)."""
    from lightning.pytorch import loggers

    csv = held_csv_logger(save_dir, config.output_dir)
    if config.logger == "tensorboard":
        return [csv, loggers.TensorBoardLogger(save_dir, name="", version="")]
    if config.logger == "wandb":
        name = f"{config.experiment}-{config.variant}-seed{config.seed}"
        wandb = loggers.WandbLogger(
            project="pondernet-tutorial", save_dir=str(save_dir), name=name, offline=True
        )
        return [csv, wandb]
    return [csv]


def held_csv_logger(save_dir: Path, inside):
    """Lightning's csv logger, whose ``metrics.csv`` is written in its folder reached from the output
    folder ``inside`` without following a link (:func:`~.files.open_inside`): whole at its first save
    and whenever a column is added (:func:`~.files.atomic_file`), else its new rows appended to the
    regular file opened there without following a link. Lightning's own writer appends by path, so a
    file swapped for a link during training would have been written through; one swapped now is
    replaced whole. Its ``hparams.yaml`` is not written (``metadata.json`` records them)."""
    import csv
    import errno
    import os
    import stat

    from lightning.pytorch import loggers
    from lightning.pytorch.loggers.csv_logs import ExperimentWriter
    from lightning.pytorch.loggers.logger import rank_zero_experiment

    from .files import HELD_FOLDERS, atomic_file, open_inside

    class HeldWriter(ExperimentWriter):
        def __init__(self, log_dir: str):
            self.rows: list[dict] = []  # this process's rows: a resumed run logs to a new version_<n>
            super().__init__(log_dir)

        def log_hparams(self, params) -> None:
            self.hparams.update(params)

        def save(self) -> None:
            if not self.metrics:
                return
            path = Path(self.metrics_file_path)
            if self._record_new_keys() or not self.rows or not HELD_FOLDERS or not self._append(path):
                with atomic_file(path, "w", inside) as file:  # the header changes: the whole file anew
                    writer = csv.DictWriter(file, fieldnames=self.metrics_keys)
                    writer.writeheader()
                    writer.writerows([*self.rows, *self.metrics])
            self.rows += self.metrics
            self.metrics = []

        def _append(self, path: Path) -> bool:
            """Append the new rows to the regular file ``path``; False where it is not one (gone, or
            swapped for a link) or has other names (a hard link): then it is written whole."""
            folder = open_inside(path.parent, inside)
            try:
                flags = os.O_WRONLY | os.O_APPEND | os.O_NOFOLLOW | os.O_NONBLOCK  # a FIFO never blocks
                fd = os.open(path.name, flags, dir_fd=folder)
            except OSError as error:
                if error.errno in (errno.ENOENT, errno.ELOOP, errno.ENXIO):  # gone, a link, a FIFO
                    return False
                raise
            finally:
                os.close(folder)
            with open(fd, "w", encoding="utf-8", newline="") as file:
                info = os.fstat(fd)  # a FIFO is never written into, nor a file of other names (cp -al)
                if not stat.S_ISREG(info.st_mode) or info.st_nlink > 1:
                    return False
                csv.DictWriter(file, fieldnames=self.metrics_keys).writerows(self.metrics)
            return True

    class HeldCSVLogger(loggers.CSVLogger):
        @property
        @rank_zero_experiment
        def experiment(self):
            if self._experiment is None:
                self._fs.makedirs(self.root_dir, exist_ok=True)
                self._experiment = HeldWriter(log_dir=self.log_dir)
            return self._experiment

    return HeldCSVLogger(save_dir, name="")


class MissingPackageError(ValueError):
    """An optional package that the requested option needs is not installed."""


def check_logger_available(logger: str) -> None:
    """Fail before any folder is made if the chosen logger's package is missing."""
    if logger in ("tensorboard", "wandb") and importlib.util.find_spec(logger) is None:
        raise MissingPackageError(f"--logger {logger} needs the {logger} package: pip install {logger}.")


def trainer_options(config: TrainConfig) -> dict:
    """The Trainer's arguments of a run, besides its epochs, callbacks and logger. Gradient clipping is
    the module's own (``grad_clip``, in ``configure_gradient_clipping``)."""
    return {
        "accelerator": config.accelerator,
        "devices": config.devices,
        "strategy": config.strategy,
        "precision": config.precision,
        "enable_progress_bar": config.progress_bar,
        "enable_model_summary": False,
        "deterministic": "warn",  # exact on the CPU; warns instead of failing on GPU ops without a deterministic kernel
        "num_sanity_val_steps": 0,
        # the module logs its training means once, at an epoch's last batch: every step may reach the
        # loggers (a step that logs nothing costs nothing)
        "log_every_n_steps": 1,
    }


def check_trainer(config: TrainConfig) -> L.Trainer:
    """A Trainer of the run's settings, made before anything is written, to check them: a missing
    package (``--accelerator tpu`` without torch_xla) is an error here, and the CUDA-graph decision
    reads its accelerator and world size."""
    try:
        return L.Trainer(max_epochs=config.epochs, logger=False, **trainer_options(config))
    except ModuleNotFoundError as error:
        raise MissingPackageError(
            f"accelerator={config.accelerator!r}, strategy={config.strategy!r} need a missing package ({error}); "
            "install it, or choose --accelerator auto/cpu/gpu."
        ) from error
