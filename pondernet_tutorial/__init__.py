"""PonderNet, explained: the package behind the tutorial book.

What the book teaches, in reading order:

* :mod:`~pondernet_tutorial.minimal`: the whole of PonderNet in about 40 lines;
* ``steps/``: step functions ``(x, h_n) -> (ŷ_n, z_n, h_{n+1})``, one file per task;
* ``methods/``: halting methods over any step function: PonderNet (its equations in one file,
  :mod:`~pondernet_tutorial.methods.pondernet`), ACT, fixed steps;
* :mod:`~pondernet_tutorial.halting`: the parameters' checks, the halting coins and the geometric prior;
* ``data/``: the tasks' generators (no Lightning), and their Lightning data modules in
  :mod:`~pondernet_tutorial.data.modules`;
* :mod:`~pondernet_tutorial.lightning_module` and :mod:`~pondernet_tutorial.fitting`: one plain
  LightningModule and the standard way to train it.

The rest serves the book's experiments and is not needed to use PonderNet:

* ``runs/``: the run machinery: the names (:mod:`~pondernet_tutorial.runs.registry`: the experiments
  by name, a new one is one entry, and the step functions, methods and losses that a configuration or
  a checkpoint may name), the options of the command line (:mod:`~pondernet_tutorial.runs.options`),
  a run's configuration and folder, ``train()`` around ``fit()``, weights-only checkpoints and the
  shipped runs, evaluation tables, the studies behind the book, whole-file writes and locks,
  processes, the command line (``python -m pondernet_tutorial``), the fast path and the CUDA-graph
  training step, and the halting tables (how a run's steps follow the difficulty);
* ``analysis/``: the book's figures, its rules and verdicts, and the notebooks' helpers;
* ``pretrained/``: the shipped runs and the tables of every study.

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
    "TRMHalting": "methods.trm",
    "HRMHalting": "methods.hrm",
    "Unroll": "methods.base",
    "diagnose": "analysis.diagnose",
    "HaltingMethod": "methods.base",
    "StepFunction": "steps.base",
    "MNISTStep": "steps.mnist",
    "ParityStep": "steps.parity",
    "PointerStep": "steps.pointer",
    "PonderLoss": "methods.pondernet",
    "ReconstructionLoss": "methods.pondernet",
    "RegularizationLoss": "methods.pondernet",
    "PonderLitModule": "lightning_module",
    "fit": "fitting",
    "MNISTDataModule": "data.modules",
    "ParityDataModule": "data.modules",
    "PointerDataModule": "data.modules",
    "TrainConfig": "runs.config",
    "train": "runs.training",
    "load_model": "runs.checkpoints",
    "load_pretrained": "runs.checkpoints",
    "log_halting_distribution": "methods.pondernet",
    "geometric_prior": "halting",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    if name in _EXPORTS:
        return getattr(importlib.import_module(f".{_EXPORTS[name]}", __name__), name)
    raise AttributeError(f"module 'pondernet_tutorial' has no attribute {name!r}")
