"""The LightningModule: PonderNet, its loss, its optimiser and its metrics."""

from __future__ import annotations

import lightning as L
import torch
from torch import Tensor, nn
from torchmetrics import MeanMetric, MetricCollection
from torchmetrics.classification import MulticlassAccuracy

from .losses import KL_DIRECTIONS, PonderLoss
from .mnist_step import mnist_pondernet
from .model import PonderOutput

METRIC_NAMES = ("acc", "halt_step", "expected_steps", "loss", "reconstruction", "regularization")


def _stage_metrics(n_classes: int) -> MetricCollection:
    return MetricCollection(
        {
            "acc": MulticlassAccuracy(n_classes, average="micro"),  # at the sampled halting step
            "halt_step": MeanMetric(),  # mean sampled halting step
            "expected_steps": MeanMetric(),  # mean Σ_n n p_n
            "loss": MeanMetric(),
            "reconstruction": MeanMetric(),
            "regularization": MeanMetric(),
        }
    )


class PonderLitModule(L.LightningModule):
    """PonderNet on MNIST, trained with ``L = L_Rec + β · KL(p ‖ p_G(λ_p))``.

    Logged per stage (``train``, ``val``, and ``test/<set name>`` for each test set, e.g.
    ``test/rot45/acc``): ``acc`` (prediction at the sampled halting step), ``halt_step``,
    ``expected_steps``, ``loss``, ``reconstruction`` and ``regularization``.

    Args:
        max_steps: N, the most pondering steps.
        lambda_p: the geometric prior's halting probability (prior mean 1/λ_p steps).
        beta: weight of the KL regularisation.
        lr: Adam's learning rate.
        hidden_size, embedding_size, dropout: sizes of the MNIST step function.
        kl_direction: ``"forward"`` (the paper's KL(p ‖ p_G)) or ``"reverse"``.
        renormalize_prior: renormalise the truncated geometric prior.
        lr_patience, lr_factor: ReduceLROnPlateau on the validation accuracy.
        eval_seed: seed of the halting coins in validation and test, so that they are reproducible.
    """

    def __init__(
        self,
        max_steps: int = 20,
        lambda_p: float = 0.2,
        beta: float = 0.01,
        lr: float = 1e-3,
        hidden_size: int = 64,
        embedding_size: int = 64,
        dropout: float = 0.5,
        kl_direction: str = "forward",
        renormalize_prior: bool = False,
        lr_patience: int = 2,
        lr_factor: float = 0.5,
        eval_seed: int = 0,
    ):
        super().__init__()
        # max_steps, lambda_p and beta are checked by mnist_pondernet and PonderLoss below.
        if kl_direction not in KL_DIRECTIONS:
            raise ValueError(f"kl_direction must be one of {KL_DIRECTIONS}, got {kl_direction!r}.")
        if lr <= 0:
            raise ValueError(f"lr must be > 0, got {lr}.")
        self.save_hyperparameters()
        self.model = mnist_pondernet(max_steps, hidden_size, embedding_size, dropout)
        self.criterion = PonderLoss(lambda_p, max_steps, beta, kl_direction, renormalize_prior)
        self.metrics = nn.ModuleDict({"fit": _stage_metrics(10), "validation": _stage_metrics(10)})
        self._generator: torch.Generator | None = None

    def forward(self, x: Tensor, halting: str | None = None, generator=None) -> PonderOutput:
        return self.model(x, halting=halting, generator=generator)

    # ------------------------------------------------------------------ one shared step
    def _shared_step(self, batch, stage: str, prefix: str, generator=None) -> Tensor:
        x, y = batch
        out = self.model(x, halting="full", sample=True, generator=generator)
        losses = self.criterion(out.logits, out.log_p, y)
        metrics = self.metrics[stage]
        batch_size = y.shape[0]
        metrics["acc"].update(out.prediction_logits, y)
        metrics["halt_step"].update(out.halt_step.float())
        metrics["expected_steps"].update(out.expected_steps)
        for name, value in losses.items():
            metrics[name].update(value.detach(), weight=batch_size)
        for name in METRIC_NAMES:
            self.log(
                f"{prefix}/{name}",
                metrics[name],
                on_step=False,
                on_epoch=True,
                prog_bar=name == "acc" or (prefix == "train" and name == "loss"),
                add_dataloader_idx=False,
                batch_size=batch_size,
            )
        return losses["loss"]

    def training_step(self, batch, batch_idx: int) -> Tensor:
        return self._shared_step(batch, "fit", "train")

    def on_validation_epoch_start(self) -> None:
        self._generator = torch.Generator().manual_seed(self.hparams.eval_seed)

    def validation_step(self, batch, batch_idx: int) -> None:
        self._shared_step(batch, "validation", "val", self._generator)

    # ------------------------------------------------------------------ several test sets
    def test_set_names(self) -> list[str]:
        datamodule = getattr(self.trainer, "datamodule", None)
        names = getattr(datamodule, "test_set_names", None)
        if names:
            return list(names)
        loaders = self.trainer.test_dataloaders
        n = len(loaders) if isinstance(loaders, (list, tuple)) else 1
        return [f"set{i}" for i in range(n)]

    def on_test_start(self) -> None:
        for index in range(len(self.test_set_names())):
            self.metrics[f"test{index}"] = _stage_metrics(10).to(self.device)

    def test_step(self, batch, batch_idx: int, dataloader_idx: int = 0) -> None:
        if batch_idx == 0:  # every test set gets the same coins, whatever ran before it
            self._generator = torch.Generator().manual_seed(self.hparams.eval_seed)
        name = self.test_set_names()[dataloader_idx]
        self._shared_step(batch, f"test{dataloader_idx}", f"test/{name}", self._generator)

    # ------------------------------------------------------------------ optimisation
    def configure_optimizers(self):
        optimizer = torch.optim.Adam(self.parameters(), lr=self.hparams.lr)
        scheduler = torch.optim.lr_scheduler.ReduceLROnPlateau(
            optimizer, mode="max", factor=self.hparams.lr_factor, patience=self.hparams.lr_patience
        )
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "monitor": "val/acc"}}
