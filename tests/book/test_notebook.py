"""The notebooks' helpers: glue without myst-nb (Colab), figures shown once, tables of a study's runs."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import matplotlib
import pytest

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402

from pondernet_tutorial.analysis import notebook  # noqa: E402


def test_glue_is_a_no_op_outside_a_kernel(monkeypatch):
    monkeypatch.setattr("IPython.get_ipython", lambda: None)
    shown = []
    monkeypatch.setattr("IPython.display.display", lambda *a, **k: shown.append(a))
    notebook.glue("x", 1.5)
    assert shown == []


def recorded(monkeypatch, glue, *args) -> list:
    """What ``glue(*args)`` hands to IPython's ``display`` in a kernel (an IPython shell here)."""
    from IPython.core.interactiveshell import InteractiveShell

    shell = InteractiveShell.instance()
    monkeypatch.setattr("IPython.get_ipython", lambda: shell)
    calls = []
    monkeypatch.setattr("IPython.display.display", lambda *a, **k: calls.append((a, k)))
    glue(*args)
    return calls


@pytest.mark.parametrize("value", [3.25, "solves it", "fig"])
def test_glue_records_what_myst_nb_records_without_myst_nb(monkeypatch, value):
    """The output that the book build and tools/colab_copies.py read is myst-nb's own record."""
    myst_glue = pytest.importorskip("myst_nb.ext.glue")
    if value == "fig":
        value, _ = plt.subplots()
    ours = recorded(monkeypatch, notebook.glue, "x", value)
    monkeypatch.setitem(sys.modules, "myst_nb", None)  # ours needs no myst-nb
    assert recorded(monkeypatch, notebook.glue, "x", value) == ours
    monkeypatch.delitem(sys.modules, "myst_nb")
    monkeypatch.setattr(myst_glue, "ipy_display", lambda *a, **k: theirs.append((a, k)))
    theirs = []
    myst_glue.glue("x", value, display=False)
    assert ours == theirs and ours[0][1]["metadata"]["scrapbook"]["name"] == "x"
    plt.close("all")


def test_glue_gives_plain_numbers(monkeypatch):
    import numpy as np

    ((args, _),) = recorded(monkeypatch, notebook.glue, "x", np.float64(3.25))
    assert args[0] == {notebook.GLUE_PREFIX + "text/plain": "3.25"}


def test_show_displays_the_figure_once_and_closes_it(monkeypatch):
    shown = []
    monkeypatch.setattr("IPython.get_ipython", lambda: None)  # glue records nothing outside a kernel
    monkeypatch.setattr("IPython.display.display", lambda obj: shown.append(obj))
    fig, _ = plt.subplots()
    notebook.show("fig", fig)
    assert shown == [fig] and not plt.fignum_exists(fig.number)


def test_tables_of_selected_runs(tmp_path):
    runs = pd.DataFrame(
        {"path": ["a/v/seed0", "a/v/seed1"], "experiment": "a", "variant": "v", "method": "m", "seed": [0, 1]}
    )
    for seed in (0, 1):
        (tmp_path / f"a/v/seed{seed}").mkdir(parents=True)
        pd.DataFrame({"epoch": [0, 1], "val/acc": [0.5, 0.6 + seed]}).to_csv(
            tmp_path / f"a/v/seed{seed}/history.csv", index=False
        )
    both = notebook.load_table(tmp_path, runs, "history.csv")
    assert list(both["seed"]) == [0, 0, 1, 1] and list(both.columns[:4]) == [
        "seed",
        "method",
        "variant",
        "experiment",
    ]
    assert len(notebook.select(runs, seed=1)) == 1


ROOT = Path(__file__).resolve().parents[2]


def python_in(cwd, code: str, pythonpath=ROOT, **env) -> str:
    """Run ``code`` in a fresh interpreter from ``cwd`` with the package of ``pythonpath``; its output."""
    environment = {k: v for k, v in os.environ.items() if k != "PONDERNET_DATA_DIR"}
    environment.update(PYTHONPATH=str(pythonpath), **env)
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=cwd, env=environment, capture_output=True, text=True, check=True
    )
    return done.stdout.strip()


def test_quick_mode_writes_outside_the_repository():
    repository = Path(__file__).resolve().parents[2]
    assert repository not in notebook.QUICK_DIR.resolve().parents


def test_quick_runs_are_kept_apart_per_checkout(tmp_path):
    """Two clones on one machine get two quick folders; one clone gets the same folder every time."""
    clone = tmp_path / "another-clone"
    (clone / "pondernet_tutorial" / "analysis").mkdir(parents=True)
    for name in ("__init__.py", "analysis/__init__.py", "analysis/notebook.py"):
        shutil.copy(ROOT / "pondernet_tutorial" / name, clone / "pondernet_tutorial" / name)
    code = "from pondernet_tutorial.analysis.notebook import QUICK_DIR; print(QUICK_DIR)"
    here = python_in(tmp_path, code)
    assert here == str(notebook.QUICK_DIR)  # another process, the same checkout
    there = python_in(tmp_path, code, pythonpath=clone)
    assert there != here and Path(there).parent == Path(here).parent


@pytest.mark.slow
def test_the_notebooks_find_mnist_as_the_tests_do_from_any_working_directory(monkeypatch):
    from pondernet_tutorial.data import mnist

    monkeypatch.delenv("PONDERNET_DATA_DIR", raising=False)
    expected = str(mnist.resolve_data_dir())
    code = "from pondernet_tutorial.data.mnist import resolve_data_dir; print(resolve_data_dir())"
    for cwd in (ROOT / "book", ROOT, ROOT / "pondernet_tutorial" / "data"):  # the book runs them from book/
        assert python_in(cwd, code) == expected, cwd
    shared = ROOT.parent / "shared" / "data"
    if (shared / "MNIST" / "raw" / mnist.MNIST_FILES[0]).is_file():
        assert expected == str(shared)  # a clone finds shared/data beside it by itself


def test_a_relative_data_dir_is_refused_with_what_to_do(monkeypatch):
    from pondernet_tutorial.data.mnist import RelativeDataDirError, resolve_data_dir

    monkeypatch.setenv("PONDERNET_DATA_DIR", "../shared/data")
    with pytest.raises(RelativeDataDirError, match="absolute path.*realpath ../shared/data"):
        resolve_data_dir()
    monkeypatch.setenv("PONDERNET_DATA_DIR", "/data/mnist")
    assert resolve_data_dir() == Path("/data/mnist")


def test_a_run_record_nested_without_end_is_refused_in_one_line(tmp_path):
    """The chapters read each run's metadata.json through load_json; a record nested 100,000 deep made
    json.loads raise a RecursionError in the notebook (round 8 of attacks). It is now read as the run
    machinery reads it, depth-bounded. (Break: load_json with json.loads again.)"""
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "metadata.json").write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(ValueError, match="is not a record of this package"):
        notebook.load_json(tmp_path, {"path": "run"})
    (tmp_path / "run" / "metadata.json").write_text('{"config": {"seed": 0}}')
    assert notebook.load_json(tmp_path, {"path": "run"}) == {"config": {"seed": 0}}
