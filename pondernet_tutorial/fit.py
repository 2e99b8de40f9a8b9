"""Train a :class:`~pondernet_tutorial.lightning_module.PonderLitModule` with Lightning, the standard way.

A data module, the module, a ``Trainer``, ``fit``, and the best epoch's weights back in the module:

    >>> module = PonderLitModule("parity_gru", n_classes=2, method_options={"max_steps": 20})
    >>> trainer, best_epoch = fit(module, ParityDataModule(), max_epochs=10)

The run machinery (:func:`pondernet_tutorial.runs.training.train`) calls this function inside a run
folder of its own, with a lock, a logger and records around it.
"""

from __future__ import annotations

import os
import re
import stat
from pathlib import Path

import lightning as L
import torch
from lightning.pytorch.callbacks import Callback, EarlyStopping, ModelCheckpoint

from .lightning_module import PonderLitModule
from .options import MAX_PARAMETERS

LAST = "last"  # checkpoint_dir/last.ckpt: the state after the last epoch, what a resumed run reads
BEST = "best"  # checkpoint_dir/best.ckpt (best-v1.ckpt, ...): the best epoch so far
# a Lightning checkpoint of this package's models: the weights and the optimizer's two moments (4 bytes
# each, at most MAX_PARAMETERS of them), and a few MB of counters and callback states
MAX_CHECKPOINT_BYTES = 3 * 4 * MAX_PARAMETERS + 64 * 2**20


class CheckpointError(RuntimeError):
    """A checkpoint file is missing, damaged, names code that is not registered, or does not fit the
    model that its folder records or that the caller asks for: one line."""


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
                f"saved: lower the learning rate (lr={pl_module.hparams.get('lr')}) or clip the gradients (--grad-clip)."
            )


def last_checkpoint(checkpoint_dir) -> Path | None:
    """``checkpoint_dir/last.ckpt`` if it is a regular file (never a symbolic link), else ``None``."""
    if checkpoint_dir is None:
        return None
    last = Path(checkpoint_dir) / f"{LAST}.ckpt"
    return last if last.is_file() and not last.is_symlink() else None


def read_checkpoint(path, folder) -> dict:
    """A Lightning checkpoint that this package's ``fit`` wrote in ``folder``, read with every check
    made before the read: the file lies in ``folder`` itself (its real path, no link on the way), is a
    regular file (never a FIFO or a device: the open never blocks) of bounded size, and is loaded
    weights-only (plain data: nothing in it is run).

    Raises:
        CheckpointError: one line on why the file cannot be read; never PyTorch's advice to load it
            unsafely.
    """
    path, folder = Path(path), Path(folder)
    if path.is_symlink() or path.resolve().parent != folder.resolve():
        raise CheckpointError(f"{path} does not lie in {folder}: a checkpoint names only its own folder.")
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOFOLLOW", 0))
    except OSError as error:
        raise CheckpointError(f"{path} cannot be opened ({error.strerror}).") from None
    with open(fd, "rb") as file:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise CheckpointError(f"{path} is not a regular file.")
        if info.st_size > MAX_CHECKPOINT_BYTES:
            raise CheckpointError(f"{path} holds {info.st_size:,} bytes, more than {MAX_CHECKPOINT_BYTES:,}.")
        try:
            checkpoint = torch.load(file, map_location="cpu", weights_only=True)
        except Exception as error:  # a pickle that asks for code, a truncated file: the first line only
            first = (str(error).strip().splitlines() or [type(error).__name__])[0][:160]
            raise CheckpointError(f"{path} is not a weights-only checkpoint ({first})") from None
    if not isinstance(checkpoint, dict) or not isinstance(checkpoint.get("state_dict"), dict):
        raise CheckpointError(f"{path} is not a Lightning checkpoint (no state_dict).")
    return checkpoint


def _is_score(value) -> bool:
    return isinstance(value, (float, int, torch.Tensor)) and torch.as_tensor(value).numel() == 1


class RunCheckpoint(ModelCheckpoint):
    """Lightning's ``ModelCheckpoint``, restored from a checkpoint without trusting the paths in it.

    Lightning restores the paths of the best and the last checkpoints as they were recorded, and later
    deletes the old best one (recursively): a recorded path that names another folder would be
    deleted, and a run copied to another folder would keep pointing at the old one. Here only the
    recorded file *names* are used, in this callback's own folder, and only when they are its own
    checkpoint files (``best.ckpt``, ``best-v1.ckpt``, ...), regular files, with a numeric score;
    anything else restores nothing (the next epoch's checkpoint is the best so far).
    """

    def load_state_dict(self, state_dict: dict) -> None:
        if self.dirpath is None or not isinstance(state_dict, dict):
            return
        name = Path(str(state_dict.get("best_model_path") or "")).name
        path = Path(self.dirpath) / name
        score = state_dict.get("best_model_score")
        if not re.fullmatch(rf"{re.escape(self.filename or '')}(-v\d+)?\.ckpt", name):
            return
        if not path.is_file() or path.is_symlink() or (self.monitor is not None and not _is_score(score)):
            return
        self.best_model_path = self.kth_best_model_path = str(path)
        if self.monitor is not None:
            self.best_model_score = self.kth_value = torch.as_tensor(float(score))
            self.best_k_models = {str(path): self.best_model_score}


def fit(
    module: PonderLitModule,
    datamodule: L.LightningDataModule,
    max_epochs: int,
    select_by: str = "val/acc",
    patience: int = 0,
    stop_at_val_acc: float | None = None,
    checkpoint_dir=None,
    resume: bool = False,
    callbacks=(),
    **trainer_options,
) -> tuple[L.Trainer, int]:
    """Train ``module`` on ``datamodule`` and load the weights of its best epoch into it (eval mode).

    Args:
        select_by: the logged metric that picks the best epoch (``val/acc``; a name ending in ``loss``
            is minimised).
        patience: stop after this many epochs without a better validation accuracy (0: never).
        stop_at_val_acc: stop once the validation accuracy reaches this value.
        checkpoint_dir: where Lightning keeps the best epoch's checkpoint and, after every epoch, the
            last one (``last.ckpt``); a temporary folder of the Trainer's by default.
        resume: continue from ``checkpoint_dir/last.ckpt`` when it is there (weights, optimiser,
            schedule, callbacks, the epoch, and the data module's own state), loaded weights-only.
        callbacks, trainer_options: more callbacks, and any argument of ``lightning.Trainer``.

    Returns:
        the Trainer, and the best epoch (the last one without validation).

    Raises:
        TrainingDivergedError: the training loss or the weights became NaN or infinite (checked at the
            end of every epoch); the module keeps no best weights.
    """
    best = RunCheckpoint(  # keeps the epoch with the best validation accuracy
        dirpath=checkpoint_dir,
        filename=BEST,
        monitor=select_by,
        mode="min" if select_by.endswith("loss") else "max",
        save_top_k=1,
    )
    callbacks = [best, *callbacks, StopOnNonFinite()]
    if checkpoint_dir is not None:  # last.ckpt after every epoch, after best's: what a resumed run reads
        # (not save_last=True: Lightning then writes last.ckpt only in the epochs that improve the best)
        callbacks.insert(
            1, RunCheckpoint(dirpath=checkpoint_dir, filename=LAST, enable_version_counter=False)
        )
    if patience or stop_at_val_acc:
        stopping = EarlyStopping(
            "val/acc", mode="max", patience=patience or max_epochs, stopping_threshold=stop_at_val_acc
        )
        callbacks.append(stopping)
    trainer = L.Trainer(max_epochs=max_epochs, callbacks=callbacks, **trainer_options)
    resume_from = last_checkpoint(checkpoint_dir) if resume else None
    trainer.fit(module, datamodule=datamodule, ckpt_path=resume_from, weights_only=True)
    best_epoch = trainer.current_epoch - 1  # without validation: the last epoch
    if best.best_model_path:  # checked, weights only: loading runs no code from the file
        checkpoint = read_checkpoint(best.best_model_path, best.dirpath)
        module.load_state_dict(checkpoint["state_dict"])
        best_epoch = int(checkpoint["epoch"])
    module.cpu().eval()
    return trainer, best_epoch
