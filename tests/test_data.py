import pytest
import torch

from pondernet_tutorial.data import (
    DATA_DIR_VARIABLE,
    MNISTDataModule,
    MNISTNotFoundError,
    RotationSpec,
    load_mnist,
    resolve_data_dir,
    rotate,
    rotated_test_set,
)


def test_rotate_90_degrees_matches_rot90():
    x = torch.zeros(1, 1, 28, 28)
    x[0, 0, 2:6, 10:20] = 1.0  # a bar near the top
    out = rotate(x, torch.tensor([90.0]))
    expected = torch.rot90(x, 1, dims=(2, 3))  # counter-clockwise
    assert torch.allclose(out, expected, atol=1e-4)
    assert torch.allclose(rotate(x, torch.tensor([0.0])), x, atol=1e-5)
    assert torch.allclose(rotate(x, torch.tensor([360.0])), x, atol=1e-4)


def test_rotate_per_image_angles_and_errors():
    x = torch.rand(3, 1, 28, 28)
    out = rotate(x, torch.tensor([0.0, 90.0, 180.0]))
    assert torch.allclose(out[0], x[0], atol=1e-5)
    assert torch.allclose(out[2], torch.rot90(x[2], 2, dims=(1, 2)), atol=1e-4)
    with pytest.raises(ValueError, match="angles"):
        rotate(x, torch.zeros(2))
    with pytest.raises(ValueError, match="float"):
        rotate(x.to(torch.uint8), torch.zeros(3))


def test_rotation_spec():
    assert RotationSpec(45).name == "rot45"
    assert RotationSpec(22.5, "uniform").name == "rot_pm22.5"
    with pytest.raises(ValueError, match="exact"):
        RotationSpec(10, "gaussian")
    images = (torch.rand(10, 1, 28, 28) * 255).to(torch.uint8)
    a = rotated_test_set(images, RotationSpec(45, "uniform"), seed=1)
    b = rotated_test_set(images, RotationSpec(45, "uniform"), seed=1)
    assert torch.equal(a, b) and a.dtype == torch.float32


def test_env_variable_overrides(monkeypatch, tmp_path):
    monkeypatch.setenv(DATA_DIR_VARIABLE, str(tmp_path))
    assert resolve_data_dir("/somewhere/else") == tmp_path
    monkeypatch.delenv(DATA_DIR_VARIABLE)
    assert str(resolve_data_dir("/somewhere/else")) == "/somewhere/else"


def test_missing_mnist_offline_gives_clear_error(monkeypatch, tmp_path):
    import torchvision.datasets.mnist as tv_mnist

    def offline(*args, **kwargs):
        raise RuntimeError("no network")

    monkeypatch.setenv(DATA_DIR_VARIABLE, str(tmp_path))
    monkeypatch.setattr(tv_mnist, "download_and_extract_archive", offline)
    monkeypatch.setattr(tv_mnist.MNIST, "resources", [("https://invalid.invalid/x.gz", None)])
    with pytest.raises(MNISTNotFoundError, match=r"PONDERNET_DATA_DIR.*|train-images-idx3-ubyte") as info:
        load_mnist(train=True)
    assert DATA_DIR_VARIABLE in str(info.value) and "train-images-idx3-ubyte" in str(info.value)


def test_datamodule_split(needs_mnist):
    dm = MNISTDataModule(batch_size=256, test_rotations=[0, 90, RotationSpec(45, "uniform")])
    dm.setup("fit")
    assert len(dm.train_labels) == 55_000 and len(dm.val_labels) == 5_000
    dm.setup("test")
    assert dm.test_set_names == ["rot0", "rot90", "rot_pm45"]
    images, labels = next(iter(dm.test_dataloader()[1]))
    assert images.shape == (256, 1, 28, 28) and images.dtype == torch.float32 and labels.shape == (256,)
    assert 0.0 <= images.min() and images.max() <= 1.0
    # the split does not depend on the global seed
    torch.manual_seed(123)
    dm2 = MNISTDataModule()
    dm2.setup("fit")
    assert torch.equal(dm.val_labels, dm2.val_labels)


def test_bad_datamodule_arguments():
    with pytest.raises(ValueError, match="batch_size"):
        MNISTDataModule(batch_size=0)
    with pytest.raises(ValueError, match="train_rotation"):
        MNISTDataModule(train_rotation=-5)
