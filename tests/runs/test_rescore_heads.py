"""``tools/rescore_heads.py``: the shipped halting-heads runs scored again on fresh walks, by a path of
its own from the weights to the accuracy, agree with the shipped table; a table that is off is flagged.

Deliberate breaks these tests catch (each was tried):
- the answer compared with shuffled labels: test_shipped_runs_agree_on_fresh_walks;
- the fresh walks drawn with the evaluation's own seed (3,100 plus the size): test_the_walks_are_fresh.
"""

import importlib.util
from pathlib import Path

import pandas as pd
import pytest
import torch

from pondernet_tutorial.runs.config import PRETRAINED_DIR
from pondernet_tutorial.untrusted import read_table

TOOL = Path(__file__).resolve().parents[2] / "tools" / "rescore_heads.py"
spec = importlib.util.spec_from_file_location("rescore_heads", TOOL)
rescore_heads = importlib.util.module_from_spec(spec)
spec.loader.exec_module(rescore_heads)

STUDY = PRETRAINED_DIR / "studies" / rescore_heads.STUDY
# TRM's head: neither share is 0 or 1, so agreement is a test, not an equality of certainties;
# PonderNet's: its early exit draws coins
VARIANTS = ["trm", "pondernet-lambda_p=0.5-beta=0.01"]
SAMPLES = 400


@pytest.fixture(scope="module")
def fresh():
    torch.set_num_threads(1)
    return rescore_heads.rescore(samples=SAMPLES, variants=VARIANTS)


def test_shipped_runs_agree_on_fresh_walks(fresh):
    assert sorted(fresh["variant"].unique()) == sorted(VARIANTS)
    assert sorted(fresh["set"]) == ["beyond", "beyond", "test", "test"]
    assert (fresh["n_fresh"] == SAMPLES).all() and (fresh["n_shipped"] == 4000).all()
    assert fresh["agrees"].all(), fresh
    trm = fresh[fresh["variant"] == "trm"].set_index("set")
    assert 0.75 < trm.loc["test", "fresh"] < 0.95 and trm.loc["beyond", "fresh"] < 0.1


def test_a_table_far_off_is_flagged(fresh, tmp_path, capsys):
    """A copy of the shipped halting.csv with TRM's test accuracy set to 0.5: that row (and only it)
    disagrees, and the command exits 1."""
    table = read_table(STUDY / "halting.csv")
    row = (table["variant"] == "trm") & (table["seed"] == 0) & (table["set"] == "test")
    assert row.sum() == 1
    table.loc[row, ["accuracy", "accuracy_draws"]] = 0.5
    tampered = tmp_path / "halting.csv"
    table.to_csv(tampered, index=False)
    result = rescore_heads.rescore(samples=SAMPLES, variants=["trm"], halting=tampered).set_index("set")
    assert not result.loc["test", "agrees"] and result.loc["test", "difference_in_se"] > 3
    assert result.loc["beyond", "agrees"]
    assert result.loc["test", "fresh"] == fresh.set_index(["variant", "set"]).loc[("trm", "test"), "fresh"]
    assert rescore_heads.main(["--samples", "40", "--variants", "trm", "--halting", str(tampered)]) == 1
    assert "False" in capsys.readouterr().out


def test_the_walks_are_fresh():
    """No fresh walk is one of the shipped evaluation's, and every walk length is drawn equally."""
    _, config = rescore_heads.run_folder_model(
        PRETRAINED_DIR / "pointer-extrapolation" / "trm" / "seed0", PRETRAINED_DIR
    )
    sets = rescore_heads.fresh_sets(config, {"test": 4000, "beyond": 4000})  # the shipped sets' size
    datamodule = rescore_heads.make_datamodule(config)
    datamodule.setup("test")
    for name, (inputs, _) in sets.items():
        shipped = {tuple(row.tolist()) for row in datamodule.test_sets[name][0].float()}
        assert not any(tuple(row.tolist()) in shipped for row in inputs), name
        # the walk's length: the slots visited from slot 0 to its exit (a slot pointing at itself)
        arrows, slot = inputs.long(), torch.zeros(len(inputs), dtype=torch.long)
        lengths = torch.ones(len(inputs), dtype=torch.long)
        for _ in range(arrows.shape[1]):
            following = arrows.gather(1, slot[:, None]).squeeze(1)
            lengths += following != slot
            slot = following
        k_min, k_max = datamodule.test_sets_k[name]
        counts = pd.Series(lengths.tolist()).value_counts().sort_index()
        assert list(counts.index) == list(range(k_min, k_max + 1)) and (counts == 500).all(), name


@pytest.mark.parametrize(
    "argv, message",
    [
        (["no-such-study"], "unknown study"),
        (["--variants", "no-such-head"], "no variant no-such-head"),
        (["--halting", "/nonexistent/halting.csv"], "missing table"),
    ],
)
def test_bad_input_is_one_line(argv, message, capsys):
    with pytest.raises(SystemExit) as exit:
        rescore_heads.main(argv)
    assert exit.value.code == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1


def test_difference_in_se():
    assert rescore_heads.difference_in_se(1.0, 4000, 1.0, 400) == 0.0
    assert rescore_heads.difference_in_se(1.0, 4000, 0.0, 400) == -float("inf")
    assert rescore_heads.difference_in_se(0.5, 100, 0.6, 100) == pytest.approx(0.1 / (0.49 / 100) ** 0.5)
