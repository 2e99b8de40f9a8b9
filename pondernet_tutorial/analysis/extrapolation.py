"""The paper's parity extrapolation runs continued to the updates' limit (chapter 12 and the closing
chapter): each run's end with its 95% interval, the trend of its last updates with its interval, and
the sentences the two pages guard with them, so that a test can mutate the tables and see each fail.

The words follow the book's rule (:class:`~pondernet_tutorial.analysis.verdicts.Rules`): a run is above
the *learned mark* (chance plus ``Rules.learned``) when its whole 95% interval is; under it when the
whole interval is; otherwise undetermined. A curve *rises* (or *falls*) over its last ``window``
updates when the 95% interval of its least-squares slope lies above (or below) zero; otherwise it has
*no clear trend*.
"""

import math

import numpy as np
import pandas as pd

from .paper_claims import wilson
from .verdicts import Rules, judge, side

RULES = Rules()  # the book's one rule set
WINDOW = 100_000  # the last updates a trend is read over (ten points of the curves)
ABOVE, UNDER, OPEN = "above the mark", "under the mark", "undetermined"
RISING, FALLING, NO_TREND = "rising", "falling", "no clear trend"


def t_quantile(p: float, dof: int) -> float:
    """The ``p`` quantile (p > 0.5) of Student's t with ``dof`` degrees of freedom, by integrating its
    density (no SciPy in the package's requirements)."""
    x = np.linspace(0.0, 60.0, 600_001)
    log_c = math.lgamma((dof + 1) / 2) - math.lgamma(dof / 2) - 0.5 * math.log(dof * math.pi)
    density = np.exp(log_c - (dof + 1) / 2 * np.log1p(x**2 / dof))
    cdf = 0.5 + np.concatenate([[0.0], np.cumsum((density[1:] + density[:-1]) / 2 * np.diff(x))])
    return float(np.interp(p, cdf, x))


def slope(updates, accuracy, per: int = WINDOW) -> tuple[float, float, float]:
    """The least-squares slope of ``accuracy`` against ``updates``, in accuracy per ``per`` updates, and
    its 95% interval ``(slope, low, high)`` (Student's t on n − 2 degrees of freedom)."""
    x, y = np.asarray(updates, float) / per, np.asarray(accuracy, float)
    if len(x) < 3:
        raise ValueError(f"a slope with an interval needs 3 points or more; got {len(x)}.")
    centred = x - x.mean()
    b = float((centred * (y - y.mean())).sum() / (centred**2).sum())
    residual = y - y.mean() - b * centred
    se = math.sqrt((residual**2).sum() / (len(x) - 2) / (centred**2).sum())
    half = t_quantile(0.975, len(x) - 2) * se
    return b, b - half, b + half


def continued_runs(continued: pd.DataFrame, chance: float = 0.5, rules: Rules = RULES) -> pd.DataFrame:
    """One row per continued run (index ``method``, ``seed``): ``start`` and ``end`` accuracy on the
    unseen range (one draw of the halting coins), the end's 95% Wilson interval ``low``/``high``, its
    word against the learned mark (``vs_mark``), the slope over the last :data:`WINDOW` updates in
    accuracy per :data:`WINDOW` updates with its interval, and its word (``trend``)."""
    mark = chance + rules.learned
    rows = {}
    for key, run in continued.sort_values("updates").groupby(["method", "seed"], sort=False):
        end = run.iloc[-1]
        low, high = wilson(float(end["unseen_accuracy"]), int(end["unseen_n"]))
        last = run[run["updates"] >= end["updates"] - WINDOW]
        b, b_low, b_high = slope(last["updates"], last["unseen_accuracy"])
        rows[key] = {
            "start": float(run["unseen_accuracy"].iloc[0]),
            "end": float(end["unseen_accuracy"]),
            "low": low,
            "high": high,
            "vs_mark": {1: ABOVE, -1: UNDER, 0: OPEN}[side(low, high, mark)],
            "slope": b,
            "slope_low": b_low,
            "slope_high": b_high,
            "trend": RISING if b_low > 0 else FALLING if b_high < 0 else NO_TREND,
        }
    frame = pd.DataFrame.from_dict(rows, orient="index")
    frame.index.names = ["method", "seed"]
    return frame.sort_index()


def continued_claims(continued: pd.DataFrame, chance: float = 0.5, rules: Rules = RULES) -> dict:
    """The sentences chapter 12 and the closing chapter say about the continued runs, each with whether
    the tables hold it under the rule above: ``{sentence: holds}``."""
    runs = continued_runs(continued, chance, rules)
    others = runs.drop(("act", 1), errors="ignore")
    best = runs["end"].idxmax()
    return {
        "trained to the limit, ACT's seed 1 extrapolates best, its interval above the learned mark": (
            best == ("act", 1) and runs.loc[best, "vs_mark"] == ABOVE
        ),
        "the other three continued runs end under the learned mark": (
            len(others) == 3 and (others["vs_mark"] == UNDER).all()
        ),
        "by the rule neither method extrapolates: neither has every seed above the mark": bool(
            (runs.groupby(level="method")["vs_mark"].agg(lambda v: (v != ABOVE).any())).all()
        ),
        "ACT's seed 0 ends below chance": bool(runs.loc[("act", 0), "high"] < chance),
        "PonderNet's two seeds end above chance": bool((runs.loc["pondernet", "low"] > chance).all()),
        "no continued curve has a clear trend over its last 100,000 updates": bool(
            (runs["trend"] == NO_TREND).all()
        ),
    }


def interpolation_claims(per_run: pd.DataFrame, chance: float = 0.5, rules: Rules = RULES) -> dict:
    """The sentences chapter 12 and the closing chapter say about the paper's parity on interpolation,
    each with whether :func:`~pondernet_tutorial.analysis.verdicts.judge` and each seed's interval hold
    it: ``{sentence: holds}``. ``per_run``: one row per run as ``judge`` takes it, with ``family``
    ``pondernet``, ``act`` and ``control``."""
    configs, setting = judge(per_run, chance, rules)
    mark = setting["best_accuracy"] - rules.margin

    def split(family: str) -> bool:
        """Two seeds, one interval wholly above the mark for solving and one wholly under it; the
        configuration's verdict then undetermined."""
        names = configs.index[configs["family"] == family]
        if len(names) != 1:  # CI's quick runs may lack one; the claims are skipped there
            return False
        name = names[0]
        seeds = per_run[per_run["config"] == name]
        low = seeds.get("accuracy_low", seeds["accuracy"]).fillna(seeds["accuracy"])
        high = seeds.get("accuracy_high", seeds["accuracy"]).fillna(seeds["accuracy"])
        return len(seeds) == 2 and low.max() > mark > high.min() and configs.loc[name, "solves"] is None

    control = configs[configs["family"] == "control"]
    return {
        "one seed of PonderNet and one of ACT solve interpolation and the other does not, so the "
        "table calls both undetermined": setting["learned"] is True and split("pondernet") and split("act"),
        "the control reaches far above chance with its one seed, though short of solving parity": (
            len(control) == 1
            and control["seeds"].iloc[0] == 1
            and control["accuracy_low"].iloc[0] >= chance + rules.learned
            and control["solves"].iloc[0] is False
        ),
    }


def at_the_limit(per_run: pd.DataFrame, continued: pd.DataFrame) -> pd.DataFrame:
    """The extrapolation test set's runs as ``judge`` takes them, with each continued run (``family``
    and ``seed`` as ``method`` and ``seed`` of ``continued``) at its last point: its accuracy (one draw
    of the coins) with its 95% Wilson interval and its mean steps; its ρ, not measured there, NaN."""
    ends = continued_runs(continued)
    steps = continued.sort_values("updates").groupby(["method", "seed"]).last()["unseen_steps"]
    frame = per_run.copy()
    for (method, seed), end in ends.iterrows():
        rows = (frame["family"] == method) & (frame["seed"] == seed)
        frame.loc[rows, ["accuracy", "accuracy_low", "accuracy_high"]] = [end["end"], end["low"], end["high"]]
        frame.loc[rows, ["rho", "rho_low", "rho_high"]] = np.nan
        frame.loc[rows, "steps"] = steps[(method, seed)]
    return frame
