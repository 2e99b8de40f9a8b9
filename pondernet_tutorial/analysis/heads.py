"""The rules of the halting-heads study (issue 42), fixed in code before any of its runs: what the
chapter "Halting heads compared" (``book/13_halting_heads.ipynb``) says about each head besides the
book's verdicts.

Every head is first judged by the book's rules, unchanged (:class:`~.verdicts.Rules` and
:func:`~.verdicts.judge`): whether the set is learned, whether a head solves it, and whether its steps
follow the difficulty. PonderNet and ACT are judged that way in chapters 10 and 11. This module adds
only what the issue names, each a pure function of the tables of one test set:

* :func:`collapse`: a seed *collapsed* when its mean halting step on the test set is at most
  :attr:`HeadRules.collapsed`; a configuration's *collapse rate* is its collapsed seeds over its
  seeds, and each seed's verdict is kept beside it.
* :func:`decisions_right` and :func:`decision_range`: for the heads whose halting logit is trained
  towards "the answer of this step is right" (TRM's and HRM's), the share of the pairs (sample, step
  ``n ≤ T(x)``) where ``[q_n > 0] == [argmax ŷ_n = y]``, and its range over seeds. A description, not a
  verdict: no threshold.
* :func:`halting_against_limit`: the accuracy of the early exit (``infer``: each sample stops at its
  own halting step) against the accuracy of the answer at ``eval_max_steps``, the reading that HRM's and
  TRM's released code evaluate. Each with its 95% Wilson interval per seed
  (:func:`~.paper_claims.wilson`); *halting costs accuracy* only where the two intervals do not
  overlap (:func:`~.verdicts.side`), *halting gains accuracy* where they do not overlap the other way.

The columns these functions read, and where the study's evaluation finds them:

* ``steps`` (a run's mean halting step on a test set), ``accuracy`` (the early exit's) and ``n`` (the
  set's samples): ``halting.csv``, one row per run and set (:func:`~..runs.evaluation.halting_by_run`),
  as :func:`~.verdicts.judge` reads it.
* ``limit_accuracy``: ``per_step.csv`` holds the accuracy of every step's answer ``ŷ_n`` up to
  ``eval_max_steps`` for the methods whose answer is one step's (not ACT's, whose answer mixes the
  steps: its per-step table is empty); :func:`at_limit` reads the last step's.
* ``halt_logit`` and ``correct`` per (sample, step): no table holds them yet. The study's evaluation
  must write them: ``set``, ``index`` (the sample), ``step``, ``halt_logit`` (``q_n``; HRM's halt logit
  ``q^halt_n``), ``correct`` (``1[argmax ŷ_n = y]``) and the sample's ``halt_step`` (``per_sample.csv``'s,
  merged on ``set`` and ``index``).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

import pandas as pd

from .paper_claims import wilson
from .verdicts import ONE_STEP, side

# families whose steps are set by construction, not learned: collapse says nothing about them
BUILT_STEPS = ("fixed", "control", ONE_STEP)
COSTS, GAINS, OVERLAP = "halting costs accuracy", "halting gains accuracy", "intervals overlap"
NO_LIMIT = "no answer at the limit"  # ACT: no step's answer is recorded alone


@dataclass(frozen=True)
class HeadRules:
    """The one threshold that the halting-heads study adds to :class:`~.verdicts.Rules`, declared once,
    here, before its runs.

    Attributes:
        collapsed: mean halting steps on a test set at or below which a seed's halting has collapsed.
            Two steps: the issue's number, and where ACT starts at halting bias 0 or +1 (with ε = 0.01
            the first step's η ≥ 1/2, so ``T(x) = 2``). Sapunov (2026, arXiv 2604.21999, abstract)
            reports that tokens "halt after ∼2 steps at initialization" at those biases and that most
            runs never escape a shallow halt.
    """

    collapsed: float = 2.0


def _require(frame: pd.DataFrame, columns: Iterable[str], what: str) -> None:
    missing = [c for c in columns if c not in frame]
    if missing:
        raise ValueError(f"{what} needs the columns {', '.join(missing)}; pass a table that has them.")


def collapse(runs: pd.DataFrame, rules: HeadRules = HeadRules()) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Which seeds collapsed on one test set, and each configuration's collapse rate.

    Args:
        runs: one row per run (seed) on the set: ``config``, ``family`` (:func:`~.verdicts.config_label`'s),
            ``seed`` and ``steps``, the mean halting step over the set's samples.

    Returns:
        ``(seeds, configs)``: ``runs`` with ``collapsed`` (``steps ≤ rules.collapsed``; None for the
        families in :data:`BUILT_STEPS`, whose steps are set by construction); and one row per
        configuration (index ``config``) with ``seeds``, ``collapsed`` (how many) and ``rate``
        (collapsed seeds over seeds; NaN where not judged).
    """
    _require(runs, ("config", "family", "seed", "steps"), "collapse")
    seeds = runs.copy()
    seeds["collapsed"] = [
        None if family in BUILT_STEPS else bool(steps <= rules.collapsed)
        for family, steps in zip(seeds["family"], seeds["steps"])
    ]
    seeds["collapsed"] = seeds["collapsed"].astype(object)
    groups = seeds.groupby("config", sort=False)
    judged = groups["collapsed"].agg(lambda c: c.notna().all())
    count = groups["collapsed"].agg(lambda c: int((c == True).sum()))  # noqa: E712 (None is not False)
    configs = pd.DataFrame({"seeds": groups["seed"].nunique(), "collapsed": count})
    configs["rate"] = (configs["collapsed"] / configs["seeds"]).where(judged, math.nan)
    return seeds, configs


def decisions_right(pairs: pd.DataFrame, by: Iterable[str] = ("config", "seed")) -> pd.DataFrame:
    """How often the halting logit says what the step's answer is: per group (a run), the share of
    the pairs (sample, step ``n ≤ T(x)``) where ``[q_n > 0] == [argmax ŷ_n = y]``.

    ``q_n > 0`` is the head's own halting test (σ(q_n) > 1/2). TRM's and HRM's code score the same
    agreement (``q_halt_accuracy``, with ``q ≥ 0``) at the step where a sample halted only; here every
    step up to it counts, the steps the head chose to go on included. HRM halts on ``q^halt > q^cont``;
    its halt logit alone is what is trained towards ``c_n`` and what is scored.

    Args:
        pairs: one row per sample and step: ``step``, ``halt_logit``, ``correct`` (0/1 or bool),
            ``halt_step`` (the sample's ``T(x)``) and the ``by`` columns.

    Returns:
        one row per group: the ``by`` columns, ``right`` (the share) and ``pairs`` (how many counted).
    """
    by = list(by)
    _require(pairs, (*by, "step", "halt_logit", "correct", "halt_step"), "decisions_right")
    counted = pairs[pairs["step"] <= pairs["halt_step"]]
    agree = (counted["halt_logit"] > 0) == counted["correct"].astype(bool)
    frame = counted[by].assign(right=agree.astype(float))
    table = frame.groupby(by, sort=False)["right"].agg(right="mean", pairs="size")
    return table.reset_index()


def decision_range(per_seed: pd.DataFrame) -> pd.DataFrame:
    """The range of :func:`decisions_right` over seeds: one row per configuration (index ``config``)
    with ``right_low``, ``right_high`` and ``seeds``."""
    _require(per_seed, ("config", "seed", "right"), "decision_range")
    groups = per_seed.groupby("config", sort=False)
    return pd.DataFrame(
        {
            "right_low": groups["right"].min(),
            "right_high": groups["right"].max(),
            "seeds": groups["seed"].nunique(),
        }
    )


def at_limit(per_step: pd.DataFrame, steps: int) -> pd.Series:
    """Each set's accuracy of the answer at step ``steps`` (``eval_max_steps``), from a run's
    ``per_step.csv``; an empty table (ACT's) gives no set. Raises a ``ValueError`` when a set's table
    stops before that step."""
    _require(per_step, ("set", "step", "accuracy"), "at_limit")
    last = per_step.groupby("set", sort=False)["step"].max()
    short = last[last < steps]
    if len(short):
        raise ValueError(
            f"per_step holds steps up to {int(short.min())} on {', '.join(map(str, short.index))}, not "
            f"{steps}: evaluate the run with eval_max_steps={steps}."
        )
    rows = per_step[per_step["step"] == steps]
    return rows.set_index("set")["accuracy"].astype(float)


def halting_against_limit(runs: pd.DataFrame) -> pd.DataFrame:
    """The early exit's accuracy against the answer at the step limit, per run on one test set.

    Both are shares of the same ``n`` samples, each with its 95% Wilson interval. The verdict is
    :data:`COSTS` when the early exit's interval lies wholly below the limit's, :data:`GAINS` when it
    lies wholly above, :data:`OVERLAP` otherwise, and :data:`NO_LIMIT` without an answer at the limit.
    Both readings score the same samples, so their intervals are not independent: asking that they do
    not overlap is the cautious reading, which a paired test would sharpen.

    Args:
        runs: one row per run: ``accuracy`` (the early exit), ``limit_accuracy`` (NaN where none is
            recorded) and ``n``.

    Returns:
        ``runs`` with ``accuracy_low``, ``accuracy_high``, ``limit_low``, ``limit_high`` and
        ``halting`` (the verdict).
    """
    _require(runs, ("accuracy", "limit_accuracy", "n"), "halting_against_limit")
    table = runs.copy()
    early = [wilson(a, n) for a, n in zip(table["accuracy"], table["n"])]
    limit = [wilson(a, n) for a, n in zip(table["limit_accuracy"], table["n"])]
    table["accuracy_low"], table["accuracy_high"] = [e[0] for e in early], [e[1] for e in early]
    table["limit_low"], table["limit_high"] = [e[0] for e in limit], [e[1] for e in limit]

    def verdict(e, m) -> str:
        if math.isnan(m[0]):
            return NO_LIMIT
        if side(*e, m[0]) == -1:  # the whole early-exit interval below the limit's
            return COSTS
        if side(*m, e[0]) == -1:  # the whole limit interval below the early exit's
            return GAINS
        return OVERLAP

    table["halting"] = [verdict(e, m) for e, m in zip(early, limit)]
    return table
