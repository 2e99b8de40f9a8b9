"""Train the book's experiments with a standard Lightning ``Trainer``.

``train(TrainConfig(experiment="interpolation", seed=0))`` trains on plain MNIST;
``experiment="extrapolation"`` trains and validates on digits rotated uniformly in ±22.5°. The run
folder gets ``model.pt`` (weights only, the epoch with the best validation accuracy), ``history.csv``
(one row per epoch) and ``metadata.json``.
"""

from __future__ import annotations

import copy
import json
import os
import platform
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import lightning as L
import pandas as pd
import torch
from lightning.pytorch.callbacks import Callback, EarlyStopping

from .checkpoints import save_weights
from .data import MNISTDataModule
from .halting import check_lambda_p, check_max_steps
from .lightning_module import PonderLitModule
from .losses import check_beta

TRAIN_ROTATION = {"interpolation": 0.0, "extrapolation": 22.5}


@dataclass
class TrainConfig:
    """Everything a run depends on; the defaults are the reference experiment's."""

    experiment: str = "interpolation"
    seed: int = 0
    epochs: int = 20
    batch_size: int = 128
    lr: float = 1e-3
    grad_clip: float = 0.5
    max_steps: int = 20
    lambda_p: float = 0.2
    beta: float = 0.01
    hidden_size: int = 64
    embedding_size: int = 64
    dropout: float = 0.5
    kl_direction: str = "forward"
    renormalize_prior: bool = False
    early_stopping_patience: int | None = None
    accelerator: str = "auto"
    devices: str | int = "auto"
    strategy: str = "auto"
    precision: str = "32-true"
    data_dir: str | None = None
    output_dir: str = "runs"
    logger: str = "csv"  # csv, tensorboard or wandb
    train_subset: int | None = None  # quick runs only
    progress_bar: bool = True
    extra: dict = field(default_factory=dict)

    def __post_init__(self):
        if self.experiment not in TRAIN_ROTATION:
            raise ValueError(f"experiment must be one of {tuple(TRAIN_ROTATION)}, got {self.experiment!r}.")
        check_lambda_p(self.lambda_p)
        check_max_steps(self.max_steps)
        check_beta(self.beta)
        if self.epochs < 1:
            raise ValueError(f"epochs must be >= 1, got {self.epochs}.")
        if self.logger not in ("csv", "tensorboard", "wandb"):
            raise ValueError(f"logger must be csv, tensorboard or wandb, got {self.logger!r}.")

    @property
    def run_dir(self) -> Path:
        return Path(self.output_dir) / self.experiment / f"seed{self.seed}"

    def module_kwargs(self) -> dict:
        keys = (
            "max_steps",
            "lambda_p",
            "beta",
            "lr",
            "hidden_size",
            "embedding_size",
            "dropout",
            "kl_direction",
            "renormalize_prior",
        )
        return {k: getattr(self, k) for k in keys}


class BestWeights(Callback):
    """Keeps, in memory, a copy of the weights of the epoch with the best validation accuracy."""

    def __init__(self, monitor: str = "val/acc"):
        self.monitor, self.best, self.best_epoch, self.state = monitor, -1.0, -1, None

    def on_validation_end(self, trainer, pl_module):
        if trainer.sanity_checking:
            return
        value = trainer.callback_metrics.get(self.monitor)
        if value is not None and float(value) > self.best:
            self.best, self.best_epoch = float(value), trainer.current_epoch
            self.state = copy.deepcopy({k: v.detach().cpu() for k, v in pl_module.state_dict().items()})


class EpochTimer(Callback):
    """Records the wall time of every training epoch (seconds) and the images seen."""

    def __init__(self):
        self.times: list[float] = []

    def on_train_epoch_start(self, trainer, pl_module):
        self._start = time.perf_counter()

    def on_train_epoch_end(self, trainer, pl_module):
        self.times.append(time.perf_counter() - self._start)


def _logger(config: TrainConfig):
    from lightning.pytorch import loggers

    save_dir = config.run_dir / "logs"
    if config.logger == "tensorboard":
        return loggers.TensorBoardLogger(save_dir, name="", version="")
    if config.logger == "wandb":
        return loggers.WandbLogger(
            project="pondernet-tutorial",
            save_dir=str(save_dir),
            name=f"{config.experiment}-seed{config.seed}",
        )
    return loggers.CSVLogger(save_dir, name="", version="")


def epoch_history(metrics_csv: str | os.PathLike) -> pd.DataFrame:
    """One row per epoch from a CSVLogger's ``metrics.csv`` (train and val rows merged)."""
    raw = pd.read_csv(metrics_csv)
    history = raw.drop(columns=["step"], errors="ignore").groupby("epoch").first().reset_index()
    return history.dropna(axis=1, how="all")


def library_versions() -> dict:
    import lightning
    import torchmetrics

    return {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "lightning": lightning.__version__,
        "torchmetrics": torchmetrics.__version__,
    }


def hardware(trainer: L.Trainer) -> dict:
    info = {
        "accelerator": type(trainer.accelerator).__name__,
        "devices": trainer.num_devices,
        "cpu_count": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "machine": platform.machine(),
        "processor": platform.processor() or platform.machine(),
    }
    if torch.cuda.is_available() and "CUDA" in info["accelerator"]:
        info["gpu"] = torch.cuda.get_device_name(0)
    return info


def train(config: TrainConfig, overwrite: bool = False) -> tuple[PonderLitModule, dict]:
    """Train one run and write ``model.pt``, ``history.csv`` and ``metadata.json`` to its folder.

    Returns:
        the module with its best weights loaded (eval mode) and the metadata dictionary.
    """
    run_dir = config.run_dir
    if (run_dir / "model.pt").exists() and not overwrite:
        raise FileExistsError(f"{run_dir} already holds a trained model; pass overwrite=True (--overwrite).")
    run_dir.mkdir(parents=True, exist_ok=True)
    L.seed_everything(config.seed, workers=True, verbose=False)
    datamodule = MNISTDataModule(
        config.data_dir,
        config.batch_size,
        TRAIN_ROTATION[config.experiment],
        train_subset=config.train_subset,
    )
    module = PonderLitModule(**config.module_kwargs())
    best, timer = BestWeights(), EpochTimer()
    callbacks = [best, timer]
    if config.early_stopping_patience:
        callbacks.append(EarlyStopping("val/acc", mode="max", patience=config.early_stopping_patience))
    trainer = L.Trainer(
        max_epochs=config.epochs,
        accelerator=config.accelerator,
        devices=config.devices,
        strategy=config.strategy,
        precision=config.precision,
        gradient_clip_val=config.grad_clip,
        callbacks=callbacks,
        logger=_logger(config),
        enable_checkpointing=False,
        enable_progress_bar=config.progress_bar,
        enable_model_summary=False,
        deterministic="warn",  # exact on the CPU; warns instead of failing on GPU ops without a deterministic kernel
        num_sanity_val_steps=0,
    )
    start = time.perf_counter()
    trainer.fit(module, datamodule=datamodule)
    wall = time.perf_counter() - start

    module.load_state_dict(best.state)
    module.eval()
    save_weights(module, run_dir / "model.pt")
    metrics_csv = Path(trainer.logger.log_dir) / "metrics.csv"
    if metrics_csv.exists():
        epoch_history(metrics_csv).to_csv(run_dir / "history.csv", index=False)
    n_train = len(datamodule.train_labels)
    metadata = {
        "config": {k: v for k, v in asdict(config).items() if k != "extra"},
        "hparams": dict(module.hparams),
        "epochs_run": trainer.current_epoch,
        "best_epoch": best.best_epoch,
        "best_val_acc": best.best,
        "wall_time_s": round(wall, 1),
        "epoch_times_s": [round(t, 2) for t in timer.times],
        "train_images": n_train,
        "train_images_per_s": round(n_train * len(timer.times) / sum(timer.times), 1)
        if timer.times
        else None,
        "hardware": hardware(trainer),
        "versions": library_versions(),
        "quick": bool(config.train_subset),
        **config.extra,
    }
    (run_dir / "metadata.json").write_text(json.dumps(metadata, indent=2) + "\n")
    return module, metadata
