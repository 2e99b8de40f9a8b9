"""The LightningModule: any step function under any halting method, its optimiser and its metrics.

Nothing here knows the task: the step function (by name or factory), the number of classes, the
halting method and the per-sample loss are arguments, saved as plain hyperparameters so that a
checkpoint can rebuild the module (:mod:`~pondernet_tutorial.checkpoints`).
"""

from __future__ import annotations

import lightning as L
import torch
from torch import Tensor, nn
from torchmetrics import MeanMetric, MetricCollection
from torchmetrics.classification import MulticlassAccuracy

from .methods import method_class
from .methods.base import PonderOutput
from .registry import LOSSES, describe_component, resolve_component
from .steps import STEPS


def stage_metrics(n_classes: int, loss_terms: tuple[str, ...]) -> MetricCollection:
    """The metrics of one stage: accuracy at the halting step, steps, and every loss term."""
    metrics = {
        "acc": MulticlassAccuracy(n_classes, average="micro"),  # the answer at inference's halting step
        "halt_step": MeanMetric(),  # mean number of steps computed (sampled, N(x), or k)
        "expected_steps": MeanMetric(),  # mean Σ_n n p_n
        "loss": MeanMetric(),
    }
    metrics.update({name: MeanMetric() for name in loss_terms})
    return MetricCollection(metrics)


class PonderLitModule(L.LightningModule):
    """A halting method over a step function, trained with the method's loss.

    Logged per stage (``train``, ``val``, and ``test/<set name>`` for each test set, e.g.
    ``test/rot45/acc``): ``acc`` (the answer at the halting step that inference takes), ``halt_step``,
    ``expected_steps``, ``loss`` and the method's loss terms (PonderNet: ``reconstruction`` and
    ``regularization``; ACT: ``task`` and ``ponder_cost``).

    Args:
        step: the step function: a name in :data:`~pondernet_tutorial.steps.STEPS`, an import path
            ``"module:Class"``, or a class or factory ``(n_classes=..., **step_options) -> StepFunction``
            defined at the top level of a module.
        n_classes: number of classes.
        method: ``"pondernet"``, ``"act"`` or ``"fixed"`` (:data:`~pondernet_tutorial.methods.METHODS`).
        step_options: keyword arguments of the step function.
        method_options: keyword arguments of the method (``max_steps``, ``lambda_p``, ``tau``, …).
        loss_fn: per-sample task loss ``(logits (M, C), targets (M,)) -> (M,)``: ``"cross_entropy"``, an
            import path, or a named function (or ``functools.partial`` of one); no lambda, so that
            the module can be saved and sent to ``ddp_spawn`` workers.
        lr: Adam's learning rate.
        lr_schedule: ``"plateau"`` (ReduceLROnPlateau on the validation accuracy, when there is a
            validation set) or ``"constant"``.
        lr_patience, lr_factor: ReduceLROnPlateau's settings.
        eval_seed: seed of the halting coins in validation and test, so that they are reproducible.
        compile: ``torch.compile`` the unroll and the loss that training, validation and test run
            (``_fit_losses``), for methods that unroll every step (PonderNet, fixed steps; ACT's early
            exit runs eagerly). Not saved: a loaded model runs eagerly.
    """

    def __init__(
        self,
        step,
        n_classes: int,
        method: str = "pondernet",
        step_options: dict | None = None,
        method_options: dict | None = None,
        loss_fn="cross_entropy",
        lr: float = 1e-3,
        lr_schedule: str = "plateau",
        lr_patience: int = 2,
        lr_factor: float = 0.5,
        eval_seed: int = 0,
        compile: bool = False,
    ):
        super().__init__()
        if isinstance(n_classes, bool) or int(n_classes) != n_classes or n_classes < 2:
            raise ValueError(f"n_classes must be an integer >= 2, got {n_classes!r}.")
        if not lr > 0:
            raise ValueError(f"lr must be > 0, got {lr}.")
        if lr_schedule not in ("plateau", "constant"):
            raise ValueError(f"lr_schedule must be 'plateau' or 'constant', got {lr_schedule!r}.")
        step_options, method_options = dict(step_options or {}), dict(method_options or {})
        self.save_hyperparameters(
            {
                "step": describe_component(step, STEPS, "step function"),
                "n_classes": int(n_classes),
                "method": method,
                "step_options": step_options,
                "method_options": method_options,
                "loss_fn": describe_component(loss_fn, LOSSES, "loss function"),
                "lr": lr,
                "lr_schedule": lr_schedule,
                "lr_patience": lr_patience,
                "lr_factor": lr_factor,
                "eval_seed": eval_seed,
            }
        )
        step_function = resolve_component(step, STEPS, "step function")(
            n_classes=int(n_classes), **step_options
        )
        loss = resolve_component(loss_fn, LOSSES, "loss function")
        cls = method_class(method)
        try:
            self.model = cls(step_function, loss_fn=loss, **method_options)
        except TypeError as error:
            raise ValueError(f"method {method!r} does not take these options: {error}") from error
        terms = self.model.loss_terms
        self.metrics = nn.ModuleDict(
            {"fit": stage_metrics(n_classes, terms), "validation": stage_metrics(n_classes, terms)}
        )
        self.test_metrics = nn.ModuleList()
        # torch.compile pays where the unroll has no data-dependent control flow (no early exit)
        self._fit_step = (
            torch.compile(self._fit_losses) if compile and self.model.unrolls_all_steps else self._fit_losses
        )
        self._generator: torch.Generator | None = None

    def forward(self, x, generator: torch.Generator | None = None) -> PonderOutput:
        """Inference: the method's halting (PonderNet samples its halting step with ``generator``)."""
        return self.model.predict(x, generator=generator)

    # ------------------------------------------------------------------ one shared step
    def _fit_losses(self, x, y) -> tuple[PonderOutput, dict[str, Tensor]]:
        out = self.model.fit_forward(x)
        return out, self.model.loss(out, y)

    def _shared_step(self, batch, attribute: str, prefix: str, generator=None) -> Tensor:
        """One batch of any stage: losses, the halting steps inference would take, metrics.

        ``attribute``: where the stage's metrics live (``metrics.fit``, ``test_metrics.0``).
        """
        metrics = self.get_submodule(attribute)
        x, y = batch
        out, losses = self._fit_step(x, y)
        out.halt_step = self.model.inference_halt_step(out, generator)  # the steps inference would take
        batch_size = y.shape[0]
        metrics["acc"].update(out.prediction_logits, y)
        metrics["halt_step"].update(out.halt_step.float())
        metrics["expected_steps"].update(out.expected_steps.detach())
        for name, value in losses.items():
            metrics[name].update(value.detach(), weight=batch_size)
        for name in metrics.keys(keep_base=True):
            self.log(
                f"{prefix}/{name}",
                metrics[name],
                on_step=False,
                on_epoch=True,
                prog_bar=name == "acc" or (prefix == "train" and name == "loss"),
                add_dataloader_idx=False,
                batch_size=batch_size,
                metric_attribute=f"{attribute}.{name}",
            )
        return losses["loss"]

    def training_step(self, batch, batch_idx: int) -> Tensor:
        return self._shared_step(batch, "metrics.fit", "train")

    def on_validation_epoch_start(self) -> None:
        self._generator = torch.Generator().manual_seed(self.hparams.eval_seed)

    def validation_step(self, batch, batch_idx: int) -> None:
        self._shared_step(batch, "metrics.validation", "val", self._generator)

    # ------------------------------------------------------------------ several test sets
    def test_set_names(self) -> list[str] | None:
        """The data module's names of its test sets, if it has them."""
        datamodule = getattr(self.trainer, "datamodule", None) if self._trainer is not None else None
        names = getattr(datamodule, "test_set_names", None)
        return list(names) if names else None

    def setup(self, stage: str) -> None:
        if stage == "test":
            names = self.test_set_names() or []
            self.test_metrics = nn.ModuleList(
                stage_metrics(self.hparams.n_classes, self.model.loss_terms) for _ in names
            )

    def test_step(self, batch, batch_idx: int, dataloader_idx: int = 0) -> None:
        if batch_idx == 0:  # every test set gets the same coins, whatever ran before it
            self._generator = torch.Generator().manual_seed(self.hparams.eval_seed)
        while len(self.test_metrics) <= dataloader_idx:  # loaders given without a data module's names
            terms = self.model.loss_terms
            self.test_metrics.append(stage_metrics(self.hparams.n_classes, terms).to(self.device))
        names = self.test_set_names()
        name = names[dataloader_idx] if names else f"set{dataloader_idx}"
        self._shared_step(batch, f"test_metrics.{dataloader_idx}", f"test/{name}", self._generator)

    def predict_step(self, batch, batch_idx: int, dataloader_idx: int = 0) -> dict[str, Tensor]:
        """Per sample: the predicted class and the halting step."""
        if batch_idx == 0:  # every set gets the same coins as in test_step and evaluate
            self._generator = torch.Generator().manual_seed(self.hparams.eval_seed)
        x = batch[0] if isinstance(batch, (tuple, list)) else batch
        out = self(x, generator=self._generator)
        return {"prediction": out.prediction_logits.argmax(-1), "halt_step": out.halt_step}

    # ------------------------------------------------------------------ optimisation
    def _has_validation(self) -> bool:
        trainer = self.trainer
        if trainer.limit_val_batches == 0:
            return False
        try:  # Lightning's record of whether a val_dataloader was given (module, data module or fit)
            return trainer.fit_loop.epoch_loop.val_loop._data_source.is_defined()
        except AttributeError:
            return True

    def configure_optimizers(self):
        optimizer = torch.optim.Adam(self.parameters(), lr=self.hparams.lr)
        if self.hparams.lr_schedule == "constant" or not self._has_validation():
            return optimizer
        scheduler = torch.optim.lr_scheduler.ReduceLROnPlateau(
            optimizer, mode="max", factor=self.hparams.lr_factor, patience=self.hparams.lr_patience
        )
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "monitor": "val/acc"}}
