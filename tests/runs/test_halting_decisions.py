"""The halting decisions of the correctness heads (TRM's, HRM's): the pairs (sample, step ``n ≤ T(x)``)
taken from the evaluation's own forward pass, the counts ``decisions.csv`` keeps of them, and
``analysis/heads.decisions_right`` on both.

Deliberate breaks these tests catch (each was tried):
- the pairs stopping one step early (``steps < halt_step`` in ``decision_pairs``), or going one
  step past ``T(x)``: test_the_pairs_are_the_unrolls, test_the_counts_give_decisions_right;
- the halt logit's sign flipped, or HRM's continue logit read instead of its halt logit:
  test_the_pairs_are_the_unrolls, test_the_counts_give_decisions_right;
- a batch's samples numbered from 0 instead of from the batch's start: test_the_pairs_are_the_unrolls;
- ``decision_table`` counting the wrong decisions as ``right`` (``1 - right`` of decisions_right's
  share): test_the_counts_give_decisions_right;
- ``tables_up_to_date`` not asking a TRM run for ``decisions.csv`` (its stale tables kept):
  test_a_trm_run_writes_its_decisions.
"""

import pandas as pd
import pytest
import torch
from test_training import tiny as training_tiny

from pondernet_tutorial import ParityStep
from pondernet_tutorial.analysis.heads import decisions_right
from pondernet_tutorial.data.base import EvalSet
from pondernet_tutorial.methods.hrm import HRMHalting
from pondernet_tutorial.methods.trm import TRMHalting
from pondernet_tutorial.runs.config import TrainConfig
from pondernet_tutorial.runs.evaluation import (
    DECISIONS,
    RUN_TABLES,
    decision_table,
    evaluate_run,
    evaluate_set_decisions,
    halt_logits,
    pooled_decisions,
    run_tables,
    tables_up_to_date,
)

STEPS = 5


def head(method: str):
    """A tiny TRM or HRM head on 8-element parity whose halting steps spread over 1..N: the halt
    decision's bias moved so that a fifth of the samples halt at step 1."""
    torch.manual_seed(2)
    cls = {"trm": TRMHalting, "hrm": HRMHalting}[method]
    model = cls(ParityStep(n_elements=8, hidden_size=16), max_steps=STEPS, halting_bias=None).eval()
    with torch.no_grad():
        q = model(eval_set().inputs).halting_logits[0]
        margin = q if method == "trm" else q[:, 0] - q[:, 1]  # what the head halts on, at step 1
        model.step_function.halting_head.bias[0] -= margin.quantile(0.8)
    return model


def inputs(n, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randint(-1, 2, (n, 8), generator=g).float()
    return x, ((x == 1).sum(1) % 2).long(), (x != 0).sum(1)


def eval_set(n=60):
    x, y, k = inputs(n)
    return EvalSet("test", x, y, {"mode": "m"}, {"k": k})


def loop_pairs(model, method, data):
    """The pairs written out from the full unroll, one sample and one step at a time."""
    with torch.no_grad():
        out = model(data.inputs)
    rows = []
    for b in range(len(data.labels)):
        halt = STEPS
        for n in range(1, STEPS + 1):  # the head's own test at step n
            q = out.halting_logits[n - 1, b]
            if (q > 0) if method == "trm" else (q[0] > q[1]):
                halt = n
                break
        for n in range(1, halt + 1):
            q = out.halting_logits[n - 1, b]
            rows.append(
                {
                    "index": b,
                    "step": n,
                    "halt_logit": float(q if method == "trm" else q[0]),  # HRM: q^halt
                    "correct": int(out.logits[n - 1, b].argmax() == data.labels[b]),
                    "halt_step": halt,
                    "k": int(data.per_sample["k"][b]),
                }
            )
    return pd.DataFrame(rows)


@pytest.mark.parametrize("method", ["trm", "hrm"])
def test_the_pairs_are_the_unrolls(method):
    model, data = head(method), eval_set()
    per_sample, _, pairs = evaluate_set_decisions(model, data, batch_size=25)  # three batches
    expected = loop_pairs(model, method, data)
    assert expected["halt_step"].nunique() >= 3 and (expected["halt_step"] == STEPS).any()
    assert set(expected["correct"]) == {0, 1}
    assert (pairs["set"] == "test").all() and (pairs["mode"] == "m").all()
    got = pairs.sort_values(["index", "step"], ignore_index=True)
    for column in ("index", "step", "correct", "halt_step", "k"):
        assert got[column].astype(int).tolist() == expected[column].tolist(), column
    assert got["halt_logit"].to_numpy() == pytest.approx(expected["halt_logit"].to_numpy(), abs=1e-5)
    # every sample's T(x) is per_sample's, and its last pair is that step's answer
    halts = got.groupby("index")["halt_step"].first()
    assert halts.tolist() == per_sample["halt_step"].tolist()
    assert got.groupby("index")["step"].max().tolist() == halts.tolist()


@pytest.mark.parametrize("method", ["trm", "hrm"])
def test_the_counts_give_decisions_right(method):
    model, data = head(method), eval_set()
    _, per_step, pairs = evaluate_set_decisions(model, data, batch_size=25)
    table = decision_table(pairs, ("set", "k"))
    expected = loop_pairs(model, method, data)
    expected["right"] = ((expected["halt_logit"] > 0) == (expected["correct"] == 1)).astype(int)
    expected["positive"] = (expected["halt_logit"] > 0).astype(int)
    by_hand = expected.groupby(["k", "step"]).agg(
        pairs=("index", "size"),
        right=("right", "sum"),
        positive=("positive", "sum"),
        correct=("correct", "sum"),
    )
    counts = table.set_index(["k", "step"])[["pairs", "right", "positive", "correct"]]
    pd.testing.assert_frame_equal(counts.sort_index(), by_hand, check_dtype=False)
    # step 1 holds every sample: its correct answers are per_step's first row
    first = table[table["step"] == 1]
    assert first["pairs"].sum() == len(data.labels)
    assert first["correct"].sum() == pytest.approx(per_step["accuracy"].iloc[0] * len(data.labels))
    # summed over k and steps, the counts give decisions_right on the pairs themselves
    pooled = pooled_decisions(table, ("set",)).iloc[0]
    direct = decisions_right(pairs, by=("set",)).iloc[0]
    assert pooled["pairs"] == direct["pairs"] == len(expected)
    assert pooled["right"] == pytest.approx(direct["right"], abs=1e-12)
    assert pooled["right"] == pytest.approx(expected["right"].mean(), abs=1e-12)


def test_only_correctness_heads_have_decisions():
    with pytest.raises(ValueError, match="halting decisions are scored for trm, hrm only"):
        from tiny_parity import model as parity_model

        net = parity_model("pondernet").eval()
        halt_logits(net, net(inputs(4)[0]))
    assert run_tables(TrainConfig.from_options(experiment="parity-interpolation")) == RUN_TABLES
    assert DECISIONS in run_tables(TrainConfig.from_options(experiment="parity-interpolation", method="hrm"))


def test_a_trm_run_writes_its_decisions(tmp_path):
    from pondernet_tutorial.runs.training import train

    config = training_tiny(tmp_path, method="trm", epochs=1)
    module, _ = train(config)
    evaluate_run(config, limit=8, module=module)
    table = pd.read_csv(config.run_dir / DECISIONS)
    per_sample = pd.read_csv(config.run_dir / "per_sample.csv.gz")
    per_step = pd.read_csv(config.run_dir / "per_step.csv")
    assert list(table.columns) == ["set", "k", "step", "pairs", "right", "positive", "correct"]
    # per set and k, one pair per sample and step up to the sample's halting step in per_sample
    pairs = table.groupby(["set", "k"])["pairs"].sum()
    pd.testing.assert_series_equal(
        pairs, per_sample.groupby(["set", "k"])["halt_step"].sum(), check_names=False
    )
    # step 1 holds every sample: its correct answers are per_step's first row
    first = table[table["step"] == 1].groupby("set")["correct"].sum() / per_sample.groupby("set").size()
    accuracy = per_step[per_step["step"] == 1].set_index("set")["accuracy"]
    assert first.to_numpy() == pytest.approx(accuracy.loc[first.index].to_numpy(), abs=1e-6)
    assert tables_up_to_date(config, limit=8)
    (config.run_dir / DECISIONS).unlink()  # an evaluation from before the decisions: made again
    assert not tables_up_to_date(config, limit=8)
