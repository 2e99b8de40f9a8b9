"""PonderNet, explained: the package behind the tutorial book.

Where things go:

* a **step function** (the network applied at every step) is a
  :class:`~pondernet_tutorial.steps.base.StepFunction` in ``steps/`` (``steps/mnist.py``,
  ``steps/parity.py``), registered by name in :data:`pondernet_tutorial.steps.STEPS`;
* a **halting method** (how a step function decides when to stop, and how that is trained) is a
  :class:`~pondernet_tutorial.methods.base.PonderingMethod` in ``methods/`` (PonderNet, ACT, the
  fixed-step baseline), registered in :data:`pondernet_tutorial.methods.METHODS`;
* an **experiment** (a data module, a default step function, training defaults) is one entry of
  :data:`pondernet_tutorial.registry.EXPERIMENTS`, its data module in ``data/``.

Everything above those is generic: :mod:`~pondernet_tutorial.halting` and
:mod:`~pondernet_tutorial.losses` (PonderNet's equations), :mod:`~pondernet_tutorial.runs.config` (a run's
configuration and folder), :mod:`~pondernet_tutorial.lightning_module`,
:mod:`~pondernet_tutorial.runs.training`, :mod:`~pondernet_tutorial.runs.evaluation`,
:mod:`~pondernet_tutorial.runs.checkpoints` (weights-only files and the shipped runs),
:mod:`~pondernet_tutorial.runs.studies` (the runs behind the book) and the command line
(``python -m pondernet_tutorial``).

The names below are imported when first used, so ``import pondernet_tutorial.halting`` loads PyTorch
but not Lightning.
"""

from __future__ import annotations

import importlib

__version__ = "0.3.0"

_EXPORTS = {
    "PonderNet": "methods.pondernet",
    "ACT": "methods.act",
    "FixedSteps": "methods.fixed",
    "PonderOutput": "methods.base",
    "HaltingRule": "methods.base",
    "StepFunction": "steps.base",
    "MNISTStep": "steps.mnist",
    "ParityStep": "steps.parity",
    "PonderLoss": "losses",
    "ReconstructionLoss": "losses",
    "RegularizationLoss": "losses",
    "PonderLitModule": "lightning_module",
    "fit": "fit",
    "MNISTDataModule": "data.mnist",
    "ParityDataModule": "data.parity",
    "TrainConfig": "runs.config",
    "train": "runs.training",
    "load_model": "runs.checkpoints",
    "load_pretrained": "runs.checkpoints",
    "log_halting_distribution": "halting",
    "geometric_prior": "halting",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    if name in _EXPORTS:
        return getattr(importlib.import_module(f".{_EXPORTS[name]}", __name__), name)
    raise AttributeError(f"module 'pondernet_tutorial' has no attribute {name!r}")
