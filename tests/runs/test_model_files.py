"""Model files (``model.safetensors``): weights and hyperparameters as data, read back whole and checked;
a Lightning ``.ckpt`` (a pickle) is refused."""

import functools
import json

import lightning as L
import pytest
import torch
from tiny_parity import loader, run_module, weighted_cross_entropy

from pondernet_tutorial.runs.checkpoints import FORMAT, CheckpointError, load_model, save_weights


def read_weights(path):
    from safetensors import safe_open

    with safe_open(str(path), "pt") as file:
        return file.metadata(), {k: file.get_tensor(k) for k in file.keys()}


def write_weights(path, header, state):
    from safetensors.torch import save_file

    save_file(state, str(path), metadata=header)
    return path


def test_weights_only_checkpoint_roundtrip(tmp_path):
    m = run_module(
        "act", method_options={"tau": 0.01}, loss_fn=functools.partial(weighted_cross_entropy, weight=2.0)
    ).eval()
    path = save_weights(m, tmp_path / "model.safetensors")
    header, _ = read_weights(path)  # tensors and JSON text only: nothing to unpickle
    assert header["format"] == FORMAT
    with pytest.raises(CheckpointError, match="weighted_cross_entropy.* is not registered"):
        load_model(path)  # the loss is this test module's: a file may name registered components only
    loaded = load_model(path, trust_code=True)
    x = next(iter(loader()))[0]
    with torch.no_grad():
        assert torch.equal(m(x)[0], loaded(x)[0])  # ACT's answer: the mean-field prediction
        assert torch.equal(m.model(x).halting_logits, loaded.model(x).halting_logits)
    assert loaded.hparams.method == "act" and not loaded.training
    assert loaded.model.tau == 0.01


def test_checkpoint_errors(tmp_path):
    with pytest.raises(CheckpointError, match="no model file"):
        load_model(tmp_path / "missing.safetensors")
    good = save_weights(run_module(max_steps=3), tmp_path / "good.safetensors")
    damaged = tmp_path / "damaged.safetensors"
    damaged.write_bytes(good.read_bytes()[:-100])
    with pytest.raises(CheckpointError, match="not a whole model.safetensors file"):
        load_model(damaged)
    header, state = read_weights(good)
    hparams = json.loads(header["hparams"])
    hparams["step_options"]["hidden_size"] = 8  # weights no longer fit
    write_weights(tmp_path / "mismatch.safetensors", {**header, "hparams": json.dumps(hparams)}, state)
    with pytest.raises(CheckpointError, match="do not fit"):
        load_model(tmp_path / "mismatch.safetensors")
    hparams = {**json.loads(header["hparams"]), "dropout_rate": 0.3, "colour": "red"}
    write_weights(tmp_path / "unknown.safetensors", {**header, "hparams": json.dumps(hparams)}, state)
    with pytest.raises(CheckpointError, match="does not know: colour, dropout_rate"):
        load_model(tmp_path / "unknown.safetensors")
    write_weights(tmp_path / "old.safetensors", {**header, "format": "pondernet_tutorial/weights-v1"}, state)
    with pytest.raises(CheckpointError, match="weights-v1"):
        load_model(tmp_path / "old.safetensors")
    write_weights(tmp_path / "other.safetensors", {"format": FORMAT}, {"weights": torch.ones(1)})
    with pytest.raises(CheckpointError, match="not a PonderNet model file"):
        load_model(tmp_path / "other.safetensors")


def test_a_lightning_ckpt_is_refused_as_a_pickle(tmp_path):
    """A Lightning .ckpt is a pickle: load_model reads safetensors only, so no file given to it is ever
    unpickled (fit reads its own checkpoints through runs.resume.read_checkpoint)."""
    m = run_module(max_steps=4)
    t = L.Trainer(
        max_epochs=1,
        accelerator="cpu",
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        limit_train_batches=1,
        limit_val_batches=1,
    )
    t.fit(m, loader(), loader())
    t.save_checkpoint(tmp_path / "run.ckpt")
    with pytest.raises(
        CheckpointError, match=r"is a PyTorch archive \(a checkpoint of fit\(\).*ckpt_path=path"
    ):
        load_model(tmp_path / "run.ckpt")  # named for what it is, with what to do instead (a reuse review)


def test_a_model_built_in_code_is_refused_with_the_way_to_keep_it(tmp_path):
    """save_weights writes only what load_model can rebuild (a RunModule): a PonderLitModule around a
    step function of the user's own is refused before any file is written, and the message's recipe
    (safetensors' save_model and load_model) gives the same weights back."""
    from safetensors.torch import load_model as load_into
    from safetensors.torch import save_model

    from pondernet_tutorial import ParityStep, PonderLitModule, PonderNet

    def built():
        return PonderLitModule(PonderNet(ParityStep(n_elements=4, hidden_size=8), max_steps=3))

    module = built()
    with pytest.raises(
        TypeError,
        match=r"save_weights saves a RunModule, got a PonderLitModule: .*save_model.*safetensors.torch.load_model",
    ):
        save_weights(module, tmp_path / "mine.safetensors")
    assert not (tmp_path / "mine.safetensors").exists()
    save_model(module, tmp_path / "mine.safetensors")
    with pytest.raises(
        CheckpointError, match="not a model file of this package .*safetensors.torch.load_model"
    ):
        load_model(tmp_path / "mine.safetensors")  # (before: "has format None ... train the run again")
    again = built()
    load_into(again, tmp_path / "mine.safetensors")
    for name, tensor in module.state_dict().items():
        assert torch.equal(tensor, again.state_dict()[name]), name
