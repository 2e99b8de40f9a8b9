"""The book's rules on halting against difficulty (analysis/verdicts.py): metrics per difficulty, the
verdicts' rules.

Deliberate breaks these tests catch (each was tried):
- ``per_difficulty`` averaging over the difficulty instead of the seeds: test_per_difficulty_by_hand;
- ``halting_verdict`` classifying by the interval's upper end alone, or taking a NaN ``ρ`` for a
  follower: test_halting_verdict_rules;
- ``judge`` measuring the margin from chance instead of from the best configuration, or ignoring
  ``learned``: test_judge_solves_within_the_margin_of_the_best and test_judge_a_set_nobody_learns;
- ``halting_verdict`` classifying the interval's middle instead of both its ends (92 failures), or
  ``judge`` deciding "solves" on the mean accuracy instead of its interval (30 failures):
  test_a_figure_moved_within_its_interval_cannot_flip_a_verdict and
  test_judge_solves_within_the_margin_of_the_best;
- ``seeds_on`` keeping the evaluation's one draw instead of the mean over the coin draws, reading
  every test set, counting a run of two studies twice, or keeping a run it was not given:
  test_seeds_on_reads_each_run_once_over_its_draws.
"""

import numpy as np
import pandas as pd
import pytest

from pondernet_tutorial.analysis.verdicts import (
    ACCURACY_UNDETERMINED,
    BETWEEN,
    FIXED,
    FOLLOWS,
    ONE_STEP,
    RHO_UNDETERMINED,
    UNSOLVED,
    WRONG,
    Rules,
    describe_verdicts,
    halting_verdict,
    judge,
    per_difficulty,
    seeds_on,
    side,
)


def test_per_difficulty_by_hand():
    summary = pd.DataFrame(
        {
            "experiment": "e",
            "variant": "v",
            "seed": [0, 0, 1, 1, 2, 2],
            "k": [1, 2, 1, 2, 1, 2],
            "accuracy": [1.0, 0.5, 0.8, 0.7, 0.9, 0.6],
            "halt_step": [1.0, 2.0, 2.0, 4.0, 3.0, 6.0],
        }
    )
    table = per_difficulty(summary, metrics=("accuracy", "halt_step")).set_index("k")
    assert table.loc[1, "accuracy_mean"] == pytest.approx(0.9)
    assert table.loc[2, "accuracy_min"] == 0.5 and table.loc[2, "accuracy_max"] == 0.7
    assert table.loc[2, "halt_step_mean"] == pytest.approx(4.0) and table.loc[1, "seeds"] == 3


def test_halting_verdict_rules():
    """Rule 3 on an interval of ρ(k, n): the class both ends fall in, undetermined across a threshold,
    fixed depth where the steps do not vary (no ρ, or a spread under the rule's)."""
    rules = Rules(follows=0.8, flat=0.3, spread=0.5)
    assert halting_verdict((0.85, 0.95), 2.0, rules) == FOLLOWS
    assert halting_verdict((0.79, 0.95), 2.0, rules) == RHO_UNDETERMINED  # straddles 0.8
    assert halting_verdict((0.5, 0.7), 2.0, rules) == BETWEEN
    assert halting_verdict((-0.2, 0.25), 2.0, rules) == FIXED  # steps vary, not with k
    assert halting_verdict((-0.59, -0.37), 2.0, rules) == WRONG  # harder inputs, fewer steps
    assert halting_verdict((-0.4, -0.2), 2.0, rules) == RHO_UNDETERMINED  # straddles −0.3
    assert halting_verdict((float("nan"), float("nan")), 2.0, rules) == FIXED  # the same steps for all
    assert halting_verdict((0.9, 0.9), 0.3, rules) == FIXED  # steps nearly constant
    assert side(0.81, 0.9, 0.8) == 1 and side(0.7, 0.79, 0.8) == -1 and side(0.79, 0.81, 0.8) == 0


@pytest.mark.parametrize("seed", range(60))
def test_a_figure_moved_within_its_interval_cannot_flip_a_verdict(seed):
    """A decided verdict is the verdict of every point of its interval; a straddling one is undetermined."""
    rng = np.random.default_rng(seed)
    rules = Rules()
    low = float(rng.uniform(-1, 1))
    high = min(1.0, low + float(rng.uniform(0, 0.6)))
    decided = halting_verdict((low, high), 2.0, rules)
    points = {halting_verdict((x, x), 2.0, rules) for x in rng.uniform(low, high, 50)} | {
        halting_verdict((low, low), 2.0, rules),
        halting_verdict((high, high), 2.0, rules),
    }
    if decided == RHO_UNDETERMINED:
        assert len(points) > 1  # undetermined only where the interval straddles a threshold
    else:
        assert points == {decided}
    # the same for accuracy against the margin: judge on an interval, then on points inside it
    acc_low = float(rng.uniform(0.9, 1.0))
    acc_high = min(1.0, acc_low + float(rng.uniform(0, 0.03)))
    table = pd.DataFrame(
        {
            "config": ["best", "best", "other"],
            "family": "m",
            "seed": [0, 1, 0],
            "accuracy": [1.0, 1.0, (acc_low + acc_high) / 2],
            "accuracy_low": [1.0, 1.0, acc_low],
            "accuracy_high": [1.0, 1.0, acc_high],
            "rho": 0.9,
            "spread": 2.0,
            "steps": 3.0,
        }
    )
    solves = judge(table, chance=0.1, rules=rules)[0].loc["other", "solves"]
    moved = set()
    for x in (acc_low, acc_high, *rng.uniform(acc_low, acc_high, 20)):
        point = table.assign(accuracy_low=table["accuracy"], accuracy_high=table["accuracy"])
        point.loc[2, ["accuracy", "accuracy_low", "accuracy_high"]] = x
        moved.add(bool(judge(point, chance=0.1, rules=rules)[0].loc["other", "solves"]))
    if solves is None:
        assert moved == {True, False}
    else:
        assert moved == {solves}


def runs(rows):
    return pd.DataFrame(rows, columns=["config", "family", "seed", "accuracy", "rho", "spread", "steps"])


def test_judge_solves_within_the_margin_of_the_best():
    table = runs(
        [
            ("ponder", "pondernet", 0, 1.00, 0.90, 2.0, 4.0),
            ("ponder", "pondernet", 1, 0.99, 0.85, 2.0, 4.2),
            ("act", "act", 0, 0.99, 0.10, 1.0, 3.0),
            ("act", "act", 1, 0.985, 0.20, 1.0, 3.0),
            ("one", ONE_STEP, 0, 0.60, float("nan"), 0.0, 1.0),
            ("one", ONE_STEP, 1, 0.62, float("nan"), 0.0, 1.0),
        ]
    )
    configs, setting = judge(table, chance=0.5, rules=Rules(margin=0.01))
    assert setting["best"] == "ponder" and setting["best_accuracy"] == pytest.approx(0.995)
    assert setting["learned"] and setting["one_step"] == "one"
    assert setting["one_step_accuracy"] == pytest.approx(0.61) and setting["one_step_enough"] is False
    assert configs.loc["ponder", "verdict"] == FOLLOWS and configs.loc["ponder", "rho_low"] == 0.85
    assert configs.loc["act", "solves"]  # both seeds (0.99, 0.985) within 0.01 of 0.995
    assert configs.loc["act", "verdict"] == FIXED and configs.loc["one", "verdict"] == UNSOLVED
    configs, _ = judge(table, chance=0.5, rules=Rules(margin=0.005))
    assert configs.loc["act", "solves"] is None  # one seed above 0.99, one below
    assert configs.loc["act", "verdict"] == ACCURACY_UNDETERMINED
    coins = table.assign(rho_low=table["rho"] - 0.1, rho_high=table["rho"])  # a coin interval per seed
    configs, _ = judge(coins, chance=0.5, rules=Rules(margin=0.01))
    assert configs.loc["ponder", "verdict"] == RHO_UNDETERMINED  # 0.75 to 0.90 straddles 0.8
    configs, setting = judge(table.assign(accuracy=table["accuracy"] - 0.4), chance=0.5)
    assert setting["learned"] is None  # the best's seeds, 0.60 and 0.59, straddle chance + 0.10
    assert configs["verdict"].eq(ACCURACY_UNDETERMINED).all()
    configs, setting = judge(table.assign(accuracy=table["accuracy"] - 0.45), chance=0.5)
    assert setting["learned"] is False and configs["verdict"].eq(UNSOLVED).all()
    table.loc[table["config"] == "one", "accuracy"] = 0.99
    _, setting = judge(table, chance=0.5)
    assert setting["one_step_enough"] is True


def test_judge_a_set_nobody_learns():
    table = runs(
        [
            ("ponder", "pondernet", 0, 0.52, 0.9, 2.0, 5.0),
            ("one", ONE_STEP, 0, 0.51, float("nan"), 0.0, 1.0),
        ]
    )
    configs, setting = judge(table, chance=0.5, rules=Rules(learned=0.1))
    assert not setting["learned"] and not configs["solves"].any()
    assert setting["one_step_enough"] is False and set(configs["verdict"]) == {UNSOLVED}
    _, setting = judge(table[table["family"] != ONE_STEP], chance=0.5)
    assert setting["one_step"] is None and setting["one_step_enough"] is None


def test_describe_verdicts():
    assert (
        describe_verdicts([FOLLOWS, BETWEEN, FOLLOWS]) == "follows difficulty (2 of 3), in between (1 of 3)"
    )
    assert describe_verdicts([]) == "—"
    with pytest.raises(ValueError):
        describe_verdicts(["ponders"])


def test_seeds_on_reads_each_run_once_over_its_draws():
    run = {"experiment": "e", "variant": "v", "seed": 0}
    other = {"experiment": "e", "variant": "w", "seed": 0}  # a run not judged
    row = {"accuracy": 0.1, "rho": 0.1, "accuracy_draws": 0.9, "rho_draws": 0.8}
    halting = pd.DataFrame(
        [
            {**run, **row, "set": "test"},
            {**run, **row, "set": "test"},  # the same run, in a second study's table
            {**run, **row, "set": "beyond", "accuracy_draws": 0.5},
            {**other, **row, "set": "test"},
        ]
    )
    runs = pd.DataFrame([{**run, "config": "PonderNet λ_p=0.5", "family": "pondernet", "epochs": 3}])
    rows = seeds_on(halting, runs)
    assert len(rows) == 1
    assert rows.iloc[0][["accuracy", "rho", "config", "family"]].tolist() == [
        0.9,
        0.8,
        "PonderNet λ_p=0.5",
        "pondernet",
    ]
    assert seeds_on(halting, runs, "beyond")["accuracy"].tolist() == [0.5]


def test_the_thresholds_are_where_the_rules_say():
    """Each class begins exactly at its threshold (a mutation sweep moved every boundary unseen):
    ρ = 0.8 follows, 0.3 is in between, −0.3 goes the wrong way; a spread of exactly 0.5 is not a
    fixed depth; an interval with one NaN end is a fixed depth."""
    rules = Rules()
    assert halting_verdict((rules.follows, rules.follows), 2.0) == FOLLOWS
    assert halting_verdict((rules.flat, rules.flat), 2.0) == BETWEEN
    assert halting_verdict((-rules.flat, -rules.flat), 2.0) == WRONG
    assert halting_verdict((-rules.flat + 0.01, rules.flat - 0.01), 2.0) == FIXED
    assert halting_verdict((0.9, 0.9), rules.spread) == FOLLOWS
    assert halting_verdict((0.5, float("nan")), 2.0) == FIXED
    assert side(0.8, 0.9, 0.8) == 1 and side(0.7, 0.79, 0.8) == -1 and side(0.7, 0.8, 0.8) == 0


def test_judge_reads_every_seed():
    """A seed with the same steps for every input has no ρ (NaN): beside a seed at 0.9 it stands as a
    fixed depth, and the configuration is undetermined (before: pandas skipped it, and the seed at 0.9
    alone made "follows difficulty"). A configuration whose seeds all lack ρ keeps none. The steps are
    the seeds' mean, a fixed depth needs a small spread in every seed, and rule 2 takes the best of
    several one-step networks, undetermined where it straddles the mark."""
    table = runs(
        [
            ("ponder", "pondernet", 0, 1.00, 0.90, 2.0, 4.0),
            ("ponder", "pondernet", 1, 1.00, float("nan"), 2.0, 6.0),
            ("flat", "fixed", 0, 1.00, float("nan"), 0.0, 5.0),
            ("mixed", "act", 0, 1.00, 0.90, 0.2, 3.0),
            ("mixed", "act", 1, 1.00, 0.90, 2.0, 3.0),
            ("one a", ONE_STEP, 0, 0.50, float("nan"), 0.0, 1.0),
            ("one b", ONE_STEP, 0, 0.9895, float("nan"), 0.0, 1.0),
        ]
    )
    table["accuracy_low"] = table["accuracy"].where(table["config"] != "one b", 0.985)
    table["accuracy_high"] = table["accuracy"].where(table["config"] != "one b", 0.995)
    configs, setting = judge(table, 0.5)
    assert configs.loc["ponder", "verdict"] == RHO_UNDETERMINED and configs.loc["ponder", "steps"] == 5.0
    assert np.isnan(configs.loc["flat", "rho_low"]) and configs.loc["flat", "verdict"] == FIXED
    assert configs.loc["mixed", "verdict"] == FOLLOWS  # one seed's steps spread: not a fixed depth
    assert setting["one_step"] == "one b" and setting["one_step_enough"] is None
