import lightning as L
import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

from pondernet_tutorial import MNISTDataModule, PonderLitModule, RotationSpec
from pondernet_tutorial.checkpoints import CheckpointError, load_model, save_weights


def fake_loader(n=64, batch_size=32):
    x = torch.rand(n, 1, 28, 28)
    y = torch.randint(0, 10, (n,))
    return DataLoader(TensorDataset(x, y), batch_size=batch_size)


def trainer(**kwargs):
    defaults = dict(
        max_epochs=1,
        accelerator="cpu",
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        gradient_clip_val=0.5,
    )
    defaults.update(kwargs)
    return L.Trainer(**defaults)


@pytest.mark.parametrize("precision", ["32-true", "bf16-mixed"])
def test_fit_logs_every_metric_without_nan(precision):
    module = PonderLitModule(max_steps=5)
    t = trainer(precision=precision, limit_train_batches=2, limit_val_batches=1)
    t.fit(module, fake_loader(), fake_loader())
    for stage in ("train", "val"):
        for name in ("acc", "halt_step", "expected_steps", "loss", "reconstruction", "regularization"):
            value = t.callback_metrics[f"{stage}/{name}"]
            assert torch.isfinite(value), f"{stage}/{name}"
    assert all(torch.isfinite(p).all() for p in module.parameters())
    assert 1.0 <= t.callback_metrics["val/expected_steps"] <= 5.0


def test_validation_is_reproducible():
    module = PonderLitModule(max_steps=8).eval()
    loader = fake_loader(128)
    first = trainer().validate(module, loader, verbose=False)[0]
    second = trainer().validate(module, loader, verbose=False)[0]
    assert first == second


def test_named_test_sets(needs_mnist):
    dm = MNISTDataModule(test_rotations=[0, 90, RotationSpec(45, "uniform")], test_subset=256, batch_size=128)
    module = PonderLitModule(max_steps=4)
    results = trainer().test(module, datamodule=dm, verbose=False)
    keys = set().union(*results)
    for name in ("rot0", "rot90", "rot_pm45"):
        assert f"test/{name}/acc" in keys and f"test/{name}/expected_steps" in keys


def test_hyperparameters_are_saved_and_checked():
    module = PonderLitModule(max_steps=7, lambda_p=0.3, beta=0.02)
    assert module.hparams.max_steps == 7 and module.hparams.lambda_p == 0.3
    with pytest.raises(ValueError, match="lambda_p"):
        PonderLitModule(lambda_p=0.0)
    with pytest.raises(ValueError, match="max_steps"):
        PonderLitModule(max_steps=0)
    with pytest.raises(ValueError, match="beta"):
        PonderLitModule(beta=-0.1)
    with pytest.raises(ValueError, match="kl_direction"):
        PonderLitModule(kl_direction="backward")


def test_weights_only_checkpoint_roundtrip(tmp_path):
    module = PonderLitModule(max_steps=6, hidden_size=32).eval()
    path = save_weights(module, tmp_path / "model.pt")
    torch.load(path, weights_only=True)  # plain data only: loads without unpickling code
    loaded = load_model(path)
    x = torch.rand(4, 1, 28, 28)
    with torch.no_grad():
        assert torch.equal(module(x, halting="full").logits, loaded(x, halting="full").logits)
    assert loaded.hparams.hidden_size == 32 and not loaded.training


def test_damaged_and_mismatched_checkpoints(tmp_path):
    with pytest.raises(CheckpointError, match="no checkpoint"):
        load_model(tmp_path / "missing.pt")
    damaged = tmp_path / "damaged.pt"
    good = save_weights(PonderLitModule(max_steps=3), tmp_path / "good.pt")
    damaged.write_bytes(good.read_bytes()[:1000])
    with pytest.raises(CheckpointError, match="damaged"):
        load_model(damaged)
    blob = torch.load(good, weights_only=True)
    blob["hparams"]["hidden_size"] = 16  # weights no longer fit
    torch.save(blob, tmp_path / "mismatch.pt")
    with pytest.raises(CheckpointError, match="do not fit"):
        load_model(tmp_path / "mismatch.pt")
    torch.save({"weights": 1}, tmp_path / "other.pt")
    with pytest.raises(CheckpointError, match="not a PonderNet checkpoint"):
        load_model(tmp_path / "other.pt")


def test_lightning_ckpt_loads_weights_only(tmp_path):
    module = PonderLitModule(max_steps=4)
    t = trainer(limit_train_batches=1, limit_val_batches=1)
    t.fit(module, fake_loader(), fake_loader())
    t.save_checkpoint(tmp_path / "run.ckpt")
    loaded = load_model(tmp_path / "run.ckpt")
    assert loaded.hparams.max_steps == 4
    for a, b in zip(module.state_dict().values(), loaded.state_dict().values()):
        assert torch.equal(a, b)
