"""Train a :class:`~pondernet_tutorial.lightning_module.PonderLitModule` with Lightning, the standard way.

A data module, the module, a ``Trainer`` with a checkpoint of the best epoch (and early stopping where
asked for), ``trainer.fit``, and the best epoch's weights back in the module:

    >>> module = PonderLitModule(PonderNet(ParityStep(n_elements=16), max_steps=20))
    >>> trainer, best_epoch = fit(module, ParityDataModule(), max_epochs=10)

The run machinery (:func:`pondernet_tutorial.runs.training.train`) calls this function inside a run
folder of its own, with a lock, a logger, records and resuming around it.
"""

from __future__ import annotations

import inspect
from numbers import Integral, Real

import lightning as L
import torch
from lightning.pytorch.callbacks import Callback, EarlyStopping, ModelCheckpoint

from .checkpointing import CheckedCheckpointIO, FolderCheckpoint, checkpoint_bound
from .checks import CLASS_ADVICE, check_batch, check_classes, check_step_returns, validates
from .fast_path import fast_module
from .lightning_module import PonderLitModule
from .threads import training_threads

MAX_EPOCHS = 100_000  # an epoch count past this is a typo, not a training


class TrainingDivergedError(RuntimeError):
    """The training loss or the weights became NaN or infinite: the run stops and saves no model."""


class StopOnNonFinite(Callback):
    """Stop a run whose training diverged, at the end of the epoch where it is first seen.

    It reads what the epoch has already computed (the epoch's mean ``train/loss``) and tests the weights
    in one reduction: one host synchronisation per epoch, none in the training step. The weights are
    tested too because the mean loss can stay finite when a metric skips NaN values.
    """

    def on_train_epoch_end(self, trainer, pl_module):
        loss = trainer.callback_metrics.get("train/loss")
        finite_loss = loss is None or bool(torch.isfinite(loss).all())
        weights = [p.detach().isfinite().all() for p in pl_module.parameters() if p.is_floating_point()]
        finite_weights = not weights or bool(torch.stack(weights).all())
        if not (finite_loss and finite_weights):
            what = f"training loss {float(loss)}" if not finite_loss else "weights"
            raise TrainingDivergedError(
                f"training diverged in epoch {trainer.current_epoch + 1} (non-finite {what}); no model was "
                f"saved: check the data and the step function for NaN or infinite values, lower the learning rate "
                f"(lr={pl_module.hparams.get('lr')}) or clip the gradients (the Trainer's "
                "gradient_clip_val; --grad-clip on the command line)."
            )


class StayStopped(Callback):
    """End a run resumed from the checkpoint of the epoch at which early stopping fired (a run killed
    after its last epoch, before its files were written), as the run itself ended: Lightning saves
    the callback's reason (``stopping_reason``) but not the Trainer's decision to stop, and would
    train another epoch."""

    def on_train_start(self, trainer, pl_module):
        reason = getattr(trainer.early_stopping_callback, "stopping_reason", None)  # Lightning >= 2.5
        if reason is not None and reason.name != "NOT_STOPPED":
            trainer.should_stop = True


class CheckBatches(Callback):
    """Refuse a batch that is not ``(inputs, targets)`` of class indices, and (at the first batch of
    training, of validation and of testing) a step function that does not return three values or
    targets outside its classes, in one line, before the step that would fail deep inside
    (:mod:`~pondernet_tutorial.checks`). The targets of every later batch are checked too where they
    lie on the CPU; on an accelerator that would make the host wait at each step, and a bad label of a
    later batch meets torch's own error there."""

    def __init__(self):
        self.classes = {}  # per loop whose first batch was checked: the step's classes (None: not classes)

    def check(self, loop, pl_module, batch):
        check_batch(batch, pl_module.model, pl_module.trainer.precision)
        if loop not in self.classes:
            self.classes[loop] = check_step_returns(pl_module.model, *batch)
        elif self.classes[loop] and batch[1].device.type == "cpu":
            check_classes(batch[1], self.classes[loop], "the step", CLASS_ADVICE)

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        self.check("train", pl_module, batch)

    def on_validation_batch_start(self, trainer, pl_module, batch, batch_idx, dataloader_idx=0):
        self.check("validation", pl_module, batch)

    def on_test_batch_start(self, trainer, pl_module, batch, batch_idx, dataloader_idx=0):
        self.check("test", pl_module, batch)


def early_stopping(
    patience: int | None, stop_at_val_acc: float | None, max_epochs: int
) -> EarlyStopping | None:
    """The early stopping that :func:`fit` adds (none without ``patience`` or ``stop_at_val_acc``)."""
    if not (patience or stop_at_val_acc):
        return None
    return EarlyStopping(
        "val/acc", mode="max", patience=patience or max_epochs, stopping_threshold=stop_at_val_acc
    )


def mode(metric: str) -> str:
    """How ``ModelCheckpoint`` ranks epochs by ``metric``: a name ending in ``loss`` is minimised."""
    return "min" if metric.endswith("loss") else "max"


def check_arguments(
    module, datamodule, max_epochs, patience, stop_at_val_acc, ckpt_path, callbacks, options
) -> None:
    """fit()'s arguments, each refused in one line that says what it takes."""
    if not isinstance(module, PonderLitModule):
        raise TypeError(
            f"need a PonderLitModule, got {type(module).__name__}: wrap a halting method as "
            "PonderLitModule(PonderNet(...))."
        )
    if not isinstance(datamodule, L.LightningDataModule):
        raise TypeError(f"need a LightningDataModule (see from_datasets), got {type(datamodule).__name__}.")
    if (patience or stop_at_val_acc is not None) and not validates(
        datamodule, options.get("limit_val_batches")
    ):  # Lightning fails after an epoch
        raise ValueError(
            "patience and stop_at_val_acc watch the validation accuracy: give the datamodule validation "
            "data (from_datasets(train, val)), or leave them out."
        )
    if options.get("enable_checkpointing") is False:
        raise ValueError("fit keeps the best epoch with a checkpoint: leave enable_checkpointing out.")
    keeps_last = [c.save_last for c in callbacks if isinstance(c, ModelCheckpoint) and c.save_last]
    if ckpt_path == "last" and not keeps_last:  # Lightning would warn and train from scratch
        raise ValueError(
            "fit keeps the best epoch's checkpoint, not the last: continue from that file "
            "(ckpt_path=trainer.checkpoint_callback.best_model_path of the earlier fit), or give "
            "callbacks=ModelCheckpoint(dirpath=..., save_last=True) to both fits."
        )
    if ckpt_path == "last" and "link" in keeps_last:  # its last.ckpt is a link, which is never followed
        raise ValueError(
            'ckpt_path="last" reads last.ckpt, which save_last="link" makes a symbolic link, never '
            "followed here: use save_last=True, or give the file it points to as ckpt_path."
        )
    for name, value, low in (
        ("max_epochs", max_epochs, 1),
        ("patience", 0 if patience is None else patience, 0),
    ):
        if isinstance(value, bool) or not isinstance(value, Integral) or not low <= value <= MAX_EPOCHS:
            raise ValueError(f"{name} must be a whole number from {low} to {MAX_EPOCHS:,}, got {value!r}.")
    if stop_at_val_acc is not None and (
        isinstance(stop_at_val_acc, bool)
        or not isinstance(stop_at_val_acc, Real)
        or not 0 <= stop_at_val_acc <= 1
    ):
        raise ValueError(
            f"stop_at_val_acc must be an accuracy from 0 to 1, or None, got {stop_at_val_acc!r}."
        )


def as_data(fit_method) -> dict:
    """``weights_only=True`` where ``fit_method`` takes it: Lightning from 2.6 asks how to read ckpt_path
    (a checkpoint input reads it as data either way: the package's CheckedCheckpointIO); before 2.6
    ``Trainer.fit`` takes no such argument, and gets none."""
    return {"weights_only": True} if "weights_only" in inspect.signature(fit_method).parameters else {}


AS_DATA = as_data(L.Trainer.fit)


def fit(
    module: PonderLitModule,
    datamodule: L.LightningDataModule,
    max_epochs: int,
    select_by: str = "val/acc",
    patience: int | None = 0,
    stop_at_val_acc: float | None = None,
    best: FolderCheckpoint | None = None,
    ckpt_path=None,
    callbacks=(),
    threads: int | None = None,
    checkpoint_io: CheckedCheckpointIO | None = None,
    fast: bool | None = None,
    **trainer_options,
) -> tuple[L.Trainer, int]:
    """Train ``module`` on ``datamodule`` and load the weights of its best epoch into it (eval mode).

    Args:
        module: the :class:`~pondernet_tutorial.PonderLitModule` to train (in training mode where it
            is in eval mode, as an earlier fit leaves it); it ends in eval mode, on the CPU, with its
            best epoch's weights.
        datamodule: a ``LightningDataModule`` (``LightningDataModule.from_datasets`` wraps datasets).
        max_epochs: the most epochs to train, 1 to :data:`MAX_EPOCHS`.
        select_by: the logged metric that picks the best epoch (``val/acc``; a name ending in ``loss``
            is minimised; ``epoch``, which Lightning's checkpoint callback also ranks by, keeps the last).
        patience: stop after this many epochs without a better validation accuracy (0 or None: never).
        stop_at_val_acc: stop once the validation accuracy reaches this value.
        best: the checkpoint callback that keeps the best epoch (default: a
            :class:`~pondernet_tutorial.checkpointing.FolderCheckpoint` ranking by ``select_by``, in a folder
            of the Trainer's); it trusts no path restored from ``ckpt_path``.
        ckpt_path: a Lightning checkpoint to continue from, such as the best epoch's file of an earlier
            fit (``trainer.checkpoint_callback.best_model_path``), or ``"last"`` where ``callbacks`` hold
            a ``ModelCheckpoint(save_last=True)`` (fit itself keeps only the best epoch); read as data
            (:func:`~pondernet_tutorial.checkpointing.read_checkpoint_file`), as is the best epoch's
            file.
        threads: PyTorch's threads while training (default
            :func:`~pondernet_tutorial.threads.default_threads`: one on a machine of at most two
            cores); the caller's number comes back afterwards.
        checkpoint_io: how Lightning reads and writes the checkpoints (default: a
            :class:`~pondernet_tutorial.checkpointing.CheckedCheckpointIO` bounded by the module's size).
        fast: on one CUDA device, train the same step replayed from one CUDA graph
            (:func:`~pondernet_tutorial.fast_path.fast_module`; ``None``: wherever it can, ``False``:
            never, ``True``: or a ``ValueError`` that says what is missing). On the CPU nothing changes.
        callbacks, trainer_options: more callbacks, and any argument of ``lightning.Trainer``; its
            ``max_steps`` counts optimiser updates, where the halting method's ``max_steps`` is N.

    Returns:
        the Trainer, and the best epoch (the last one without validation).

    Raises:
        TrainingDivergedError: the training loss or the weights became NaN or infinite (checked at the
            end of every epoch); the module keeps no best weights.
        CheckpointError: ``ckpt_path`` or the best epoch's file is not a checkpoint of this model.
    """
    given = [callbacks] if isinstance(callbacks, Callback) else list(callbacks)
    check_arguments(
        module, datamodule, max_epochs, patience, stop_at_val_acc, ckpt_path, given, trainer_options
    )
    best = best or FolderCheckpoint(filename="best", monitor=select_by, mode=mode(select_by))
    callbacks = [best, *given, StopOnNonFinite(), CheckBatches()]
    if (stopping := early_stopping(patience, stop_at_val_acc, max_epochs)) is not None:
        callbacks += [stopping, StayStopped()]
    extra = trainer_options.pop("plugins", None) or []
    plugins = [checkpoint_io or CheckedCheckpointIO(checkpoint_bound(module), module, callbacks)]
    plugins += extra if isinstance(extra, (list, tuple)) else [extra]
    trainer = L.Trainer(max_epochs=max_epochs, callbacks=callbacks, plugins=plugins, **trainer_options)
    if not module.training:  # as fit() leaves it, or load_pretrained: Lightning keeps the modes it finds
        module.train()
    trained = fast_module(module, trainer, fast)  # module itself, or on a GPU its graphed step
    with training_threads(threads):
        trainer.fit(trained, datamodule=datamodule, ckpt_path=ckpt_path, **AS_DATA)
    best_epoch = best.load_best(module)  # weights only, from the file that was checked
    module.cpu().eval()
    return trainer, trainer.current_epoch - 1 if best_epoch is None else best_epoch
