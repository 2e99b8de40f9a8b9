"""Halting against difficulty: do a network's steps follow how hard each input is, and does it need
more than one step at all?

The tasks of the book with a difficulty per sample (parity's and pointer chasing's ``k``) record it in
their per-sample tables beside the halting step. This module turns those tables into the numbers and
the verdicts that the notebooks state:

* :func:`halting_by_run`: per run and test set, Spearman's rank correlation ``ρ(k, n)`` between each
  sample's difficulty and its halting step, and the spread of the steps over the inputs;
* :func:`per_difficulty`: a metric per difficulty (accuracy, steps), mean, lowest and highest over
  seeds;
* :func:`judge`: the verdicts of the stated :class:`Rules`, per configuration of one test set: does it
  solve the set, and if so, do its steps follow the difficulty or keep a fixed depth; and, for the
  set, whether one step is already enough.

The rules, in words (the thresholds are :class:`Rules`' fields):

1. *No method learns a set* when the best configuration's accuracy (mean over seeds) is less than
   ``learned`` above chance. Otherwise a configuration *solves* it when its accuracy is within
   ``margin`` of the best configuration's.
2. *One step is enough* when a one-step network (one step of the step function, or a plain network)
   solves the set.
3. A configuration that solves the set *follows difficulty* when ``ρ ≥ follows`` in every seed; it
   keeps *a fixed depth* when, in every seed, ``|ρ| < flat`` or the steps vary by less than ``spread``
   (standard deviation over the inputs); otherwise it is *in between*.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

import pandas as pd

from ..runs.evaluation import _spearman as spearman

RUN_KEYS = ("experiment", "variant", "seed")
FOLLOWS, FIXED, BETWEEN, UNSOLVED = "follows difficulty", "fixed depth", "in between", "does not solve"
VERDICTS = (FOLLOWS, FIXED, BETWEEN, UNSOLVED)
ONE_STEP = "one step"  # the family of the one-step networks (rule 2)


@dataclass(frozen=True)
class Rules:
    """The thresholds of the verdicts (see the module's docstring).

    Attributes:
        margin: accuracy (a fraction) within which of the best configuration a configuration solves a set.
        learned: accuracy above chance that the best configuration must reach for a set to count as learned.
        follows: ``ρ(k, n)`` that every seed must reach for halting to follow difficulty.
        flat: ``|ρ(k, n)|`` below which the steps do not follow difficulty.
        spread: standard deviation of the steps over the inputs (in steps) below which they are fixed.
    """

    margin: float = 0.02  # about the spread between the seeds of one configuration (MNIST at ±45°)
    learned: float = 0.10
    follows: float = 0.8
    flat: float = 0.3
    spread: float = 0.5


def halting_by_run(
    per_sample: pd.DataFrame,
    difficulty: str = "k",
    steps: str = "halt_step",
    by: Iterable[str] = (*RUN_KEYS, "set"),
) -> pd.DataFrame:
    """Per run and test set: how the steps follow the difficulty.

    Args:
        per_sample: per-sample tables (``label``, ``prediction``, ``steps``, ``difficulty``) with the
            ``by`` columns (:func:`~pondernet_tutorial.analysis.notebook.load_table` adds the run's).

    Returns:
        one row per group: ``rho`` (Spearman's ``ρ`` of the difficulty and the steps; NaN where either is
        the same for every sample), ``spread`` (the standard deviation of the steps over the samples),
        ``steps`` (their mean), ``accuracy`` and ``n``.
    """
    by = list(by)
    rows = []
    for key, group in per_sample.groupby(by, sort=False, dropna=False):
        row = dict(zip(by, key if isinstance(key, tuple) else (key,)))
        row.update(
            rho=spearman(group[difficulty], group[steps]),
            spread=group[steps].std(ddof=0),
            steps=group[steps].mean(),
            accuracy=(group["prediction"] == group["label"]).mean(),
            n=len(group),
        )
        rows.append(row)
    return pd.DataFrame(rows)


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


def verdict(solves: bool, rhos: Iterable[float], spreads: Iterable[float], rules: Rules = Rules()) -> str:
    """Rule 3 for one configuration: its seeds' ``ρ(k, n)`` and spreads of steps.

    A NaN ``ρ`` (steps that are the same for every input) never counts as following difficulty; such a
    seed has no spread, so it keeps a fixed depth.
    """
    if not solves:
        return UNSOLVED
    pairs = list(zip(rhos, spreads, strict=True))
    if not pairs:
        raise ValueError("a verdict needs at least one seed.")
    if all(not math.isnan(rho) and rho >= rules.follows for rho, _ in pairs):
        return FOLLOWS
    if all((not math.isnan(rho) and abs(rho) < rules.flat) or spread < rules.spread for rho, spread in pairs):
        return FIXED
    return BETWEEN


def judge(runs: pd.DataFrame, chance: float, rules: Rules = Rules()) -> tuple[pd.DataFrame, dict]:
    """The verdicts of the configurations on one test set, and of the set itself.

    Args:
        runs: one row per run (seed) on the set: ``config``, ``family`` (:data:`ONE_STEP` for the
            one-step networks), ``seed``, ``accuracy``, ``rho``, ``spread`` and ``steps``.
        chance: the accuracy of a guess.

    Returns:
        ``(configs, setting)``: one row per configuration (index ``config``) with ``family``, ``seeds``,
        ``accuracy`` (mean over seeds), ``accuracy_min``, ``rho_min``, ``rho_max``, ``spread_max``,
        ``steps`` (mean), ``solves`` and ``verdict``; and a dictionary with ``best`` (the configuration
        of the highest accuracy), ``best_accuracy``, ``learned`` (rule 1), ``one_step`` (the best
        one-step configuration, or None), ``one_step_accuracy`` and ``one_step_enough`` (rule 2).
    """
    if runs.empty:
        raise ValueError("no runs to judge.")
    groups = runs.groupby("config", sort=False)
    configs = pd.DataFrame(
        {
            "family": groups["family"].first(),
            "seeds": groups["seed"].nunique(),
            "accuracy": groups["accuracy"].mean(),
            "accuracy_min": groups["accuracy"].min(),
            "rho_min": groups["rho"].min(),
            "rho_max": groups["rho"].max(),
            "spread_max": groups["spread"].max(),
            "steps": groups["steps"].mean(),
        }
    )
    best = configs["accuracy"].idxmax()
    best_accuracy = float(configs.loc[best, "accuracy"])
    learned = best_accuracy >= chance + rules.learned
    configs["solves"] = learned & (configs["accuracy"] >= best_accuracy - rules.margin)
    configs["verdict"] = [
        verdict(bool(configs.loc[name, "solves"]), group["rho"], group["spread"], rules)
        for name, group in groups
    ]
    one_step = configs[configs["family"] == ONE_STEP]
    setting = {"best": best, "best_accuracy": best_accuracy, "learned": bool(learned)}
    if len(one_step):
        name = one_step["accuracy"].idxmax()
        setting.update(
            one_step=name,
            one_step_accuracy=float(one_step.loc[name, "accuracy"]),
            one_step_enough=bool(one_step.loc[name, "solves"]),
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
