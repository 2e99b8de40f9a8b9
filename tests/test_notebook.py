"""The notebooks' helpers: glue without myst-nb (Colab), figures shown once, tables of a study's runs."""

import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402

from pondernet_tutorial import notebook  # noqa: E402


def test_glue_is_a_no_op_without_myst_nb(monkeypatch):
    monkeypatch.setitem(sys.modules, "myst_nb", None)  # as on Colab: importing it fails
    notebook.glue("x", 1.5)  # no error


def test_glue_gives_plain_numbers_to_myst_nb(monkeypatch):
    import numpy as np

    seen = {}

    class FakeMystNb:
        @staticmethod
        def glue(name, value, display=True):
            seen[name] = (value, display)

    monkeypatch.setitem(sys.modules, "myst_nb", FakeMystNb)
    notebook.glue("x", np.float64(3.25))
    assert seen["x"] == (3.25, False) and type(seen["x"][0]) is float


def test_show_displays_the_figure_once_and_closes_it(monkeypatch):
    shown = []
    monkeypatch.setitem(sys.modules, "myst_nb", None)
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


def test_quick_mode_writes_outside_the_repository():
    from pathlib import Path

    repository = Path(__file__).resolve().parents[1]
    assert repository not in notebook.QUICK_DIR.resolve().parents
