"""The module a run trains: the plain :class:`~pondernet_tutorial.lightning_module.PonderLitModule`, built
from names, with the run machinery's fast path.

A run folder and a model file describe the model by name (the step function, the method, their
options and the loss), so :class:`RunModule` takes those names as its hyperparameters and builds the
model from the registry; a model file rebuilds it from them. Three things make it faster than the
plain module without changing what it computes (``tests/runs/test_run_module.py`` trains both and
compares the weights and the logged means):

* ``compile=True`` compiles the unroll and the loss with ``torch.compile``;
* a training step adds its logged values to one tensor of sums on the device instead of updating one
  metric per value (six for PonderNet), and the sums reach the metrics once an epoch (torchmetrics' NaN check, which makes the host
  wait for the device, is skipped there too);
* it clips the gradients itself (``grad_clip``), so that the step replayed from a CUDA graph
  (:class:`~pondernet_tutorial.runs.cuda_graph.GraphedPonderLitModule`) clips alike.
"""

from __future__ import annotations

import torch
from torch import Tensor
from torchmetrics import MeanMetric, MetricCollection

from ..lightning_module import PonderLitModule
from .registry import LOSSES, STEPS, describe_component, method_class, resolve_component


def build_model(
    step,
    n_classes: int,
    method: str = "pondernet",
    step_options=None,
    method_options=None,
    loss_fn="cross_entropy",
):
    """The halting method that names describe: the step function ``step`` (a registered name or an
    import path) with ``step_options``, under ``method`` with ``method_options`` and the loss ``loss_fn``."""
    if isinstance(n_classes, bool) or int(n_classes) != n_classes or n_classes < 2:
        raise ValueError(f"n_classes must be an integer >= 2, got {n_classes!r}.")
    step_function = resolve_component(step, STEPS, "step function")(
        n_classes=int(n_classes), **(step_options or {})
    )
    loss = resolve_component(loss_fn, LOSSES, "loss function")
    try:
        return method_class(method)(step_function, loss_fn=loss, **(method_options or {}))
    except TypeError as error:
        raise ValueError(f"method {method!r} does not take these options: {error}") from error


class RunModule(PonderLitModule):
    """The plain module over the model that names describe, with the fast path.

    Args:
        step, n_classes, method, step_options, method_options, loss_fn: the model (:func:`build_model`),
            saved as hyperparameters with the plain module's.
        grad_clip: clip the gradients' norm to this value (0: no clipping). Not saved (a run's
            configuration records it; a loaded model does not need it).
        compile: ``torch.compile`` the unroll and the loss. Not saved: a loaded model runs eagerly.
        lr, lr_schedule, lr_patience, lr_factor, eval_seed: the plain module's.
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
        grad_clip: float = 0.0,
        compile: bool = False,
    ):
        names = {
            "step": describe_component(step, STEPS, "step function"),
            "n_classes": int(n_classes),
            "method": method,
            "step_options": dict(step_options or {}),
            "method_options": dict(method_options or {}),
            "loss_fn": describe_component(loss_fn, LOSSES, "loss function"),
        }
        model = build_model(step, n_classes, method, step_options, method_options, loss_fn)
        super().__init__(model, lr, lr_schedule, lr_patience, lr_factor, eval_seed)
        self.save_hyperparameters(names)  # the model by its names, beside the plain module's settings
        for unsaved in ("grad_clip", "compile"):
            self.hparams.pop(unsaved)
        self.grad_clip = float(grad_clip)
        self._fit_sums: Tensor | None = None  # per training metric, the sum over this epoch's samples
        self._fit_count = 0
        self.compiled = bool(compile)
        if self.compiled:
            self.unroll_and_loss = torch.compile(self.unroll_and_loss)

    def start_sums(self) -> None:
        """Zero sums, one per training metric, on the device: what :meth:`summed_values` adds to."""
        self._fit_sums = torch.zeros(len(self.train_metrics), device=self.device)
        self._fit_count = 0  # samples in those sums

    def release_sums(self) -> None:
        self._fit_sums, self._fit_count = None, 0

    def summed_values(self, x, y) -> dict[str, Tensor]:
        """The training step's values, each also added, summed over the batch, to the epoch's sums."""
        values = self.step_values(x, y)
        batch = y.shape[0]
        names = self.train_metrics.keys(keep_base=True)
        sums = [
            v.detach().float().sum() if v.dim() else v.detach().float() * batch
            for v in map(values.get, names)
        ]
        self._fit_sums.add_(torch.stack(sums))
        return values

    def log_sums(self) -> None:
        """Hand the epoch's sums to the training metrics (each a mean over the samples, as per-step
        updates give) and log them; then start the sums again, in place (a CUDA graph writes there)."""
        if self._fit_count:
            means = self._fit_sums / self._fit_count
            for name, mean in zip(self.train_metrics.keys(keep_base=True), means):
                self.train_metrics[name].update(mean, weight=self._fit_count)
            self._fit_sums.zero_()
            self._fit_count = 0
        self.log_epoch(self.train_metrics, "train")

    def on_fit_start(self) -> None:
        self.release_sums()

    def training_step(self, batch, batch_idx: int) -> Tensor:
        x, y = batch
        if self._fit_sums is None:
            self.start_sums()
        values = self.summed_values(x, y)
        self._fit_count += y.shape[0]
        return values["loss"]

    def on_train_batch_end(self, outputs, batch, batch_idx: int) -> None:
        if batch_idx + 1 == self.trainer.num_training_batches:  # logged before validation and callbacks
            self.log_sums()

    def on_train_epoch_end(self) -> None:
        self.log_sums()  # a loader without a length

    def stage_metrics(self, training: bool = False) -> MetricCollection:
        """The plain module's means, without the NaN check that makes the host wait at each update."""
        names = super().stage_metrics(training).keys(keep_base=True)
        return MetricCollection(
            {name: MeanMetric(nan_strategy="disable") for name in names}, compute_groups=False
        )

    def configure_gradient_clipping(self, optimizer, gradient_clip_val=None, gradient_clip_algorithm=None):
        if self.grad_clip > 0:
            self.clip_gradients(optimizer, gradient_clip_val=self.grad_clip, gradient_clip_algorithm="norm")
