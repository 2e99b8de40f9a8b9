"""The LightningModule: a halting method trained with its own loss, the standard way.

``training_step`` runs the method's full unroll and its loss. Validation and test run the same unroll
over the evaluation's step budget and score the answer at the halting step that inference takes
(PonderNet's coins from a generator seeded with ``eval_seed``, so that they are reproducible). Training
flips no coin: PonderNet's training accuracy is the expected one, ``Σ_n p_n 1[ŷ_n = y]``, and it logs no
``halt_step``. Adam optimises, with a plateau schedule where there is validation; each stage's means are
torchmetrics, logged once an epoch as ``train/``, ``val/`` and ``test/<set name>/`` ``acc``, ``halt_step``
(the step the answer was taken at), ``expected_steps`` (``E[n] = Σ_n n p_n``), ``loss`` and the method's
loss terms.
"""

from __future__ import annotations

import lightning as L
import torch
from torch import Tensor, nn
from torchmetrics import MeanMetric, MetricCollection

from .checks import check_module, validates
from .methods.base import Unroll, expected_steps


class PonderLitModule(L.LightningModule):
    """Trains a halting method (:class:`~pondernet_tutorial.methods.pondernet.PonderNet`, ``ACT``, …).

    Args:
        model: the halting method (a :class:`~pondernet_tutorial.methods.base.HaltingMethod`).
        lr: Adam's learning rate.
        lr_schedule: ``"plateau"`` (ReduceLROnPlateau on ``val/acc``, where there is validation) or
            ``"constant"``; ``lr_patience`` and ``lr_factor`` are its settings.
        eval_seed: seed of the halting coins in validation, test and prediction.

    A checkpoint records these settings and the weights, not the model: build the module in code again
    and load a checkpoint's weights as data, ``module.load_state_dict(read_checkpoint_file(path,
    checkpoint_bound(module))["state_dict"])`` (:mod:`~pondernet_tutorial.checkpointing`), rather than
    ``load_from_checkpoint``, which needs ``model=`` and reads the file with ``torch.load``.
    """

    def __init__(self, model, lr=1e-3, lr_schedule="plateau", lr_patience=2, lr_factor=0.5, eval_seed=0):
        super().__init__()
        numbers = check_module(model, lr, lr_schedule, lr_patience, lr_factor, eval_seed)  # one-line errors
        self.save_hyperparameters(ignore=["model"])  # what a checkpoint records besides the weights
        self.hparams.update(numbers)  # as Python's numbers: numpy's would be pickled as numpy objects
        self.model = model
        self.train_metrics, self.val_metrics = self.stage_metrics(training=True), self.stage_metrics()
        self.test_metrics = nn.ModuleList()
        self.generator: torch.Generator | None = None

    def stage_metrics(self, training: bool = False) -> MetricCollection:
        """A stage's means: the accuracy, the step the answer was taken at, ``E[n]`` and the loss terms."""
        names = ["acc", "halt_step", "expected_steps", "loss", *self.model.loss_terms]
        if training and self.model.random_halting:
            names.remove("halt_step")  # PonderNet's training flips no coin: it takes no halting step
        return MetricCollection({name: MeanMetric() for name in names}, compute_groups=False)

    def forward(self, x, generator: torch.Generator | None = None) -> tuple[Tensor, Tensor]:
        """Inference with early exit: ``(prediction (B, C), halt_step (B,))``."""
        return self.model.infer(x, generator)

    def unroll_and_loss(self, x, y) -> tuple[Unroll, dict[str, Tensor]]:
        out = self.model(x)  # every step: max_steps in training, eval_max_steps in eval mode
        return out, self.model.loss(out, y)

    def step_values(self, x, y, evaluation: bool = False) -> dict[str, Tensor]:
        """The loss terms and, per sample, the accuracy, ``E[n]`` and the step the answer was taken at."""
        out, losses = self.unroll_and_loss(x, y)
        p = losses.pop("weights")  # p_n of the loss: N steps, training's rule
        p = (p if self.model.training else self.model.weights(out)).detach()  # eval: every step unrolled
        values = {**losses, "expected_steps": expected_steps(p)}  # E[n] = Σ_n n p_n
        if evaluation or not self.model.random_halting:  # the answer at inference's halting step
            prediction, values["halt_step"] = self.model.answer(out, self.generator)
            values["acc"] = prediction.argmax(-1) == y
        else:  # training flips no coin: the expected accuracy over n ~ p, and no halting step
            values["acc"] = (p * (out.logits.argmax(-1) == y)).sum(0)  # Σ_n p_n 1[ŷ_n = y]
        return values

    @staticmethod
    def record(metrics: MetricCollection, values: dict[str, Tensor], batch_size: int) -> None:
        for name, value in values.items():  # per sample: a scalar loss counts for every sample
            metrics[name].update(value.detach().float().expand(batch_size))

    def log_epoch(self, metrics: MetricCollection, prefix: str) -> None:
        """Log a stage's means (``<prefix>/<name>``) and start them again."""
        for name, metric in metrics.items(keep_base=True):
            if metric.update_count:
                self.log(
                    f"{prefix}/{name}", metric.compute(), prog_bar=name == "acc", add_dataloader_idx=False
                )
            metric.reset()

    def training_step(self, batch, batch_idx: int) -> Tensor:
        values = self.step_values(*batch)
        self.record(self.train_metrics, values, len(batch[1]))
        return values["loss"]

    def on_train_batch_end(self, outputs, batch, batch_idx: int) -> None:
        if batch_idx + 1 == self.trainer.num_training_batches:  # logged before validation and callbacks
            self.log_epoch(self.train_metrics, "train")

    def on_train_epoch_end(self) -> None:
        self.log_epoch(self.train_metrics, "train")  # a loader without a length

    def on_validation_epoch_start(self) -> None:
        self.generator = torch.Generator().manual_seed(self.hparams.eval_seed)

    def validation_step(self, batch, batch_idx: int) -> None:
        self.record(self.val_metrics, self.step_values(*batch, evaluation=True), len(batch[1]))

    def on_validation_epoch_end(self) -> None:
        self.log_epoch(self.val_metrics, "val")

    def test_step(self, batch, batch_idx: int, dataloader_idx: int = 0) -> None:
        if batch_idx == 0:  # every test set gets the same coins, whatever ran before it
            self.generator = torch.Generator().manual_seed(self.hparams.eval_seed)
        while len(self.test_metrics) <= dataloader_idx:
            self.test_metrics.append(self.stage_metrics().to(self.device))
        self.record(
            self.test_metrics[dataloader_idx], self.step_values(*batch, evaluation=True), len(batch[1])
        )

    def on_test_epoch_end(self) -> None:
        names = list(getattr(self.trainer.datamodule, "test_set_names", None) or [])
        for index, metrics in enumerate(self.test_metrics):
            self.log_epoch(metrics, f"test/{names[index] if index < len(names) else f'set{index}'}")

    def predict_step(self, batch, batch_idx: int, dataloader_idx: int = 0) -> dict[str, Tensor]:
        if batch_idx == 0:
            self.generator = torch.Generator().manual_seed(self.hparams.eval_seed)
        prediction, halt_step = self(batch[0] if isinstance(batch, (tuple, list)) else batch, self.generator)
        return {"prediction": prediction.argmax(-1), "halt_step": halt_step}

    def plateau_schedule(self, optimizer):
        """ReduceLROnPlateau on ``val/acc``; ``None`` for a constant rate or a fit without validation."""
        if self.hparams.lr_schedule == "constant" or not validates(
            self.trainer.datamodule, self.trainer.limit_val_batches
        ):
            return None
        return torch.optim.lr_scheduler.ReduceLROnPlateau(
            optimizer, mode="max", factor=self.hparams.lr_factor, patience=self.hparams.lr_patience
        )

    def configure_optimizers(self):
        optimizer = torch.optim.Adam(self.parameters(), lr=self.hparams.lr)
        scheduler = self.plateau_schedule(optimizer)
        if scheduler is None:
            return optimizer
        schedule = {"scheduler": scheduler, "monitor": "val/acc", "strict": False}  # no val/acc logged: warns
        return {"optimizer": optimizer, "lr_scheduler": schedule}
