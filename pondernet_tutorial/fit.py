"""Train a :class:`~pondernet_tutorial.lightning_module.PonderLitModule` with Lightning, the standard way.

A data module, the module, a ``Trainer``, ``fit``, and the best epoch's weights back in the module:

    >>> module = PonderLitModule("parity_gru", n_classes=2, method_options={"max_steps": 20})
    >>> trainer, best_epoch = fit(module, ParityDataModule(), max_epochs=10)

The run machinery (:func:`pondernet_tutorial.runs.training.train`) calls this function inside a run
folder of its own, with a lock, a logger and records around it.
"""

from __future__ import annotations

from pathlib import Path

import lightning as L
import torch
from lightning.pytorch.callbacks import EarlyStopping, ModelCheckpoint

from .lightning_module import PonderLitModule

LAST = "last"  # checkpoint_dir/last.ckpt: the state after the last epoch, what a resumed run reads


def last_checkpoint(checkpoint_dir) -> Path | None:
    """``checkpoint_dir/last.ckpt`` if it is a regular file (never a symbolic link), else ``None``."""
    if checkpoint_dir is None:
        return None
    last = Path(checkpoint_dir) / f"{LAST}.ckpt"
    return last if last.is_file() and not last.is_symlink() else None


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
    """
    best = ModelCheckpoint(  # keeps the epoch with the best validation accuracy
        dirpath=checkpoint_dir,
        filename="best",
        monitor=select_by,
        mode="min" if select_by.endswith("loss") else "max",
        save_top_k=1,
    )
    callbacks = [best, *callbacks]
    if checkpoint_dir is not None:  # last.ckpt after every epoch, after best's: what a resumed run reads
        # (not save_last=True: Lightning then writes last.ckpt only in the epochs that improve the best)
        callbacks.insert(
            1, ModelCheckpoint(dirpath=checkpoint_dir, filename=LAST, enable_version_counter=False)
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
    if best.best_model_path:  # weights only: loading runs no code from the file
        checkpoint = torch.load(best.best_model_path, map_location="cpu", weights_only=True)
        module.load_state_dict(checkpoint["state_dict"])
        best_epoch = int(checkpoint["epoch"])
    module.cpu().eval()
    return trainer, best_epoch
