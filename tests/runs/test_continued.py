"""The paper-parity extrapolation runs continued to the updates' limit (tools/continue_extrapolation.py):
their shipped last weights reproduce the last point of their shipped curves, so the curve chapter 12
draws is what those weights do."""

import pandas as pd
import pytest

from pondernet_tutorial.data.modules import ParityDataModule
from pondernet_tutorial.runs.checkpoints import load_model
from pondernet_tutorial.runs.config import PRETRAINED_DIR
from pondernet_tutorial.runs.evaluation import evaluate_set

STUDY = PRETRAINED_DIR / "studies" / "parity-paper16-long"


@pytest.mark.parametrize("method, seed", [("pondernet", 0), ("act", 1)])
def test_the_last_weights_reproduce_the_last_point_of_the_curve(method, seed):
    curve = pd.read_csv(STUDY / "continued.csv")
    last = curve[(curve["method"] == method) & (curve["seed"] == seed)].sort_values("updates").iloc[-1]
    assert last["updates"] == 500_000
    module = load_model(STUDY / "continued" / f"{method}-seed{seed}.safetensors")
    (unseen,) = ParityDataModule(n_elements=16, train_k=(1, 8), test_k=(9, 16)).evaluation_sets()
    per_sample, _ = evaluate_set(module, unseen, seed=0)
    assert len(per_sample) == last["unseen_n"]
    assert (per_sample["prediction"] == per_sample["label"]).mean() == pytest.approx(
        last["unseen_accuracy"], abs=1e-6
    )
    assert per_sample["halt_step"].mean() == pytest.approx(last["unseen_steps"], rel=1e-5)
