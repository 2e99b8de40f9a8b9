"""Training runs: seeding, the best epoch's weights, what a run folder holds, and when it is reused.

Parity runs of a few batches keep these tests fast; the real-MNIST tests are marked slow.

Deliberate breaks these tests catch (each was tried):
- the seed set after the module is built (its weights then depend on what ran before):
  test_same_seed_same_run_whatever_ran_before;
- the best-epoch weights replaced by the last epoch's: test_the_best_epochs_weights_are_saved;
- run folders reused across different configurations (the identity check in ``train`` or
  ``run_one`` removed): test_a_folder_of_another_configuration_is_never_reused.
"""

import json

import pandas as pd
import pytest
import torch

from pondernet_tutorial.data.base import EvalSet
from pondernet_tutorial.runs.config import WEIGHTS, ConfigMismatchError, TrainConfig
from pondernet_tutorial.runs.evaluation import evaluate_set
from pondernet_tutorial.runs.studies import run_one
from pondernet_tutorial.runs.training import ENGINE_VERSION, train


def tiny(tmp_path, **kwargs):
    values = dict(
        experiment="parity-interpolation",
        output_dir=str(tmp_path),
        progress_bar=False,
        epochs=2,
        train_subset=256,
        step_options={"hidden_size": 16},
        max_steps=6,
        compile=False,
    )
    values.update(kwargs)
    return TrainConfig.from_options(**values)


def test_same_seed_same_run_whatever_ran_before(tmp_path):
    a, meta_a = train(tiny(tmp_path / "a"))
    torch.rand(1000)  # move the global random state
    b, meta_b = train(tiny(tmp_path / "b"))
    for (name, pa), pb in zip(a.state_dict().items(), b.state_dict().values()):
        assert torch.equal(pa, pb), name
    assert meta_a["best_val_acc"] == meta_b["best_val_acc"]
    c, _ = train(tiny(tmp_path / "c", seed=1))
    assert not torch.equal(
        a.state_dict()["model.step_function.cell.weight_ih"],
        c.state_dict()["model.step_function.cell.weight_ih"],
    )


def test_the_best_epochs_weights_are_saved(tmp_path):
    config = tiny(tmp_path, epochs=5, lr=0.05, seed=1)
    module, metadata = train(config)
    history = pd.read_csv(config.run_dir / "history.csv")
    best = int(history["val/acc"].idxmax())
    assert best != len(history) - 1  # the setting of this test: the last epoch is not the best
    assert metadata["best_epoch"] == history.loc[best, "epoch"]
    assert metadata["best_val_acc"] == pytest.approx(history["val/acc"].max())
    from pondernet_tutorial.runs.checkpoints import load_model
    from pondernet_tutorial.runs.training import make_datamodule

    saved = load_model(config.run_dir / WEIGHTS)
    dm = make_datamodule(config)
    dm.setup("fit")
    table, _ = evaluate_set(saved, EvalSet("val", dm.val_inputs, dm.val_labels), seed=0, batch_size=128)
    accuracy = (table["prediction"] == table["label"]).mean()
    assert accuracy == pytest.approx(history.loc[best, "val/acc"], abs=1e-6)


def test_select_by_epoch_keeps_the_last_epochs_weights(tmp_path):
    config = tiny(
        tmp_path, epochs=5, lr=0.05, seed=1, select_by="epoch"
    )  # the run above: its best is not last
    module, metadata = train(config)
    history = pd.read_csv(config.run_dir / "history.csv")
    assert int(history["val/acc"].idxmax()) != len(history) - 1
    assert metadata["best_epoch"] == len(history) - 1 == 4
    assert metadata["best_val_acc"] == pytest.approx(history["val/acc"].iloc[-1])
    assert "select_by=epoch" in config.variant  # not the default: named in the folder


def test_a_run_folder_holds_its_record(tmp_path):
    config = tiny(tmp_path)
    train(config)
    run = config.run_dir
    assert run == tmp_path / "parity-interpolation" / config.variant / "seed0"
    assert {p.name for p in run.iterdir()} >= {WEIGHTS, "history.csv", "metadata.json"}
    assert not (run / "checkpoints").exists()
    meta = json.loads((run / "metadata.json").read_text())
    assert meta["identity"] == json.loads(json.dumps(config.identity()))
    assert meta["quick"] is True and meta["epochs_run"] == 2 and meta["stopped_by"] == "max_epochs"
    history = pd.read_csv(run / "history.csv")
    assert list(history["epoch"]) == [0, 1] and {"val/acc", "train/loss", "lr", "epoch_time_s"} <= set(
        history
    )
    with pytest.raises(FileExistsError, match="overwrite"):
        train(config)


def test_stopping_rule_is_recorded(tmp_path):
    config = tiny(tmp_path, epochs=5, stop_at_val_acc=0.01)  # any accuracy reaches it
    _, metadata = train(config)
    assert metadata["epochs_run"] == 1 and metadata["stopped_by"] == "stopping_threshold"


def test_history_and_metadata_with_the_tensorboard_logger(tmp_path):
    pytest.importorskip("tensorboard")
    config = tiny(tmp_path, logger="tensorboard")
    train(config)
    assert (config.run_dir / "history.csv").is_file() and (config.run_dir / "metadata.json").is_file()


def test_history_and_metadata_with_the_wandb_logger(tmp_path, monkeypatch):
    pytest.importorskip("wandb")  # not a dependency; where installed, the run must complete offline
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_DIR", str(tmp_path))
    config = tiny(tmp_path, logger="wandb")
    train(config)
    assert all((config.run_dir / name).is_file() for name in ("history.csv", "metadata.json", WEIGHTS))


def test_arguments_are_checked_before_a_folder_is_made(tmp_path, without_wandb):
    with pytest.raises(ValueError, match="pip install wandb"):
        train(tiny(tmp_path, logger="wandb"))
    with pytest.raises(Exception, match="accelerator"):
        train(tiny(tmp_path, accelerator="abacus"))
    with pytest.raises(ValueError, match="lambda_p"):
        train(tiny(tmp_path, lambda_p=1.5))
    assert not any(tmp_path.iterdir())


def test_a_folder_of_another_configuration_is_never_reused(tmp_path):
    config = tiny(tmp_path)
    train(config)
    meta_path = config.run_dir / "metadata.json"
    meta = json.loads(meta_path.read_text())
    meta["identity"]["lr"] = 0.5  # as if the folder held a run of another configuration
    meta_path.write_text(json.dumps(meta))
    with pytest.raises(ConfigMismatchError, match="lr: saved 0.5"):
        train(config)
    with pytest.raises(ValueError, match="another configuration"):
        run_one(config, limit=8, overwrite=False, reevaluate=False, threads=None)


def test_different_configurations_get_different_folders(tmp_path):
    configs = [
        tiny(tmp_path),
        tiny(tmp_path, lambda_p=0.1),
        tiny(tmp_path, beta=0.0),
        tiny(tmp_path, method="act"),
        tiny(tmp_path, method="act", tau=0.01),
        tiny(tmp_path, method="fixed"),
        tiny(tmp_path, epochs=3),
        tiny(tmp_path, train_subset=512),
        tiny(tmp_path, kl_direction="prior_p"),
        tiny(tmp_path, step_options={"hidden_size": 8}),
        tiny(tmp_path, quick=True),
        tiny(tmp_path, experiment="parity-extrapolation"),
    ]
    folders = {c.run_dir for c in configs}
    assert len(folders) == len(configs)
    same = tiny(tmp_path, accelerator="cpu", compile=True, logger="tensorboard", progress_bar=True)
    assert same.run_dir == configs[0].run_dir  # where and how fast a run trains does not name it


def test_run_one_reuses_only_matching_tables(tmp_path):
    config = tiny(tmp_path)
    first = run_one(config, limit=8, overwrite=False, reevaluate=False, threads=None)
    assert first["done"] == "trained"
    again = run_one(config, limit=8, overwrite=False, reevaluate=False, threads=None)
    assert again["done"] == "reused"
    other_limit = run_one(config, limit=4, overwrite=False, reevaluate=False, threads=None)
    assert other_limit["done"] == "evaluated"  # the tables were for another test-set limit
    record = json.loads((config.run_dir / "evaluation.json").read_text())
    assert record["limit"] == 4 and len(pd.read_csv(config.run_dir / "per_sample.csv.gz")) == 4 * 16


@pytest.mark.slow
def test_short_mnist_training_beats_chance_by_far(tmp_path, needs_mnist):
    config = TrainConfig(
        output_dir=str(tmp_path), progress_bar=False, train_subset=4000, epochs=2, compile=False
    )
    _, metadata = train(config)
    assert metadata["best_val_acc"] > 0.6  # chance is 0.1


@pytest.mark.slow
def test_a_compiled_run_trains(tmp_path):
    """``compile=True``, the default of every shipped experiment, through ``train``."""
    torch._dynamo.reset()
    config = TrainConfig.from_options(
        experiment="parity-interpolation",
        quick=True,
        compile=True,
        output_dir=str(tmp_path),
        progress_bar=False,
        max_steps=4,
        step_options={"hidden_size": 16},
    )
    _, metadata = train(config)
    assert (
        metadata["compiled"] is True
        and metadata["engine"] == ENGINE_VERSION
        and metadata["cuda_graph"] is False
    )
    assert (config.run_dir / WEIGHTS).is_file()


@pytest.mark.parametrize("experiment", ["parity-interpolation", "mnist-interpolation"])
def test_the_check_that_the_step_fits_the_data_leaves_training_as_it_was(experiment):
    """train() runs one dry forward pass before the run folder is made (check_fits_data); it must leave
    the global random state and the model's mode as they were, or training draws differently with it.
    Breaks caught (each was tried): the loader iterated outside fork_rng (a DataLoader draws its seed
    from the global generator), the model left in eval mode."""
    from pondernet_tutorial.runs.build import check_fits_data, make_datamodule, make_module

    config = TrainConfig.from_options(experiment=experiment, quick=True, epochs=1)
    module, datamodule = make_module(config), make_datamodule(config)
    torch.manual_seed(0)
    before = torch.get_rng_state()
    check_fits_data(config, module, datamodule)
    assert torch.equal(torch.get_rng_state(), before)
    assert module.model.training and all(m.training for m in module.model.modules())
