"""What the book's experiment notebooks share: pick the device, load shipped results or train anew.

A notebook loads the shipped, full-budget results unless asked to train (``TRAIN_FROM_SCRATCH = True``)
or unless nothing is shipped. ``PONDERNET_QUICK=1`` (set by CI only) trains a tiny quick run instead,
so that the training cells are executed in CI; its numbers are never what the rendered book shows.
"""

from __future__ import annotations

import os
from pathlib import Path

import torch

from .checkpoints import PRETRAINED_DIR, available_pretrained
from .experiments import load_results, reproduce
from .training import TrainConfig

QUICK_VARIABLE = "PONDERNET_QUICK"


def quick_mode() -> bool:
    """True when ``PONDERNET_QUICK=1``: CI's tiny runs."""
    return os.environ.get(QUICK_VARIABLE, "") == "1"


def pick_accelerator() -> str:
    """``"gpu"`` on CUDA, ``"mps"`` on Apple silicon, else ``"cpu"``."""
    if torch.cuda.is_available():
        return "gpu"
    if getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available():
        return "mps"
    return "cpu"


def results_root(experiments: tuple[str, ...], train_from_scratch: bool = False, seeds=(0, 1, 2)) -> Path:
    """The folder whose results the notebook shows, training first when asked or needed.

    * shipped results present and no training asked: the package's ``pretrained/`` folder;
    * ``train_from_scratch`` (or nothing shipped): full-budget runs in ``results/notebook``;
    * quick mode (CI): one tiny run per experiment in ``results/quick`` (never shipped).
    """
    shipped = available_pretrained()
    have_all = all(set(seeds) <= set(shipped.get(e, [])) for e in experiments)
    if quick_mode():
        config = TrainConfig(epochs=1, train_subset=2000, progress_bar=False, accelerator=pick_accelerator())
        root = Path("results/quick")
        reproduce(root, seeds=(0,), experiments=experiments, base=config, limit=500, overwrite=True)
        return root
    if train_from_scratch or not have_all:
        config = TrainConfig(accelerator=pick_accelerator())
        root = Path("results/notebook")
        reproduce(root, seeds=seeds, experiments=experiments, base=config)
        return root
    return PRETRAINED_DIR


def load_notebook_results(experiments: tuple[str, ...], train_from_scratch: bool = False) -> dict:
    """:func:`results_root` and then its tables, restricted to ``experiments``."""
    root = results_root(experiments, train_from_scratch)
    tables = load_results(root)
    for name, table in tables.items():
        if "experiment" in table:
            tables[name] = table[table["experiment"].isin(experiments)].reset_index(drop=True)
    tables["root"] = root
    return tables
