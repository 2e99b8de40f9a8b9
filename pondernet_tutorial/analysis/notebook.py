"""What the book's notebooks share: the device, the study tables (shipped, or trained anew), and
showing figures and numbers both in Jupyter/Colab and in the rendered book.

A notebook loads the shipped, full-budget tables unless asked to train (``TRAIN_FROM_SCRATCH = True``,
into ``results/notebook``) or unless nothing is shipped. ``PONDERNET_QUICK=1`` (set by CI only) trains
the study's tiny quick runs into a folder outside the repository instead (``QUICK_DIR``, one per
checkout), so that the training cells are executed in CI; their numbers are never what the rendered book
shows.

``glue`` records a value in the cell's outputs in the very form myst-nb's ``glue`` gives it (a
``display_data`` output whose MIME types carry myst-nb's prefix and whose metadata names the value), with
or without myst-nb: the book build reads it for ``{glue:text}``, and a notebook executed where myst-nb
is absent (Colab, CI's Colab-like run) carries the same values, from which ``tools/colab_copies.py``
writes the notebooks Colab opens. ``show`` glues a figure and displays it inline: in Jupyter and on
Colab it appears in the cell's output; in the book the cell's own output is removed (tag
``remove-output``) and the ``{glue:figure}`` shows it.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from pathlib import Path

QUICK_VARIABLE = "PONDERNET_QUICK"


def checkout_key() -> str:
    """A short key of the folder this package is imported from (a clone, or an installation), so that
    the quick runs of two checkouts on one machine never mix."""
    return hashlib.sha256(str(Path(__file__).resolve().parents[2]).encode()).hexdigest()[:12]


# Quick runs: never inside the repository, and one folder per checkout (CI removes only its own).
QUICK_DIR = Path(tempfile.gettempdir()) / f"pondernet_tutorial-quick-{checkout_key()}"
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


# myst-nb's prefix for a glued value's MIME types (myst_nb.ext.glue.GLUE_PREFIX): a record for myst-nb
# and tools/colab_copies.py, of types no notebook front end has a renderer for.
GLUE_PREFIX = "application/papermill.record/"


def glue(name: str, value) -> None:
    """Record a value for ``{glue:text}`` and ``{glue:figure}``, as myst-nb's ``glue(display=False)``
    does; nothing outside a Jupyter kernel.

    NumPy scalars are turned into plain Python numbers, so that the book prints ``3.21``.
    """
    from IPython import get_ipython

    shell = get_ipython()
    if shell is None:
        return
    from IPython.display import display

    if hasattr(value, "item") and getattr(value, "ndim", 1) == 0:
        value = value.item()
    bundle, metadata = shell.display_formatter.format(value)
    metadata = dict(metadata or {}, scrapbook={"name": name, "mime_prefix": GLUE_PREFIX})
    display({GLUE_PREFIX + mime: data for mime, data in bundle.items()}, raw=True, metadata=metadata)


def claim(holds, sentence: str) -> None:
    """Check a qualitative claim that the page makes in a hand-written sentence (who is better, which
    verdict, that nothing extrapolates) against the tables the page reads: the build fails, naming the
    sentence, when the data no longer say it. Skipped in quick mode, whose tiny runs show nothing."""
    if not quick_mode() and not bool(holds):
        raise AssertionError(f"the page says {sentence!r}, and the tables no longer do: rewrite the sentence")


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
    from ..runs.config import PRETRAINED_DIR
    from ..runs.studies import load_study, reproduce
    from ..untrusted import TableBudget

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
    budget = TableBudget()  # the studies' tables together, bounded as each one is
    tables = {study: load_study(study, root, budget) for study in studies}
    tables["root"] = root
    return tables


def select(runs, **values):
    """The rows of a study's ``runs`` table whose columns equal ``values`` (``experiment=..., seed=...``)."""
    mask = True
    for column, value in values.items():
        mask = mask & (runs[column] == value)
    return runs[mask]


def run_file(root, run, name: str) -> Path:
    """A file of one run (a row of a study's ``runs`` table) under the results root. The table is data:
    a ``path`` that leads out of the root (absolute, through ``..`` or a link) is a ``DamagedFileError``."""
    from ..untrusted import DamagedFileError

    folder, base = run["path"], Path(root).resolve()
    if (
        not isinstance(folder, str)
        or Path(folder).is_absolute()
        or ".." in Path(folder).parts
        or base not in (base / folder / name).resolve().parents
    ):
        raise DamagedFileError(
            0,
            f"the runs table under {root} names a run folder outside it ({str(folder)[:80]!r}): rebuild its tables",
        )
    return Path(root) / folder / name


def load_model(root, run):
    """A run's trained model (eval mode)."""
    from ..runs.checkpoints import load_model as load
    from ..runs.config import WEIGHTS

    return load(run_file(root, run, WEIGHTS))


def load_json(root, run, name: str = "metadata.json") -> dict:
    """A run's record, read as the run machinery reads it (bounded, nested at most MAX_DEPTH deep)."""
    from ..untrusted import read_json

    path = run_file(root, run, name)
    if (record := read_json(path)) is None:
        raise ValueError(f"{path} is missing or is not a record of this package: reproduce the run again.")
    return record


def load_table(root, runs, name: str):
    """A per-run table (``per_sample.csv.gz``, ``history.csv``) of several runs, with their ``runs``
    columns (experiment, variant, seed, ...) in front."""
    import pandas as pd

    from ..runs.evaluation import STEP_COLUMNS
    from ..untrusted import DamagedFileError, TableBudget, read_table

    frames, seen, budget = [], set(), TableBudget()  # the tables together, bounded as each is
    for _, run in runs.iterrows():
        path = run_file(root, run, name)
        if path.resolve() in seen:  # the table is data: a run named many times, or through links to
            raise DamagedFileError(  # one folder, would be read as many times
                0, f"the runs table under {root} names {str(run['path'])[:80]!r} twice: rebuild its tables"
            )
        seen.add(path.resolve())
        # a sample's halting step sizes the figures' arrays (np.bincount)
        frame = read_table(path, steps=STEP_COLUMNS.get(name.split(".")[0], ()), budget=budget)
        for column in ("experiment", "variant", "method", "seed"):
            frame.insert(0, column, run[column])
        frames.append(frame)
    return pd.concat(frames, ignore_index=True)
