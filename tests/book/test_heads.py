"""The halting-heads study's rules (analysis/heads.py), on hand-made tables whose answers are worked out
in the comments: a rule that drifts from its docstring fails here.

Deliberate breaks these tests catch (each was tried, and failed a test):
- ``collapse``: ``<`` for ``≤``, judging the fixed depth and the control, the rate over every run
  instead of the configuration's seeds;
- ``decisions_right``: counting the steps after ``T(x)``, ``q ≥ 0`` for ``q > 0``; ``decision_range``:
  the mean for the lowest seed;
- ``at_limit``: reading step 1 instead of ``eval_max_steps``, no error for a table that stops short;
- ``halting_against_limit``: comparing with the far end of the other interval (either side), or with the
  limit's accuracy without its interval.
"""

import math

import pandas as pd
import pytest

from pondernet_tutorial.analysis import heads
from pondernet_tutorial.analysis.paper_claims import wilson
from pondernet_tutorial.analysis.verdicts import ONE_STEP


def test_a_seed_collapses_at_two_steps_or_fewer_and_the_rate_counts_seeds():
    runs = pd.DataFrame(
        {
            "config": ["TRM's head"] * 3 + ["control"] * 2 + ["one step"],
            "family": ["trm"] * 3 + ["control"] * 2 + [ONE_STEP],
            "seed": [0, 1, 2, 0, 1, 0],
            "steps": [1.5, 2.0, 2.01, 2.0, 1.9, 1.0],
        }
    )
    seeds, configs = heads.collapse(runs)
    assert heads.HeadRules().collapsed == 2.0  # the number
    assert list(seeds["collapsed"][:3]) == [True, True, False]  # 2.0 is collapsed, 2.01 is not
    assert configs.loc["TRM's head", "collapsed"] == 2
    assert configs.loc["TRM's head", "rate"] == pytest.approx(2 / 3)
    # steps set by construction are not judged, however few
    assert seeds["collapsed"][3:].isna().all()
    assert math.isnan(configs.loc["control", "rate"]) and math.isnan(configs.loc["one step", "rate"])
    _, stricter = heads.collapse(runs, heads.HeadRules(collapsed=1.5))
    assert stricter.loc["TRM's head", "collapsed"] == 1


def test_collapse_names_the_columns_it_lacks():
    with pytest.raises(ValueError, match="needs the columns steps"):
        heads.collapse(pd.DataFrame({"config": ["a"], "family": ["trm"], "seed": [0]}))


def pairs_frame():
    """Two samples of one run. Sample 0 halts at step 2: step 1 (q −1, wrong) agrees, step 2 (q 0.5,
    right) agrees, step 3 (q −2, right) comes after it and does not count. Sample 1 halts at step 3:
    step 1 (q 0, wrong) agrees (0 is not > 0), step 2 (q 1, wrong) disagrees, step 3 (q −1, right)
    disagrees. Counted: 5 pairs, 3 agree."""
    return pd.DataFrame(
        {
            "config": "TRM's head",
            "seed": 0,
            "index": [0, 0, 0, 1, 1, 1],
            "step": [1, 2, 3, 1, 2, 3],
            "halt_logit": [-1.0, 0.5, -2.0, 0.0, 1.0, -1.0],
            "correct": [0, 1, 1, 0, 0, 1],
            "halt_step": [2, 2, 2, 3, 3, 3],
        }
    )


def test_the_halting_decision_is_right_where_the_logit_says_what_the_answer_is():
    (row,) = heads.decisions_right(pairs_frame()).itertuples()
    assert row.pairs == 5 and row.right == pytest.approx(3 / 5)


def test_the_range_of_right_decisions_runs_over_seeds():
    second = pairs_frame().assign(seed=1, correct=[0, 1, 1, 0, 1, 1])  # step 2 of sample 1 now agrees
    per_seed = heads.decisions_right(pd.concat([pairs_frame(), second]))
    assert list(per_seed["right"]) == pytest.approx([3 / 5, 4 / 5])
    spread = heads.decision_range(per_seed).loc["TRM's head"]
    assert (spread["right_low"], spread["right_high"], spread["seeds"]) == pytest.approx((0.6, 0.8, 2))


def test_the_answer_at_the_limit_is_the_last_steps():
    per_step = pd.DataFrame(
        {
            "set": ["test"] * 3 + ["beyond"] * 3,
            "step": [1, 2, 3] * 2,
            "accuracy": [0.5, 0.7, 0.9, 0.2, 0.3, 0.4],
        }
    )
    assert heads.at_limit(per_step, 3).to_dict() == pytest.approx({"test": 0.9, "beyond": 0.4})
    with pytest.raises(ValueError, match="eval_max_steps=4"):
        heads.at_limit(per_step, 4)
    assert heads.at_limit(pd.DataFrame(columns=["set", "step", "accuracy"]), 20).empty  # ACT's


@pytest.mark.parametrize(
    "early, limit, verdict",
    [
        # n = 1,000: 0.90 has the interval 0.880–0.917, 0.95 has 0.935–0.962: apart
        (0.90, 0.95, heads.COSTS),
        (0.95, 0.90, heads.GAINS),
        # 0.93 has 0.912–0.944: it overlaps 0.95's, though 0.95 lies above its upper end
        (0.93, 0.95, heads.OVERLAP),
        (0.95, 0.93, heads.OVERLAP),
        (0.95, math.nan, heads.NO_LIMIT),
    ],
)
def test_halting_costs_accuracy_only_where_the_intervals_do_not_overlap(early, limit, verdict):
    runs = pd.DataFrame({"accuracy": [early], "limit_accuracy": [limit], "n": [1000]})
    row = heads.halting_against_limit(runs).iloc[0]
    assert row["halting"] == verdict
    assert (row["accuracy_low"], row["accuracy_high"]) == pytest.approx(wilson(early, 1000))
