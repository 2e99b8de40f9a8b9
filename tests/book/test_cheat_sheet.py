"""The cheat sheet's code runs as printed, as a plain script: a step function, PonderLitModule, fit on
a data module, and diagnose on its test set (before: it named a datamodule, x_test and steps_needed
that it never defined, and this test handed them in)."""

import re
import subprocess
import sys
from pathlib import Path

import pytest
from test_readme import per_run

from pondernet_tutorial.analysis.heads import HeadRules, collapse
from pondernet_tutorial.analysis.verdicts import Rules, judge
from pondernet_tutorial.runs.config import PRETRAINED_DIR
from pondernet_tutorial.runs.registry import get_experiment
from pondernet_tutorial.runs.studies import load_study

CHEAT_SHEET = Path(__file__).resolve().parents[2] / "book" / "cheat_sheet.md"
MAX_LINES = 18  # imports, a step function of 10 lines, and five lines that train and diagnose


def snippet() -> str:
    blocks = re.findall(r"```python\n(.*?)```", CHEAT_SHEET.read_text(encoding="utf-8"), re.S)
    assert len(blocks) == 1, "the cheat sheet shows one code block"
    return blocks[0]


def test_the_snippet_is_short():
    lines = [line for line in snippet().splitlines() if line.strip()]
    assert len(lines) <= MAX_LINES


@pytest.mark.slow
def test_the_snippet_runs_as_a_plain_script(tmp_path):
    script = tmp_path / "cheat_sheet.py"
    script.write_text(snippet(), encoding="utf-8")
    done = subprocess.run(
        [sys.executable, str(script)], cwd=tmp_path, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "the prior's mean over 1..N: 2.0" in done.stdout  # λ_p 0.5 over N = 12: about 2 steps
    assert "verdict: " in done.stdout and "accuracy: " in done.stdout
    assert "the task is not learned" not in done.stdout  # the snippet trains a model that learns parity


def judged_heads(study: str, set_name: str = "test"):
    """One test set of a shipped halting-heads study: each configuration's verdict (the book's judge)
    and its collapsed seeds (chapter 13's rule), the runs read as the README's test reads them."""
    experiment = load_study(study, PRETRAINED_DIR)["runs"]["experiment"].iloc[0]  # one per heads study
    runs = per_run(study, experiment, set_name)
    configs, _ = judge(runs, 1 / get_experiment(experiment).n_classes)
    return configs, collapse(runs)[1]


def test_which_head_holds():
    """The cheat sheet's "Which halting head" says what chapter 13's tables give, by its rules."""
    text = CHEAT_SHEET.read_text(encoding="utf-8")
    assert "## Which halting head" in text and "never collapsed to two steps or fewer." in " ".join(
        text.split()
    )
    assert HeadRules().collapsed == 2  # "two steps or fewer"
    for study in (
        "halting-heads-pointer",
        "halting-heads-noexit",
    ):  # pointer chasing, with and without the bit
        configs, _ = judged_heads(study)
        solves = configs["solves"]
        adaptive = configs["family"].isin(["pondernet", "act"])
        assert (solves[adaptive] == True).all(), study  # noqa: E712 (None is not True)
        assert solves["TRM's head"] is False and solves["HRM's head"] is False, study
        assert solves["HRM's head (last epoch)"] is True, study
    configs, collapsed = judged_heads("halting-heads-parity")
    halting = ~configs["family"].isin(["fixed", "control"])
    assert configs.loc[halting, "solves"].map(lambda v: v is False).all()  # no halting head solved it
    fixed = per_run("halting-heads-parity", "parity-paper16-interpolation")
    fixed = fixed[fixed["config"] == "fixed 20 steps"]
    mark = configs["accuracy"].max() - Rules().margin  # the rules' mark for solving
    assert len(fixed) == 3 and (fixed["accuracy_low"] >= mark).sum() == 2
    assert "where two of the fixed depth's three seeds did;" in " ".join(text.split())
    never = collapsed.loc[halting[halting].index, "collapsed"] == 0
    assert set(never[never].index) == set(configs.index[configs["family"] == "pondernet"])


def test_the_defaults_numbers_hold():
    """ "The defaults" gives pointer chasing's steps after the exit for λ_p = 0.8 and 0.2 (each seed, on
    the test set) and labml's parity's steps for λ_p = 0.2, a prior mean of 5 (before, it said that the
    steps settle near 1/λ_p where a step cannot tell that it is done, which labml's parity contradicts)."""
    text = " ".join(CHEAT_SHEET.read_text(encoding="utf-8").split())
    pointer = per_run("pointer", "pointer-extrapolation")
    after = (pointer["steps"] - pointer["difficulty"]).groupby(pointer["config"]).agg(["min", "max"])
    low = after.loc["PonderNet λ_p=0.8"]
    assert f"{low['min']:.1f}" == f"{low['max']:.1f}"
    assert f"halted {low['min']:.1f} steps after the exit with $\\lambda_p = 0.8$" in text
    high = after.loc["PonderNet λ_p=0.2"]
    assert f"and {high['min']:.1f} to {high['max']:.1f} after it with $\\lambda_p = 0.2$, by seed" in text
    parity = per_run("parity-interpolation", "parity-interpolation")
    steps = parity.loc[parity["config"] == "PonderNet λ_p=0.2", "steps"]
    assert len(steps) == 3 and steps.min() > 2 * 5  # each seed twice the prior's mean of 5, or more
    assert f"a mean of 5, took {steps.min():.1f} to {steps.max():.1f} steps" in text
