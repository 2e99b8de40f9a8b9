"""What the book's notebooks share: the device, the study tables (shipped, or trained anew), and
showing figures and numbers both in Jupyter/Colab and in the rendered book.

A notebook loads the shipped, full-budget tables unless asked to train (``TRAIN_FROM_SCRATCH = True``,
into ``results/notebook``) or unless nothing is shipped. ``PONDERNET_QUICK=1`` (set by CI only) trains
the study's tiny quick runs into a folder outside the repository instead, so that the training cells
are executed in CI; their numbers are never what the rendered book shows.

``glue`` and ``show`` use myst-nb's ``glue`` when it is installed (the book build) and do without it
elsewhere (Colab has no myst-nb): a figure appears inline in Jupyter, and once in the book, where the
cell's own output is removed (tag ``remove-output``) and the ``{glue:figure}`` shows it.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

QUICK_VARIABLE = "PONDERNET_QUICK"
QUICK_DIR = Path(tempfile.gettempdir()) / "pondernet_tutorial-quick"  # never inside the repository
NOTEBOOK_DIR = Path("results") / "notebook"


def quick_mode() -> bool:
    """True when ``PONDERNET_QUICK=1``: CI's tiny runs."""
    return os.environ.get(QUICK_VARIABLE, "") == "1"


def pick_accelerator() -> str:
    """``"gpu"`` on CUDA, ``"mps"`` on Apple silicon, else ``"cpu"``."""
    import torch

    if torch.cuda.is_available():
        return "gpu"
    if getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available():
        return "mps"
    return "cpu"


def glue(name: str, value) -> None:
    """Record a value for ``{glue:text}`` in the book; nothing without myst-nb (Colab, plain Jupyter).

    NumPy scalars are turned into plain Python numbers, so that the book prints ``3.21``.
    """
    try:
        from myst_nb import glue as myst_glue
    except ImportError:
        return
    if hasattr(value, "item") and getattr(value, "ndim", 1) == 0:
        value = value.item()
    myst_glue(name, value, display=False)


def show(name: str, fig) -> None:
    """Glue a figure for ``{glue:figure}`` and display it inline, then close it."""
    import matplotlib.pyplot as plt
    from IPython.display import display

    glue(name, fig)
    display(fig)
    plt.close(fig)


def study_tables(*studies: str, train_from_scratch: bool = False) -> dict:
    """The tables of the named studies: ``{study: tables}`` and ``"root"``, the results folder.

    * shipped results present and no training asked: the package's ``pretrained/`` folder;
    * ``train_from_scratch`` (or nothing shipped): full-budget runs in ``results/notebook`` (runs
      already there with the same configuration are reused);
    * quick mode (CI): the quick runs in a temporary folder (never shipped, never in the book).
    """
    from .config import PRETRAINED_DIR
    from .studies import load_study, reproduce

    if quick_mode():
        root = QUICK_DIR
        reproduce(studies, root, quick=True, accelerator=pick_accelerator())
    elif train_from_scratch or not all(
        (PRETRAINED_DIR / "studies" / s / "study.json").is_file() for s in studies
    ):
        root = NOTEBOOK_DIR
        reproduce(studies, root, accelerator=pick_accelerator())
    else:
        root = PRETRAINED_DIR
    tables = {study: load_study(study, root) for study in studies}
    tables["root"] = root
    return tables


def run_folder(root, experiment: str, method: str = "pondernet", seed: int = 0, **options) -> Path:
    """The folder of one run under a results root (``options`` as in ``TrainConfig``)."""
    from .config import TrainConfig

    return TrainConfig(
        experiment=experiment, method=method, seed=seed, quick=quick_mode(), output_dir=str(root), **options
    ).run_dir


def load_run_model(root, experiment: str, method: str = "pondernet", seed: int = 0, **options):
    """A trained run's model (eval mode) from a results root."""
    from .checkpoints import load_model

    return load_model(run_folder(root, experiment, method, seed, **options) / "model.pt")


def per_sample(root, experiment: str, method: str = "pondernet", seeds=(0, 1, 2), **options):
    """The per-sample tables of a run's seeds (where kept), with a ``seed`` column."""
    import pandas as pd

    frames = []
    for seed in seeds[:1] if quick_mode() else seeds:
        path = run_folder(root, experiment, method, seed, **options) / "per_sample.csv.gz"
        frames.append(pd.read_csv(path).assign(seed=seed))
    return pd.concat(frames, ignore_index=True)
