"""Real training on MNIST (a few thousand images) and the shipped results' reproducibility."""

import json

import pandas as pd
import pytest
import torch

from pondernet_tutorial.checkpoints import available_pretrained, load_model, load_pretrained, pretrained_path
from pondernet_tutorial.data import RotationSpec
from pondernet_tutorial.evaluation import evaluate_sweep
from pondernet_tutorial.training import TrainConfig, train

pytestmark = pytest.mark.slow


def quick(tmp_path, **kwargs):
    defaults = dict(output_dir=str(tmp_path), progress_bar=False, train_subset=4000, epochs=2)
    defaults.update(kwargs)
    return TrainConfig(**defaults)


def test_short_training_beats_chance_by_far(tmp_path, needs_mnist):
    module, metadata = train(quick(tmp_path))
    assert metadata["best_val_acc"] > 0.8  # chance is 0.1
    run = quick(tmp_path).run_dir
    assert (run / "model.pt").exists() and (run / "history.csv").exists()
    assert json.loads((run / "metadata.json").read_text())["quick"] is True
    history = pd.read_csv(run / "history.csv")
    assert list(history["epoch"]) == [0, 1] and "val/expected_steps" in history
    with pytest.raises(FileExistsError):
        train(quick(tmp_path))


def test_same_seed_same_model(tmp_path, needs_mnist):
    a, meta_a = train(quick(tmp_path / "a", train_subset=1000, epochs=1, experiment="extrapolation"))
    b, meta_b = train(quick(tmp_path / "b", train_subset=1000, epochs=1, experiment="extrapolation"))
    for (name, pa), pb in zip(a.state_dict().items(), b.state_dict().values()):
        assert torch.equal(pa, pb), name
    assert meta_a["best_val_acc"] == meta_b["best_val_acc"]
    c, _ = train(quick(tmp_path / "c", train_subset=1000, epochs=1, experiment="extrapolation", seed=1))
    assert not torch.equal(
        a.state_dict()["model.step_function.lambda_head.weight"],
        c.state_dict()["model.step_function.lambda_head.weight"],
    )


@pytest.mark.skipif(not available_pretrained(), reason="no shipped models")
def test_shipped_model_reproduces_its_per_sample_table(needs_mnist):
    experiment = "extrapolation" if "extrapolation" in available_pretrained() else "interpolation"
    seed = available_pretrained()[experiment][0]
    module = load_pretrained(experiment, seed)
    shipped = pd.read_csv(pretrained_path(experiment, seed) / "per_sample.csv.gz")
    specs = [RotationSpec(0.0), RotationSpec(90.0), RotationSpec(45.0, "uniform")]
    fresh = evaluate_sweep(module, specs, limit=512)
    for spec in specs:
        new = fresh[fresh["set"] == spec.name].reset_index(drop=True)
        old = shipped[(shipped["set"] == spec.name) & (shipped["index"] < 512)].reset_index(drop=True)
        assert len(new) == len(old) == 512
        for column in ("label", "prediction", "halt_step"):
            assert (new[column].values == old[column].values).all(), (spec.name, column)
        for column in ("expected_steps", "entropy"):
            pd.testing.assert_series_equal(
                new[column], old[column], rtol=2e-3, atol=2e-4, check_names=False, check_dtype=False
            )


@pytest.mark.skipif(not available_pretrained(), reason="no shipped models")
def test_every_shipped_model_loads_fast_and_is_full_budget():
    import time

    for experiment, seeds in available_pretrained().items():
        for seed in seeds:
            start = time.perf_counter()
            module = load_pretrained(experiment, seed)
            assert time.perf_counter() - start < 1.0
            assert not module.training
            meta = json.loads((pretrained_path(experiment, seed) / "metadata.json").read_text())
            assert meta["quick"] is False and meta["train_images"] == 55_000
            assert meta["config"]["epochs"] == 20


def test_load_model_from_shipped_folder_equals_load_pretrained():
    if not available_pretrained():
        pytest.skip("no shipped models")
    experiment, seeds = next(iter(available_pretrained().items()))
    a = load_pretrained(experiment, seeds[0])
    b = load_model(pretrained_path(experiment, seeds[0]) / "model.pt")
    assert all(torch.equal(x, y) for x, y in zip(a.state_dict().values(), b.state_dict().values()))
