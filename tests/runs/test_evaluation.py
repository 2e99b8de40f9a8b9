"""The evaluation tables: summaries computed right, per-step accuracy, the distance to the prior.

Deliberate breaks these tests catch (each was tried):
- ``summarize`` computing accuracy wrongly (``prediction != label``, or averaging per class):
  test_summarize_by_hand;
- the distance to the prior measured against the unnormalised prior: test_tv_to_the_prior.
"""

import math

import pandas as pd
import pytest
import torch
from tiny_parity import module

from pondernet_tutorial.data.base import EvalSet
from pondernet_tutorial.runs.evaluation import evaluate_set, per_class, summarize


def test_summarize_by_hand():
    frame = pd.DataFrame(
        {
            "set": ["a"] * 5 + ["b"] * 3,
            "label": [0, 0, 0, 1, 2, 1, 1, 1],
            "prediction": [0, 0, 0, 1, 0, 1, 0, 0],
            "halt_step": [1, 2, 3, 4, 5, 2, 2, 2],
            "expected_steps": [1.0, 2.0, 3.0, 4.0, 5.0, 2.0, 3.0, 4.0],
            "entropy": [0.1, 0.2, 0.3, 0.4, 0.5, 0.3, 0.2, 0.1],
            "loss": [0.5, 0.4, 0.3, 0.2, 0.1, 0.1, 0.2, 0.3],
        }
    )
    table = summarize(frame).set_index("set")
    assert table.loc["a", "accuracy"] == pytest.approx(4 / 5)  # not the mean of per-class accuracies (2/3)
    assert table.loc["b", "accuracy"] == pytest.approx(1 / 3)
    assert table.loc["a", "halt_step"] == pytest.approx(3.0)
    assert table.loc["a", "expected_steps_std"] == pytest.approx(2**0.5)
    assert table.loc["a", "spearman_steps_entropy"] == pytest.approx(1.0)
    assert table.loc["a", "spearman_steps_loss"] == pytest.approx(-1.0)
    assert table.loc["a", "steps_wrong"] == pytest.approx(5.0) and table.loc[
        "a", "steps_right"
    ] == pytest.approx(2.5)
    assert table.loc["b", "n"] == 3 and math.isnan(table.loc["a", "tv_prior"])
    classes = per_class(frame).set_index(["set", "label"])
    assert classes.loc[("a", 0), "accuracy"] == 1.0 and classes.loc[("a", 2), "accuracy"] == 0.0
    assert classes.loc[("b", 1), "expected_steps"] == pytest.approx(3.0)


def parity_module(method="pondernet", lambda_p=0.2):
    torch.manual_seed(0)
    options = {"lambda_p": lambda_p} if method == "pondernet" else {}
    return module(method, max_steps=6, method_options=options).eval()


def test_tv_to_the_prior():
    """The distance is measured to the renormalised geometric prior, the minimiser of the KL term."""
    from pondernet_tutorial.halting import constant_lambda_distribution, geometric_prior

    lit = parity_module(lambda_p=0.3)
    step = lit.model.step_function
    with torch.no_grad():  # λ_n = λ_p for every input: the prior with its tail on step N
        step.halting_head.weight.zero_()
        step.halting_head.bias.fill_(math.log(0.3 / 0.7))
    x = torch.randint(-1, 2, (50, 8)).float()
    table, per_step = evaluate_set(lit, EvalSet("s", x, torch.zeros(50, dtype=torch.long)))
    capped, renormalised = constant_lambda_distribution(0.3, 6), geometric_prior(0.3, 6, renormalize=True)
    expected = 0.5 * (capped - renormalised).abs().sum().item()
    assert expected > 0.05
    assert table["tv_prior"].to_numpy() == pytest.approx(expected, abs=1e-5)
    assert table["expected_steps"].nunique() == 1
    assert list(per_step["step"]) == [1, 2, 3, 4, 5, 6]


def test_per_step_accuracy_and_columns():
    lit = parity_module()
    x = torch.randint(-1, 2, (40, 8)).float()
    y = ((x == 1).sum(1) % 2).long()
    k = (x != 0).sum(1)
    table, per_step = evaluate_set(lit, EvalSet("s", x, y, {"mode": "m"}, {"k": k}), batch_size=16)
    with torch.no_grad():
        logits = lit.model(x).logits
    expected = (logits.argmax(-1) == y).float().mean(1)
    torch.testing.assert_close(torch.tensor(per_step["accuracy"].to_numpy(), dtype=torch.float32), expected)
    assert list(table.columns[:2]) == ["set", "mode"] and (table["k"].to_numpy() == k.numpy()).all()
    correct = table["prediction"] == table["label"]  # the loss is the answer's: below log 2 iff right
    assert (table.loc[correct, "loss"] <= math.log(2) + 1e-6).all()
    assert (table.loc[~correct, "loss"] >= math.log(2) - 1e-6).all()
    act_table, act_steps = evaluate_set(parity_module("act"), EvalSet("s", x, y))
    assert act_steps.empty and "tv_prior" not in act_table  # ACT: no per-step answers, no prior


def test_per_angle_both_directions_and_their_mean():
    from pondernet_tutorial.runs.evaluation import per_angle

    rows = []
    for seed, (ccw, cw) in enumerate([(0.9, 0.7), (0.8, 0.6)]):
        for degrees, accuracy in ((0, 0.99), (45, ccw), (-45, cw), (180, 0.3), (-180, 0.3)):
            rows.append(
                {
                    "experiment": "e",
                    "variant": "v",
                    "seed": seed,
                    "mode": "exact",
                    "degrees": degrees,
                    "accuracy": accuracy,
                    "halt_step": 2.0,
                    "expected_steps": 2.0,
                }
            )
        rows.append(
            {
                "experiment": "e",
                "variant": "v",
                "seed": seed,
                "mode": "uniform",
                "degrees": 45.0,
                "accuracy": 0.85,
                "halt_step": 2.0,
                "expected_steps": 2.0,
            }
        )
    table = per_angle(pd.DataFrame(rows)).set_index(["mode", "abs_degrees", "direction"])
    assert table.loc[("exact", 45, "counter-clockwise"), "accuracy_mean"] == pytest.approx(0.85)
    assert table.loc[("exact", 45, "clockwise"), "accuracy_mean"] == pytest.approx(0.65)
    assert table.loc[("exact", 45, "mean of both"), "accuracy_mean"] == pytest.approx(0.75)
    assert table.loc[("exact", 45, "mean of both"), "accuracy_min"] == pytest.approx(
        0.7
    )  # per seed, then over seeds
    assert table.loc[("exact", 180, "both"), "seeds"] == 2  # -180° is the same turn, counted once
    assert table.loc[("uniform", 45, "uniform"), "accuracy_mean"] == pytest.approx(0.85)
    assert ("exact", 0, "mean of both") not in table.index
