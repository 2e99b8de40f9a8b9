"""The book's rules on halting against difficulty: does a configuration solve a test set, do its steps
follow how hard each input is, and does the set need more than one step at all?

A run's evaluation writes its halting table (:func:`~pondernet_tutorial.runs.evaluation.halting_table`:
per test set, ``ρ(k, n)`` and the accuracy over fresh draws of the halting coins). This module judges
those tables and names what the notebooks state:

* :func:`judge`: the verdicts of the stated :class:`Rules`, per configuration of one test set: does it
  solve the set, and if so, do its steps follow the difficulty or keep a fixed depth; and, for the
  set, whether one step is already enough;
* :func:`seeds_on`: one row per run of a test set, as :func:`judge` reads it;
* :func:`per_difficulty`: a metric per difficulty (accuracy, steps), mean, lowest and highest over
  seeds;
* :func:`config_label`, :func:`span`, :func:`describe_verdicts`: a configuration's name, an interval
  and a count of verdicts as the book prints them.

The rules, in words (the thresholds are :class:`Rules`' fields, declared once, each with its reason).
Every figure is an interval, from the lowest seed to the highest and, where halting is sampled, over
the coin draws of the halting table. A verdict is given only when the whole interval lies on one side
of its threshold (:func:`side`); otherwise it is undetermined, and the verdict says which figure left
it open: *accuracy undetermined* (rule 1) or *ρ undetermined* (rule 3).

1. A set is *learned* when the best configuration's accuracy reaches ``learned`` above chance, *not
   learned* when it stays below. A configuration *solves* the set when its accuracy reaches the best
   configuration's mean less ``margin``, and *does not solve* it when it stays below.
2. *One step is enough* when a one-step network (one step of the step function, or a plain network)
   solves the set.
3. For a configuration that solves the set, by ``ρ(k, n)``: *follows difficulty* (``ρ ≥ follows``),
   *in between* (``flat ≤ ρ < follows``), *fixed depth* (``|ρ| < flat``, or steps that vary by less
   than ``spread`` over the inputs) and *wrong direction* (``ρ ≤ −flat``: harder inputs get fewer
   steps).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

import pandas as pd

FOLLOWS, FIXED, BETWEEN, UNSOLVED = "follows difficulty", "fixed depth", "in between", "does not solve"
WRONG = "wrong direction"  # ρ clearly below zero: harder inputs get fewer steps
# an interval straddles a threshold, so the data cannot decide; the verdict names the figure
ACCURACY_UNDETERMINED = "accuracy undetermined"  # rule 1: does it solve the set? (or: is the set learned?)
RHO_UNDETERMINED = "ρ undetermined"  # rule 3: which class of ρ(k, n)?
VERDICTS = (FOLLOWS, BETWEEN, FIXED, WRONG, UNSOLVED, ACCURACY_UNDETERMINED, RHO_UNDETERMINED)
ONE_STEP = "one step"  # the family of the one-step networks (rule 2)
KEYS = ["experiment", "variant", "seed"]  # one run


def config_label(config: dict) -> tuple[str, str]:
    """The one name of a run's configuration in every table, figure and sentence of the book, and its
    family (what the rules and the palette call it: ``pondernet``, ``control``, ``act``, ``fixed`` or
    :data:`ONE_STEP`).

    Args:
        config: the configuration the run recorded (``metadata.json``'s ``"config"``).

    Examples: ``PonderNet λ_p=0.5``; ``PonderNet uniform prior`` (λ_p unused); ``control (halting
    frozen at λ_p=0.1)`` (PonderNet whose ``λ_n`` stay at ``λ_p``); ``ACT τ=0.002 (bias +1)``, or
    ``(default bias)`` where none was set (PyTorch's initialisation of the halting unit); ``TRM's head``; ``HRM's head``; ``HRM's head (last epoch)`` (the last epoch's weights kept); ``one step`` (a step function run once);
    ``plain CNN`` (MNIST's one-step baseline); ``fixed 10 steps (run for 20)``.
    """
    method = config["method"]
    if method in ("trm", "hrm"):
        last = " (last epoch)" if config.get("select_by") == "epoch" else ""  # the weights a run kept
        return f"{method.upper()}'s head{last}", method
    if method == "fixed":
        steps = config.get("eval_max_steps") or config["max_steps"]
        if config.get("step") == "mnist_cnn":
            return "plain CNN", ONE_STEP
        if steps == 1:
            return "one step", ONE_STEP
        name = f"fixed {config['max_steps']} step{'s' if config['max_steps'] > 1 else ''}"
        return name + (f" (run for {steps})" if steps != config["max_steps"] else ""), "fixed"
    if method == "act":  # its halting unit's initial bias, PyTorch's default where none was set
        bias = config.get("halting_bias")
        bias = " (default bias)" if bias is None else f" (bias {bias:+g})".replace("-", "−")
        return f"ACT τ={config['tau']:g}{bias}", "act"
    if config.get("learn_halting") is False:
        return f"control (halting frozen at λ_p={config['lambda_p']:g})", "control"
    if config.get("prior") == "uniform":
        return "PonderNet uniform prior", method
    return f"PonderNet λ_p={config['lambda_p']:g}", method


def span(low: float, high: float, digits: int = 2) -> str:
    """An interval as the book prints it: ``0.82–0.90`` (``−0.55 to 0.10`` where an end is negative),
    one number when both ends round alike, a typographic minus."""
    a, b = (f"{x:.{digits}f}".replace("-", "−") for x in (low, high))
    if a == b:
        return a
    return f"{a} to {b}" if min(low, high) < 0 else f"{a}–{b}"


@dataclass(frozen=True)
class Rules:
    """The one rule set of the book's verdicts (see the module's docstring), declared once, here.

    These values were fixed before the results were looked at again, and are not to be tuned to them:
    the pointer margin had been raised from one point to two after its runs were seen; it is one
    point again, and the intervals, not a wider margin, now decide the close cases.

    Attributes:
        margin: accuracy (a fraction) within which of the best configuration a configuration solves a
            set. One point: about a tenth of the gap between chance and perfect on the easiest task
            (MNIST), and finer than any difference the book's prose draws between methods.
        learned: accuracy above chance that the best configuration must reach for a set to count as
            learned. Ten points: a learned task sits far above chance; smaller gains are what a network
            gets from the statistics of the labels without solving the task.
        follows: ``ρ(k, n)`` for halting to follow difficulty. 0.8: the rank of the difficulty then
            fixes most of the rank of the steps (ρ² ≈ 0.64 of the rank variance).
        flat: ``|ρ(k, n)|`` below which the steps do not follow difficulty; ``ρ ≤ −flat`` is the wrong
            direction. 0.3: a weak correlation by the usual convention (Cohen's small-to-medium).
        spread: standard deviation of the steps over the inputs (in steps) below which they are fixed:
            half a step, less than the smallest change of a halting step.
    """

    margin: float = 0.01
    learned: float = 0.10
    follows: float = 0.8
    flat: float = 0.3
    spread: float = 0.5


def side(low: float, high: float, threshold: float) -> int:
    """``1`` when the whole interval reaches ``threshold``, ``-1`` when it all lies below, ``0`` when it
    straddles it."""
    if low >= threshold:
        return 1
    if high < threshold:
        return -1
    return 0


def halting_verdict(rho: tuple, spread_high: float, rules: Rules = Rules()) -> str:
    """Rule 3 on intervals: ``rho = (low, high)`` of ``ρ(k, n)`` over seeds and coin draws.

    A NaN interval (the same steps for every input) or a spread of steps below ``rules.spread`` in
    every seed is a fixed depth. Otherwise the verdict is the class both ends of the interval fall in
    (ρ ≥ follows: follows; flat ≤ ρ < follows: in between; |ρ| < flat: fixed depth; ρ ≤ −flat: wrong
    direction), and *ρ undetermined* when they fall in different classes.
    """
    low, high = rho
    if math.isnan(low) or math.isnan(high) or spread_high < rules.spread:
        return FIXED

    def cls(rho: float) -> str:
        if rho >= rules.follows:
            return FOLLOWS
        if rho >= rules.flat:
            return BETWEEN
        if rho > -rules.flat:
            return FIXED
        return WRONG

    return cls(low) if cls(low) == cls(high) else RHO_UNDETERMINED


def seeds_on(halting: pd.DataFrame, runs: pd.DataFrame, set_name: str = "test") -> pd.DataFrame:
    """One row per run (seed) on one test set, as :func:`judge` reads it.

    A seed's ``accuracy`` and ``rho`` are its means over the halting coins' draws (``accuracy_draws``,
    ``rho_draws``), the draws its interval ``accuracy_low``–``accuracy_high`` is made of, not the one
    draw of its evaluation.

    Args:
        halting: halting tables of one or more studies (a run in two studies counts once).
        runs: the runs to judge, with their ``config`` name and ``family`` (:func:`config_label`);
            a halting row of any other run is left out.
        set_name: the test set.
    """
    rows = halting[halting["set"] == set_name].drop_duplicates(KEYS)
    rows = rows.assign(accuracy=rows["accuracy_draws"], rho=rows["rho_draws"])
    return rows.merge(runs[[*KEYS, "config", "family"]].drop_duplicates(KEYS), on=KEYS)


def per_difficulty(
    summary: pd.DataFrame,
    by: Iterable[str] = ("experiment", "variant"),
    difficulty: str = "k",
    metrics: Iterable[str] = ("accuracy", "halt_step", "expected_steps"),
) -> pd.DataFrame:
    """Each metric per group and difficulty: mean, lowest and highest over the seeds.

    Args:
        summary: per-run summaries, one row per seed, group and difficulty (a study's ``summary``).

    Returns:
        one row per group and difficulty, columns ``<metric>_mean``, ``<metric>_min``, ``<metric>_max``
        and ``seeds``.
    """
    keys = [*by, difficulty]
    metrics = list(metrics)
    stats = summary.groupby(keys, sort=False)[metrics].agg(["mean", "min", "max"])
    stats.columns = [f"{metric}_{stat}" for metric, stat in stats.columns]
    seeds = summary.groupby(keys, sort=False)["seed"].nunique().rename("seeds")
    return stats.join(seeds).reset_index()


def _decide(low: float, high: float, threshold: float) -> bool | None:
    return {1: True, -1: False, 0: None}[side(low, high, threshold)]


def judge(runs: pd.DataFrame, chance: float, rules: Rules = Rules()) -> tuple[pd.DataFrame, dict]:
    """The verdicts of the configurations on one test set, and of the set itself, on intervals.

    Args:
        runs: one row per run (seed) on the set: ``config``, ``family`` (:data:`ONE_STEP` for the
            one-step networks), ``seed``, ``accuracy``, ``rho``, ``spread`` and ``steps``; optional
            ``accuracy_low``/``accuracy_high`` and ``rho_low``/``rho_high``, the seed's coin interval
            (the run's halting table; the point value where absent: halting that is not random).
        chance: the accuracy of a guess.

    Returns:
        ``(configs, setting)``: one row per configuration (index ``config``) with ``family``, ``seeds``,
        ``accuracy`` (mean over seeds), ``accuracy_low``, ``accuracy_high`` (over seeds and coin
        draws), ``rho`` (mean), ``rho_low``, ``rho_high``, ``spread_max``, ``steps`` (mean), ``solves``
        (True, False, or None: undetermined) and ``verdict``; and a dictionary with ``best`` (the
        configuration of the highest mean accuracy), ``best_accuracy``, ``learned`` (rule 1: True,
        False or None), ``one_step``, ``one_step_accuracy`` and ``one_step_enough`` (rule 2, idem).
    """
    if runs.empty:
        raise ValueError("no runs to judge.")
    runs = runs.copy()
    for name in ("accuracy", "rho"):
        for end in ("low", "high"):
            column = f"{name}_{end}"
            runs[column] = runs[column].fillna(runs[name]) if column in runs else runs[name]
    # a seed whose steps never change has no ρ (NaN). Beside seeds that have one, it stands as 0 in the
    # interval, a fixed depth, so that it is not left out (a seed at 0.9 beside it is then undetermined,
    # not "follows difficulty"); a configuration of such seeds only keeps no ρ
    has_rho = runs.groupby("config", sort=False)["rho_low"].transform(lambda rho: rho.notna().any())
    for column in ("rho_low", "rho_high"):
        runs[column] = runs[column].mask(has_rho & runs[column].isna(), 0.0)
    groups = runs.groupby("config", sort=False)
    configs = pd.DataFrame(
        {
            "family": groups["family"].first(),
            "seeds": groups["seed"].nunique(),
            "accuracy": groups["accuracy"].mean(),
            "accuracy_low": groups["accuracy_low"].min(),
            "accuracy_high": groups["accuracy_high"].max(),
            "rho": groups["rho"].mean(),
            "rho_low": groups["rho_low"].min(),
            "rho_high": groups["rho_high"].max(),
            "spread_max": groups["spread"].max(),
            "steps": groups["steps"].mean(),
        }
    )
    best = configs["accuracy"].idxmax()
    best_accuracy = float(configs.loc[best, "accuracy"])
    learned = _decide(
        configs.loc[best, "accuracy_low"], configs.loc[best, "accuracy_high"], chance + rules.learned
    )
    configs["solves"] = [
        (
            False
            if learned is False
            else _decide(row.accuracy_low, row.accuracy_high, best_accuracy - rules.margin)
            if learned
            else None
        )
        for row in configs.itertuples()
    ]
    configs["solves"] = configs["solves"].astype(object)
    configs["verdict"] = [
        (
            UNSOLVED
            if row.solves is False
            else ACCURACY_UNDETERMINED
            if row.solves is None
            else halting_verdict((row.rho_low, row.rho_high), row.spread_max, rules)
        )
        for row in configs.itertuples()
    ]
    one_step = configs[configs["family"] == ONE_STEP]
    setting = {"best": best, "best_accuracy": best_accuracy, "learned": learned}
    if len(one_step):
        name = one_step["accuracy"].idxmax()
        setting.update(
            one_step=name,
            one_step_accuracy=float(one_step.loc[name, "accuracy"]),
            one_step_enough=configs.loc[name, "solves"],
        )
    else:
        setting.update(one_step=None, one_step_accuracy=float("nan"), one_step_enough=None)
    return configs, setting


def describe_verdicts(verdicts: Iterable[str]) -> str:
    """The verdicts of several configurations, counted in the order of :data:`VERDICTS`:
    ``"follows difficulty (2 of 3), in between (1 of 3)"``; ``"—"`` for none."""
    verdicts = list(verdicts)
    if not verdicts:
        return "—"
    counts = [(name, verdicts.count(name)) for name in VERDICTS if name in verdicts]
    unknown = set(verdicts) - set(VERDICTS)
    if unknown:
        raise ValueError(f"unknown verdicts {sorted(unknown)}; expected some of {VERDICTS}.")
    return ", ".join(f"{name} ({n} of {len(verdicts)})" for name, n in counts)
