"""Train a :class:`~pondernet_tutorial.lightning_module.PonderLitModule` with Lightning, the standard way.

A data module, the module, a ``Trainer`` with a checkpoint of the best epoch (and early stopping where
asked for), ``trainer.fit``, and the best epoch's weights back in the module:

    >>> module = PonderLitModule(PonderNet(ParityStep(n_elements=16), max_steps=20))
    >>> trainer, best_epoch = fit(module, ParityDataModule(), max_epochs=10)

The run machinery (:func:`pondernet_tutorial.runs.training.train`) calls this function inside a run
folder of its own, with a lock, a logger, records and resuming around it.
"""

from __future__ import annotations

import lightning as L
import torch
from lightning.pytorch.callbacks import Callback, EarlyStopping, ModelCheckpoint

from .lightning_module import PonderLitModule


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
                f"saved: lower the learning rate (lr={pl_module.hparams.get('lr')}) or clip the gradients "
                "(the Trainer's gradient_clip_val; --grad-clip on the command line)."
            )


def mode(metric: str) -> str:
    """How ``ModelCheckpoint`` ranks epochs by ``metric``: a name ending in ``loss`` is minimised."""
    return "min" if metric.endswith("loss") else "max"


def fit(
    module: PonderLitModule,
    datamodule: L.LightningDataModule,
    max_epochs: int,
    select_by: str = "val/acc",
    patience: int = 0,
    stop_at_val_acc: float | None = None,
    best: ModelCheckpoint | None = None,
    ckpt_path=None,
    callbacks=(),
    **trainer_options,
) -> tuple[L.Trainer, int]:
    """Train ``module`` on ``datamodule`` and load the weights of its best epoch into it (eval mode).

    Args:
        select_by: the logged metric that picks the best epoch (``val/acc``; a name ending in ``loss``
            is minimised).
        patience: stop after this many epochs without a better validation accuracy (0: never).
        stop_at_val_acc: stop once the validation accuracy reaches this value.
        best: the ``ModelCheckpoint`` that keeps the best epoch (default: Lightning's, ranking by
            ``select_by``, in a folder of the Trainer's).
        ckpt_path: a Lightning checkpoint to continue from, as ``Trainer.fit`` takes it (weights-only).
        callbacks, trainer_options: more callbacks, and any argument of ``lightning.Trainer``.

    Returns:
        the Trainer, and the best epoch (the last one without validation).

    Raises:
        TrainingDivergedError: the training loss or the weights became NaN or infinite (checked at the
            end of every epoch); the module keeps no best weights.
    """
    best = best or ModelCheckpoint(monitor=select_by, mode=mode(select_by))
    callbacks = [best, *callbacks, StopOnNonFinite()]
    if patience or stop_at_val_acc:
        callbacks.append(
            EarlyStopping(
                "val/acc", mode="max", patience=patience or max_epochs, stopping_threshold=stop_at_val_acc
            )
        )
    trainer = L.Trainer(max_epochs=max_epochs, callbacks=callbacks, **trainer_options)
    trainer.fit(module, datamodule=datamodule, ckpt_path=ckpt_path, weights_only=True)
    best_epoch = trainer.current_epoch - 1  # without validation: the last epoch
    if best.best_model_path:  # weights only: loading runs no code from the file
        checkpoint = torch.load(best.best_model_path, map_location="cpu", weights_only=True)
        module.load_state_dict(checkpoint["state_dict"])
        best_epoch = int(checkpoint["epoch"])
    module.cpu().eval()
    return trainer, best_epoch
