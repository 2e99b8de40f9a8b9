"""PonderNet, explained: the package behind the tutorial book.

The pieces, from the bottom up:

* :mod:`~pondernet_tutorial.halting`: λ → p in log space, the geometric prior, halting rules;
* :mod:`~pondernet_tutorial.losses`: reconstruction and KL regularisation, vectorised;
* :mod:`~pondernet_tutorial.model`: :class:`PonderNet`, which unrolls any step function;
* :mod:`~pondernet_tutorial.mnist_step`: the book's MNIST step function;
* :mod:`~pondernet_tutorial.data`: MNIST as tensors, batched rotation, the data module;
* :mod:`~pondernet_tutorial.lightning_module`: the LightningModule;
* :mod:`~pondernet_tutorial.checkpoints`: weights-only checkpoints and the shipped models.
"""

from .data import MNISTDataModule, RotationSpec, load_mnist, resolve_data_dir, rotate
from .halting import (
    expected_steps,
    geometric_prior,
    log_geometric_prior,
    log_halting_distribution,
    sample_halting_step,
    threshold_halting_step,
)
from .lightning_module import PonderLitModule
from .losses import PonderLoss, ReconstructionLoss, RegularizationLoss
from .mnist_step import MNISTStep, mnist_pondernet
from .model import PonderNet, PonderOutput, StepFunction

__version__ = "0.1.0"

__all__ = [
    "MNISTDataModule",
    "MNISTStep",
    "PonderLitModule",
    "PonderLoss",
    "PonderNet",
    "PonderOutput",
    "ReconstructionLoss",
    "RegularizationLoss",
    "RotationSpec",
    "StepFunction",
    "expected_steps",
    "geometric_prior",
    "load_mnist",
    "log_geometric_prior",
    "log_halting_distribution",
    "mnist_pondernet",
    "resolve_data_dir",
    "rotate",
    "sample_halting_step",
    "threshold_halting_step",
]
