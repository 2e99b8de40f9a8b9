"""A run stopped part-way continues from its last epoch in a later process, and ends as the same run
trained in one go would: the same weights, the same history, the same best epoch.

Deliberate breaks these tests catch (each was tried):
- the data module's generator state not restored (``load_state_dict`` a no-op): the resumed run draws
  the batches of epoch 1 again, and its weights differ;
- the history read from the last process's csv log alone: the resumed history lacks the first epochs;
- ``train()`` deleting an unfinished folder as before (no resume): the run trains from epoch 0, and
  the test that counts the epochs trained after the stop fails;
- ``resumable`` ignoring the recorded identity: a run of another configuration resumes from it;
- ``reproduce`` (``run_one``) training with ``overwrite=True`` as it once did: a study's unfinished run
  is deleted and trained from epoch 0 (found when the long parity runs restarted from scratch).
"""

import os
import signal

import pytest
import test_faults
import torch

from pondernet_tutorial.runs import training
from pondernet_tutorial.runs.config import WEIGHTS, ConfigMismatchError, TrainConfig
from pondernet_tutorial.runs.files import write_json
from pondernet_tutorial.runs.processes import Interrupted
from pondernet_tutorial.runs.resume import RESUME_FILE
from pondernet_tutorial.runs.studies import run_one
from pondernet_tutorial.runs.training import train
from pondernet_tutorial.untrusted import read_json

EPOCHS = 4


def tiny(root, **kwargs) -> TrainConfig:
    """The faults tests' tiny parity run, for more epochs: a run to stop part-way."""
    return test_faults.tiny(root, **{"epochs": EPOCHS, **kwargs})


def stop_at_epoch(monkeypatch, epoch: int, started: list):
    """SIGTERM at the start of ``epoch`` (0-based); every epoch started is recorded in ``started``."""
    original = training.EpochClock.on_train_epoch_start

    def start(self, trainer, pl_module):
        started.append(trainer.current_epoch)
        if trainer.current_epoch == epoch:
            os.kill(os.getpid(), signal.SIGTERM)
        original(self, trainer, pl_module)

    monkeypatch.setattr(training.EpochClock, "on_train_epoch_start", start)


def test_a_stopped_run_resumes_and_ends_as_the_run_trained_in_one_go(tmp_path, monkeypatch):
    whole, whole_meta = train(tiny(tmp_path / "whole"))

    config = tiny(tmp_path / "parts")
    started = []
    stop_at_epoch(monkeypatch, 2, started)
    with pytest.raises(Interrupted):
        train(config)
    assert not (config.run_dir / WEIGHTS).exists()
    assert (config.run_dir / "checkpoints" / "last.ckpt").is_file()
    assert (config.run_dir / RESUME_FILE).is_file()
    monkeypatch.undo()

    started_after = []
    stop_at_epoch(monkeypatch, -1, started_after)  # records the epochs, stops none
    parts, parts_meta = train(config)
    # it continued where it stopped: at epoch 2, the one the signal cut, not at epoch 0
    assert started_after == [2, 3]
    for (name, a), (_, b) in zip(whole.state_dict().items(), parts.state_dict().items(), strict=True):
        assert torch.equal(a, b), name
    assert parts_meta["best_epoch"] == whole_meta["best_epoch"]
    assert parts_meta["epochs_run"] == whole_meta["epochs_run"] == EPOCHS and parts_meta["resumed"]
    drop = {"epoch_time_s", "train_time_s"}  # wall times
    assert [
        {k: v for k, v in r.items() if k not in drop}
        for r in training.pd.read_csv(config.run_dir / "history.csv").to_dict("records")
    ] == [
        {k: v for k, v in r.items() if k not in drop}
        for r in training.pd.read_csv(tiny(tmp_path / "whole").run_dir / "history.csv").to_dict("records")
    ]
    assert not (config.run_dir / RESUME_FILE).exists() and not (config.run_dir / "checkpoints").exists()


def test_an_unfinished_run_of_another_configuration_is_kept_and_trained_again_only_with_overwrite(
    tmp_path, monkeypatch
):
    """Two configurations may share a folder (a name cut short); the first one's epochs are never
    removed unasked, as a finished run of another configuration is not (round 10: it was removed
    without a word)."""
    config = tiny(tmp_path)
    stop_at_epoch(monkeypatch, 2, [])
    with pytest.raises(Interrupted):
        train(config)
    monkeypatch.undo()
    recorded = read_json(config.run_dir / RESUME_FILE)
    write_json(config.run_dir / RESUME_FILE, {"identity": {**recorded["identity"], "lr": 1.0}})
    last = (config.run_dir / "checkpoints" / "last.ckpt").read_bytes()
    with pytest.raises(
        ConfigMismatchError, match=r"the unfinished run in .* another configuration \(lr: saved 1\.0"
    ):
        train(config)
    assert (config.run_dir / "checkpoints" / "last.ckpt").read_bytes() == last
    started = []
    stop_at_epoch(monkeypatch, -1, started)
    _, metadata = train(config, overwrite=True)
    assert started == list(range(EPOCHS)) and not metadata["resumed"]


def test_reproduce_continues_an_unfinished_run_of_a_study(tmp_path, monkeypatch):
    config = tiny(tmp_path)
    stop_at_epoch(monkeypatch, 2, [])
    with pytest.raises(Interrupted):
        run_one(config, limit=64, overwrite=False, reevaluate=False, threads=None)
    monkeypatch.undo()
    started = []
    stop_at_epoch(monkeypatch, -1, started)
    record = run_one(config, limit=64, overwrite=False, reevaluate=False, threads=None)
    assert record["done"] == "trained" and started == [2, 3]
    assert read_json(config.run_dir / "metadata.json")["resumed"]


def test_a_run_whose_validation_stopped_improving_resumes_from_its_last_epoch(tmp_path, monkeypatch):
    """The last checkpoint follows every epoch, not only the epochs that improve the best one. Break
    tried: Lightning's ``save_last=True`` (it writes last.ckpt only when the best improves), with which
    this run, whose accuracy never moves, resumed from epoch 1 and trained epochs 1-3 again."""
    frozen = dict(lr=1e-12)  # the weights barely move: the validation accuracy is the same every epoch
    config = tiny(tmp_path, **frozen)
    stop_at_epoch(monkeypatch, 3, [])
    with pytest.raises(Interrupted):
        train(config)
    monkeypatch.undo()
    assert torch.load(config.run_dir / "checkpoints" / "best.ckpt", weights_only=True)["epoch"] == 0
    started = []
    stop_at_epoch(monkeypatch, -1, started)
    _, metadata = train(config)
    assert started == [3] and metadata["resumed"] and metadata["best_epoch"] == 0
