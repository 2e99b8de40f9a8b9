"""The LightningModule: any step function under any halting method, trained with the method's loss.

``training_step`` runs the method's full unroll and its loss; validation and test run the same unroll
and score the answer at the halting step that inference takes (PonderNet's coins from a seeded
generator, so that they are reproducible). Adam optimises, with a plateau schedule where there is
validation. Each stage's means are torchmetrics, logged once an epoch.

The step function, the number of classes, the halting method and the per-sample loss are arguments,
saved as plain hyperparameters so that a model file can rebuild the module
(:mod:`~pondernet_tutorial.runs.checkpoints`). Training logs expectations (the expected accuracy
``Σ_n p_n 1[ŷ_n = y]`` and ``E[n]``) instead of flipping coins, so that a step never waits for the
device and compiles into one graph (``compile=True``); replaying it from one CUDA graph is the run
machinery's (:class:`~pondernet_tutorial.runs.cuda_graph.GraphedPonderLitModule`).
"""

from __future__ import annotations

import lightning as L
import torch
from lightning.pytorch.utilities.model_helpers import is_overridden
from torch import Tensor, nn
from torchmetrics import MeanMetric, MetricCollection

from .methods.base import PonderOutput
from .runs.registry import LOSSES, STEPS, describe_component, method_class, resolve_component

# The training engine's version, recorded in every run's metadata: 1 flipped coins in training and
# drew the training data from the global generator; 2 has no host synchronisation in a training step,
# logs expectations in training, draws the data from a generator of its own and drops the last,
# partial batch of an epoch. Runs of an older engine are not retrained for a newer one.
ENGINE_VERSION = 2


def _mean() -> MeanMetric:
    return MeanMetric(nan_strategy="disable")  # no NaN check: it would make the host wait every step


def stage_metrics(loss_terms: tuple[str, ...]) -> MetricCollection:
    """The metrics of one stage, each a mean over the samples, summed on the device: accuracy (of the
    answer at inference's halting step; its expectation in training), the halting step (its
    expectation for PonderNet in training), the expected steps ``Σ_n n p_n``, and every loss term."""
    names = ("acc", "halt_step", "expected_steps", "loss", *loss_terms)
    return MetricCollection({name: _mean() for name in names}, compute_groups=False)


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
        grad_clip: clip the gradients' norm to this value (0: no clipping). Not saved (a run's
            configuration records it; a loaded model does not need it).
        compile: ``torch.compile`` the unroll and the loss that training, validation and test run
            (``_fit_losses``). Not saved: a loaded model runs eagerly.
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
        self.metrics = nn.ModuleDict({"fit": stage_metrics(terms), "validation": stage_metrics(terms)})
        self.test_metrics = nn.ModuleList()
        self.grad_clip = float(grad_clip)
        self.compiled = bool(compile)
        self._fit_step = torch.compile(self._fit_losses) if self.compiled else self._fit_losses
        self._generator: torch.Generator | None = None

    def forward(self, x, generator: torch.Generator | None = None) -> PonderOutput:
        """Inference: the method's halting (PonderNet samples its halting step with ``generator``)."""
        return self.model.predict(x, generator=generator)

    # ------------------------------------------------------------------ one shared step
    def _fit_losses(self, x, y, evaluation: bool = False) -> tuple[PonderOutput, dict[str, Tensor]]:
        """The unroll (training's, or the evaluation's budget) and the method's loss."""
        out = self.model.evaluation_forward(x) if evaluation else self.model.fit_forward(x)
        return out, self.model.loss(out, y)

    def _training_values(self, x, y) -> dict[str, Tensor]:
        """A training batch's loss terms and, per sample, what training logs: the expected accuracy,
        the (expected) halting step and the expected steps. No coin is flipped."""
        out, losses = self._fit_step(x, y)
        return {
            **losses,
            "acc": out.expected_correct(y),  # Σ_n p_n 1[ŷ_n = y] (PonderNet); 1[ŷ = y] (ACT, fixed)
            "halt_step": out.mean_halt_step(),  # E[n] (PonderNet), N(x) (ACT), k (fixed)
            "expected_steps": out.expected_steps.detach(),
        }

    def _evaluation_values(self, x, y, generator) -> dict[str, Tensor]:
        """A validation or test batch's loss terms and, per sample, the correctness of the answer at
        the halting step that inference takes (PonderNet's coins drawn from ``generator``)."""
        out, losses = self._fit_step(x, y, evaluation=True)
        out.halt_step = self.model.inference_halt_step(out, generator)  # the steps inference would take
        correct = (out.prediction_logits.argmax(-1) == y).to(torch.float32)
        return {
            **losses,
            "acc": correct,
            "halt_step": out.halt_step.float(),
            "expected_steps": out.expected_steps,
        }

    @staticmethod
    def _record(values: dict[str, Tensor], batch_size: int, metrics: MetricCollection) -> None:
        """Add a batch's values to the stage's metrics, on the device: nothing waits."""
        for name, value in values.items():
            value = value.detach()
            metrics[name].update(value if value.dim() else value.expand(batch_size))  # per sample

    def _log_epoch(self, metrics: MetricCollection, prefix: str) -> None:
        """Log a stage's means once for the epoch (``<prefix>/<name>``) and start them again. Logging
        once an epoch, not once a batch, spares Lightning's bookkeeping of every ``self.log`` call."""
        for name in metrics.keys(keep_base=True):
            metric = metrics[name]
            if metric.update_count:
                prog_bar = name == "acc" or (prefix == "train" and name == "loss")
                self.log(f"{prefix}/{name}", metric.compute(), prog_bar=prog_bar, add_dataloader_idx=False)
            metric.reset()

    def training_step(self, batch, batch_idx: int) -> Tensor:
        x, y = batch
        values = self._training_values(x, y)
        self._record(values, y.shape[0], self.metrics["fit"])
        return values["loss"]

    def on_train_batch_end(self, outputs, batch, batch_idx: int) -> None:
        if batch_idx + 1 == self.trainer.num_training_batches:  # the epoch's last batch: its means are known
            self._log_epoch(self.metrics["fit"], "train")

    def _shared_step(self, batch, metrics: MetricCollection, generator) -> Tensor:
        x, y = batch
        values = self._evaluation_values(x, y, generator)
        self._record(values, y.shape[0], metrics)
        return values["loss"]

    def on_validation_epoch_start(self) -> None:
        self._generator = torch.Generator().manual_seed(self.hparams.eval_seed)

    def validation_step(self, batch, batch_idx: int) -> None:
        self._shared_step(batch, self.metrics["validation"], self._generator)

    def on_validation_epoch_end(self) -> None:
        self._log_epoch(self.metrics["validation"], "val")

    # ------------------------------------------------------------------ several test sets
    def test_set_names(self) -> list[str] | None:
        """The data module's names of its test sets, if it has them."""
        datamodule = getattr(self.trainer, "datamodule", None) if self._trainer is not None else None
        names = getattr(datamodule, "test_set_names", None)
        return list(names) if names else None

    def setup(self, stage: str) -> None:
        if stage == "test":
            names = self.test_set_names() or []
            self.test_metrics = nn.ModuleList(stage_metrics(self.model.loss_terms) for _ in names)

    def test_step(self, batch, batch_idx: int, dataloader_idx: int = 0) -> None:
        if batch_idx == 0:  # every test set gets the same coins, whatever ran before it
            self._generator = torch.Generator().manual_seed(self.hparams.eval_seed)
        while len(self.test_metrics) <= dataloader_idx:  # loaders given without a data module's names
            self.test_metrics.append(stage_metrics(self.model.loss_terms).to(self.device))
        self._shared_step(batch, self.test_metrics[dataloader_idx], self._generator)

    def on_test_epoch_end(self) -> None:
        names = self.test_set_names()
        for index, metrics in enumerate(self.test_metrics):
            self._log_epoch(metrics, f"test/{names[index] if names else f'set{index}'}")

    def predict_step(self, batch, batch_idx: int, dataloader_idx: int = 0) -> dict[str, Tensor]:
        """Per sample: the predicted class and the halting step."""
        if batch_idx == 0:  # every set gets the same coins as in test_step and evaluate
            self._generator = torch.Generator().manual_seed(self.hparams.eval_seed)
        x = batch[0] if isinstance(batch, (tuple, list)) else batch
        out = self(x, generator=self._generator)
        return {"prediction": out.prediction_logits.argmax(-1), "halt_step": out.halt_step}

    # ------------------------------------------------------------------ optimisation
    def _has_validation(self) -> bool:
        """Whether the fit validates: not with ``limit_val_batches=0``, nor with a data module that has
        no ``val_dataloader`` (loaders given to ``Trainer.fit`` directly are taken to include one)."""
        datamodule = self.trainer.datamodule
        if self.trainer.limit_val_batches == 0:
            return False
        return datamodule is None or is_overridden("val_dataloader", datamodule, L.LightningDataModule)

    def configure_gradient_clipping(self, optimizer, gradient_clip_val=None, gradient_clip_algorithm=None):
        """Clip the gradients' norm to ``grad_clip`` (the module's own setting, so that the replayed
        step and Lightning's automatic optimisation clip alike)."""
        if self.grad_clip > 0:
            self.clip_gradients(optimizer, gradient_clip_val=self.grad_clip, gradient_clip_algorithm="norm")

    def plateau_schedule(self, optimizer):
        """ReduceLROnPlateau on the validation accuracy, or ``None`` (a constant rate, or no validation)."""
        if self.hparams.lr_schedule == "constant" or not self._has_validation():
            return None
        return torch.optim.lr_scheduler.ReduceLROnPlateau(
            optimizer, mode="max", factor=self.hparams.lr_factor, patience=self.hparams.lr_patience
        )

    def configure_optimizers(self):
        optimizer = torch.optim.Adam(self.parameters(), lr=self.hparams.lr)
        scheduler = self.plateau_schedule(optimizer)
        if scheduler is None:
            return optimizer
        # strict=False: loaders given to Trainer.fit without a validation loader keep the rate (Lightning
        # warns that val/acc is missing) instead of failing at the first epoch's end
        schedule = {"scheduler": scheduler, "monitor": "val/acc", "strict": False}
        return {"optimizer": optimizer, "lr_scheduler": schedule}

    def on_train_epoch_end(self) -> None:
        """The training means, if the last batch did not log them (a loader without a length)."""
        self._log_epoch(self.metrics["fit"], "train")
