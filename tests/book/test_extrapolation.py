"""The rules behind chapter 12's and the closing chapter's sentences on the paper's parity
(pondernet_tutorial/analysis/extrapolation.py): each sentence holds on the shipped tables, and each
class of table cell it reads, mutated once, makes the sentence fail as the page's claim() would."""

import numpy as np
import pandas as pd
import pytest

from pondernet_tutorial.analysis import extrapolation as ex
from pondernet_tutorial.analysis.notebook import load_json
from pondernet_tutorial.analysis.verdicts import config_label, seeds_on
from pondernet_tutorial.runs.config import PRETRAINED_DIR
from pondernet_tutorial.runs.studies import load_study

STUDY = "parity-paper16-long"
BEST = "trained to the limit, ACT's seed 1 extrapolates best, its interval above the learned mark"
OTHERS = "the other three continued runs end under the learned mark"
NEITHER = "by the rule neither method extrapolates: neither has every seed above the mark"
ACT0 = "ACT's seed 0 ends below chance"
PONDER = "PonderNet's two seeds end above chance"
TREND = "no continued curve has a clear trend over its last 100,000 updates"
SPLIT = (
    "one seed of PonderNet and one of ACT solve interpolation and the other does not, so the "
    "table calls both undetermined"
)
CONTROL = "the control reaches far above chance with its one seed, though short of solving parity"


@pytest.fixture(scope="module")
def tables():
    return load_study(STUDY)


@pytest.fixture
def continued(tables):
    return tables["continued"].copy()


@pytest.fixture
def interpolation(tables):
    """The interpolation runs as the pages judge them: a seed's accuracy is its mean over the draws."""
    runs = tables["runs"][tables["runs"]["experiment"].str.endswith("interpolation")]
    labels = [config_label(load_json(PRETRAINED_DIR, run)["config"]) for _, run in runs.iterrows()]
    runs = runs.assign(config=[n for n, _ in labels], family=[f for _, f in labels])
    return seeds_on(tables["halting"], runs)


def set_end(continued, method, seed, accuracy):
    """The run's last point moved to ``accuracy``."""
    run = continued[(continued["method"] == method) & (continued["seed"] == seed)]
    continued.loc[run["updates"].idxmax(), "unseen_accuracy"] = accuracy


def test_the_t_quantile_and_the_slope_are_the_textbook_ones():
    assert ex.t_quantile(0.975, 9) == pytest.approx(2.2622, abs=1e-3)
    assert ex.t_quantile(0.975, 1) == pytest.approx(12.706, abs=1e-2)
    updates = np.arange(11) * 10_000
    b, low, high = ex.slope(updates, 0.5 + 0.02 * updates / 100_000)
    assert (b, low, high) == pytest.approx((0.02, 0.02, 0.02))
    noisy = 0.6 + np.array([0.01, -0.01] * 5 + [0.0])
    b, low, high = ex.slope(updates, noisy)
    assert low < b < high and low < 0 < high
    with pytest.raises(ValueError, match="3 points"):
        ex.slope([0, 1], [0.5, 0.6])


def test_every_sentence_holds_on_the_shipped_tables(continued, interpolation):
    assert all(ex.continued_claims(continued).values())
    assert all(ex.interpolation_claims(interpolation).values())
    ends = ex.continued_runs(continued)
    assert ends.loc[("act", 1), "vs_mark"] == ex.ABOVE
    assert ends.loc[("act", 1), "end"] == pytest.approx(0.651375)


@pytest.mark.parametrize(
    "mutate, fails",
    [
        # an end accuracy: ACT's seed 1 inside the mark's reach (its interval straddles 60%)
        (lambda c: set_end(c, "act", 1, 0.60), {BEST}),
        # an end accuracy: one PonderNet seed over the mark
        (lambda c: set_end(c, "pondernet", 0, 0.63), {OTHERS}),
        # both PonderNet seeds over it: the method extrapolates by the rule
        (lambda c: (set_end(c, "pondernet", 0, 0.63), set_end(c, "pondernet", 1, 0.63)), {OTHERS, NEITHER}),
        # ACT's seed 0 at chance, not below it
        (lambda c: set_end(c, "act", 0, 0.495), {ACT0}),
        # a PonderNet seed at chance
        (lambda c: set_end(c, "pondernet", 1, 0.505), {PONDER}),
    ],
)
def test_a_mutated_end_fails_its_sentence(continued, mutate, fails):
    mutate(continued)
    claims = ex.continued_claims(continued)
    assert {s for s, holds in claims.items() if not holds} == fails


def test_a_rising_curve_fails_no_clear_trend(continued):
    run = continued[(continued["method"] == "act") & (continued["seed"] == 1)].sort_values("updates")
    last = run.index[-11:]
    # two points per 100,000 updates on top of the shipped curve: its interval then lies above zero
    continued.loc[last, "unseen_accuracy"] += 0.02 * np.arange(11) / 10
    ends = ex.continued_runs(continued)
    assert ends.loc[("act", 1), "trend"] == ex.RISING
    assert not ex.continued_claims(continued)[TREND]


@pytest.mark.parametrize(
    "family, seed, column, value, fails",
    [
        # the control's interval reaching the mark for solving: its verdict undetermined, not "short of it"
        ("control", 0, "accuracy_high", 0.93, {CONTROL}),
        # the control's interval reaching down to within ten points of chance
        ("control", 0, "accuracy_low", 0.59, {CONTROL}),
        # PonderNet's weaker seed reaching over the mark: no longer one seed on each side
        ("pondernet", 0, "accuracy_high", 0.95, {SPLIT}),
        # ACT's better seed's accuracy under the mark
        ("act", 0, "accuracy_low", 0.90, {SPLIT}),
    ],
)
def test_a_mutated_interval_fails_its_sentence(interpolation, family, seed, column, value, fails):
    rows = (interpolation["family"] == family) & (interpolation["seed"] == seed)
    assert rows.sum() == 1
    interpolation.loc[rows, column] = value
    claims = ex.interpolation_claims(interpolation)
    assert {s for s, holds in claims.items() if not holds} == fails


def test_at_the_limit_puts_each_continued_run_at_its_end(tables, continued):
    halting = tables["halting"]
    extra = halting[halting["experiment"].str.endswith("extrapolation")]
    per_run = extra.assign(family=extra["method"].where(extra["learn_halting"].ne(False), "control"))
    after = ex.at_the_limit(per_run, continued)
    act1 = after[(after["family"] == "act") & (after["seed"] == 1)].iloc[0]
    assert act1["accuracy"] == pytest.approx(0.651375)
    assert act1["accuracy_low"] < act1["accuracy"] < act1["accuracy_high"]
    assert np.isnan(act1["rho"])
    control = after[after["family"] == "control"]
    pd.testing.assert_frame_equal(control, per_run[per_run["family"] == "control"])


def test_the_slopes_interval_takes_students_t():
    """x = 0..3, y = 0, 1, 0, 1: slope 0.2, standard error √0.08, and a half-width of t(0.975, 2) =
    4.303 standard errors (a normal 1.96 would be too narrow for four points)."""
    b, low, high = ex.slope([0, 1, 2, 3], [0, 1, 0, 1], per=1)
    assert b == pytest.approx(0.2) and high - b == pytest.approx(4.3027 * 0.08**0.5, rel=1e-3)


def curves(ends: dict, updates=(0, 50_000, 100_000, 150_000, 200_000)) -> pd.DataFrame:
    """Continued runs whose accuracy on the unseen range is flat at ``ends[(method, seed)] = (share,
    n)``."""
    return pd.DataFrame(
        [
            {"method": m, "seed": s, "updates": u, "unseen_accuracy": share, "unseen_n": n}
            for (m, s), (share, n) in ends.items()
            for u in updates
        ]
    )


def test_the_trend_reads_every_point_of_its_window_and_an_open_seed_is_not_above():
    """The window's first point lies exactly WINDOW before the end (three points here, not two), and a
    seed whose interval straddles the mark keeps its method from extrapolating, as one under it does."""
    assert ex.WINDOW == 100_000
    ends = {
        ("act", 0): (0.9, 1000),
        ("act", 1): (0.6, 100),
        ("pondernet", 0): (0.9, 1000),
        ("pondernet", 1): (0.6, 100),
    }
    runs = ex.continued_runs(curves(ends))
    assert list(runs["vs_mark"]) == [ex.ABOVE, ex.OPEN, ex.ABOVE, ex.OPEN]
    claims = ex.continued_claims(curves(ends))
    assert claims["by the rule neither method extrapolates: neither has every seed above the mark"]
