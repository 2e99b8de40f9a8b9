"""Issue 39's attacks (round 4) on what fit() and a resumed run trust: a checkpoint handed to the public
fit() names no path that it deletes or reads, a FIFO never blocks it, an archive that inflates beyond a
checkpoint of the model is refused before it is inflated, a hard-linked file in a run folder is never
written through, and an epoch count outside 1 to MAX_EPOCHS is one clear error. Each test failed on the
code before the change (4115801), as the closing note of issue 39 tells."""

from __future__ import annotations

import io
import os
import zipfile
from pathlib import Path

import pytest
import tiny_parity
import torch
from test_untrusted_runs import stopped_run, time_limit

from pondernet_tutorial.data.modules import ParityDataModule
from pondernet_tutorial.fitting import MAX_EPOCHS, fit
from pondernet_tutorial.runs.training import train
from pondernet_tutorial.untrusted import CheckpointError

QUIET = dict(accelerator="cpu", logger=False, enable_progress_bar=False, enable_model_summary=False)


def data():
    return ParityDataModule(n_elements=8, train_subset=256, val_size=128, batch_size=64)


def shared_checkpoint(tmp_path: Path, edit) -> tuple[Path, Path]:
    """A checkpoint of one epoch of fit() in ``tmp_path/run``, its best-epoch callback's state edited
    by ``edit(state, checkpoints_folder)``, saved as plain data to ``tmp_path/shared.ckpt``: what a
    user could be handed. Returns the checkpoint and the run's folder."""
    run = tmp_path / "run"
    trainer, _ = fit(tiny_parity.module(), data(), 1, default_root_dir=run, **QUIET)
    checkpoints = Path(trainer.checkpoint_callback.dirpath)
    checkpoint = torch.load(trainer.checkpoint_callback.best_model_path, weights_only=True)
    (key,) = [k for k in checkpoint["callbacks"] if "Checkpoint" in k and "val/acc" in k]
    edit(checkpoint["callbacks"][key], checkpoints)
    shared = tmp_path / "shared.ckpt"
    torch.save(checkpoint, shared)
    return shared, run


def test_1_a_checkpoint_given_to_fit_never_deletes_a_folder_it_names(tmp_path):
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "keep").write_text("mine")

    def name_the_victim(state, checkpoints):
        outside = str(checkpoints / ".." / ".." / "victim")  # checkpoints/../../victim
        state["dirpath"] = str(checkpoints)  # Lightning restores the paths only for its own folder
        state["best_model_path"] = state["kth_best_model_path"] = outside
        state["best_model_score"] = state["kth_value"] = torch.tensor(0.0)  # every epoch beats it
        state["best_k_models"] = {outside: torch.tensor(0.0)}

    shared, run = shared_checkpoint(tmp_path, name_the_victim)
    fit(tiny_parity.module(), data(), 3, ckpt_path=shared, default_root_dir=run, **QUIET)
    assert (victim / "keep").read_text() == "mine"


def test_4_a_fifo_named_as_the_best_checkpoint_never_blocks_fit(tmp_path):
    def name_a_fifo(state, checkpoints):
        os.mkfifo(checkpoints / "best-v7.ckpt")
        state["dirpath"] = str(checkpoints)
        state["best_model_path"] = str(checkpoints / "best-v7.ckpt")
        state["best_model_score"] = torch.tensor(2.0)  # no epoch beats it: fit() would read it at the end

    shared, run = shared_checkpoint(tmp_path, name_a_fifo)
    with time_limit(60):
        _, best_epoch = fit(tiny_parity.module(), data(), 2, ckpt_path=shared, default_root_dir=run, **QUIET)
    assert best_epoch == 1  # the only epoch trained after the restore: the FIFO was never the best


def test_4_a_fifo_given_as_ckpt_path_is_one_error_at_once(tmp_path):
    fifo = tmp_path / "shared.ckpt"
    os.mkfifo(fifo)
    with time_limit(60), pytest.raises(CheckpointError, match="is not a regular file"):
        fit(tiny_parity.module(), data(), 1, ckpt_path=fifo, default_root_dir=tmp_path, **QUIET)


def test_5_a_checkpoint_that_inflates_beyond_the_models_size_is_refused_before_inflating(tmp_path):
    stored = io.BytesIO()
    torch.save({"state_dict": {"w": torch.zeros(40 * 2**20)}, "epoch": 0}, stored)  # 160 MiB of zeros
    bomb = tmp_path / "bomb.ckpt"
    with zipfile.ZipFile(stored) as plain, zipfile.ZipFile(bomb, "w", zipfile.ZIP_DEFLATED) as packed:
        for member in plain.infolist():
            packed.writestr(member.filename, plain.read(member.filename))
    assert bomb.stat().st_size < 2 * 2**20
    with pytest.raises(CheckpointError, match="inflates to"):
        fit(tiny_parity.module(), data(), 1, ckpt_path=bomb, default_root_dir=tmp_path, **QUIET)


def test_2_a_hard_linked_log_file_of_a_resumed_run_is_never_written_through(tmp_path, monkeypatch, capsys):
    config = stopped_run(tmp_path / "runs", monkeypatch)
    logs = [p for p in (config.run_dir / "logs").rglob("*") if p.is_file()]
    assert logs, "the stopped run wrote no log file"
    outside = tmp_path / "outside"
    outside.mkdir()
    before = {}
    for i, path in enumerate(logs):  # as cp -al or rsync --link-dest leave a copied run
        kept = outside / f"{i}-{path.name}"
        kept.write_bytes(path.read_bytes() + b"# mine\n")
        before[kept] = kept.read_bytes()
        path.unlink()
        os.link(kept, path)
    _, metadata = train(config)
    assert "a hard link" in capsys.readouterr().err
    assert not metadata["resumed"]
    assert {path: path.read_bytes() for path in before} == before


@pytest.mark.parametrize("epochs", [-1, 0, True, 1.5, MAX_EPOCHS + 1])
def test_4_an_epoch_count_outside_1_to_the_maximum_is_one_clear_error(epochs):
    with pytest.raises(ValueError, match="max_epochs must be a whole number from 1"):
        fit(tiny_parity.module(), data(), epochs, **QUIET)
