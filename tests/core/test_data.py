"""MNIST and parity data: rotation, splits, where the data comes from, damaged files, parity samples.

Deliberate breaks these tests catch (each was tried):
- training batches not rotated (``on_after_batch_transfer`` returning the batch as it came):
  test_training_batches_are_rotated_validation_and_test_are_not_redrawn;
- the validation set not rotated: test_validation_set_is_rotated;
- uniform angles drawn in [0, θ] instead of ±θ: test_uniform_angles_cover_both_directions.
"""

import pytest
import torch

from pondernet_tutorial.data import mnist, modules
from pondernet_tutorial.data.mnist import (
    DATA_DIR_VARIABLE,
    MNISTDamagedError,
    MNISTNotFoundError,
    RotationSpec,
    load_mnist,
    resolve_data_dir,
    rotate,
    rotated_test_set,
    uniform_angles,
)
from pondernet_tutorial.data.modules import MNISTDataModule, ParityDataModule
from pondernet_tutorial.data.parity import parity_batch


def test_rotate_90_degrees_matches_rot90():
    x = torch.zeros(1, 1, 28, 28)
    x[0, 0, 2:6, 10:20] = 1.0  # a bar near the top
    out = rotate(x, torch.tensor([90.0]))
    expected = torch.rot90(x, 1, dims=(2, 3))  # counter-clockwise
    assert torch.allclose(out, expected, atol=1e-4)
    assert torch.allclose(rotate(x, torch.tensor([-90.0])), torch.rot90(x, -1, dims=(2, 3)), atol=1e-4)
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


def test_uniform_angles_cover_both_directions():
    angles = uniform_angles(10_000, 22.5, torch.Generator().manual_seed(0))
    assert angles.abs().max() <= 22.5
    assert angles.min() < -20 and angles.max() > 20
    assert abs(angles.mean().item()) < 0.5


def test_rotation_spec():
    assert RotationSpec(45).name == "rot45"
    assert RotationSpec(-45).name == "rot-45"
    assert RotationSpec(22.5, "uniform").name == "rot_pm22.5"
    with pytest.raises(ValueError, match="exact"):
        RotationSpec(10, "gaussian")
    with pytest.raises(ValueError, match="half-range"):
        RotationSpec(-10, "uniform")
    images = (torch.rand(10, 1, 28, 28) * 255).to(torch.uint8)
    a = rotated_test_set(images, RotationSpec(45, "uniform"), seed=1)
    b = rotated_test_set(images, RotationSpec(45, "uniform"), seed=1)
    assert torch.equal(a, b) and a.dtype == torch.float32
    assert len(mnist.SWEEPS["full"]) == 25 + 4  # −180°..180° every 15°, and four uniform ranges


def fake_mnist(train, data_dir=None):
    """An asymmetric bar in every image: rotating it changes the picture."""
    n = 60_000 if train else 10_000
    images = torch.zeros(n, 1, 28, 28, dtype=torch.uint8)
    images[:, :, 4:8, 6:22] = 255
    return images, torch.arange(n) % 10


def use_fake_mnist(monkeypatch):
    """Serve ``fake_mnist`` where the data module looks the loader up (``data/modules.py`` imports it
    by name), so that these tests never reach the real MNIST, present or not."""
    monkeypatch.setattr(modules, "load_mnist", fake_mnist)
    monkeypatch.setattr(mnist, "load_mnist", fake_mnist)


def test_training_batches_are_rotated_validation_and_test_are_not_redrawn(monkeypatch):
    use_fake_mnist(monkeypatch)
    dm = MNISTDataModule(train_rotation=22.5, batch_size=64)
    dm.setup("fit")
    images, labels, angles = next(iter(dm.train_dataloader()))  # the angles travel with the batch
    assert angles.shape == (64,) and angles.abs().max() <= 22.5 and angles.std() > 5
    assert images.dtype == torch.uint8  # bytes travel; they become floats on the device
    rotated, same_labels = dm.on_after_batch_transfer((images, labels, angles), 0)
    images = images.float() / 255.0
    assert torch.equal(same_labels, labels)
    changed = (rotated - images).abs().flatten(1).amax(1) > 0.1
    assert changed.float().mean() > 0.9  # every digit turned (a handful may draw an angle near 0)
    torch.testing.assert_close(rotated, mnist.rotate(images, angles))
    # validation and test batches (no angles): rotated once in setup, not here
    assert torch.equal(dm.on_after_batch_transfer((images, labels), 0)[0], images)
    plain = MNISTDataModule(train_rotation=0.0, batch_size=64)
    plain.setup("fit")
    batch = next(iter(plain.train_dataloader()))
    assert len(batch) == 2
    floats, _ = plain.on_after_batch_transfer(batch, 0)
    assert floats.dtype == torch.float32 and torch.equal(floats, batch[0].float() / 255.0)


def first_batches(dm, n=3):
    loader = iter(dm.train_dataloader())
    return [next(loader) for _ in range(n)]


@pytest.mark.parametrize("task", ["mnist", "parity"])
def test_training_data_has_its_own_generator(monkeypatch, task):
    """The training data depends on the run's seed only: draws from the global generator (weights,
    dropout, anything a change to the model or the logging adds) never change it."""
    use_fake_mnist(monkeypatch)

    def make(seed):
        if task == "mnist":
            dm = MNISTDataModule(train_rotation=22.5, batch_size=32, seed=seed)
        else:
            dm = ParityDataModule(n_elements=8, batch_size=32, train_subset=320, seed=seed)
        dm.setup("fit")
        return dm

    torch.manual_seed(0)
    first = first_batches(make(0))
    torch.manual_seed(123)
    torch.rand(1000)  # what an extra draw in the model or the logging would do
    again = first_batches(make(0))
    other = first_batches(make(1))
    for a, b, c in zip(first, again, other):
        for ta, tb in zip(a, b):
            assert torch.equal(ta, tb)
        assert not all(torch.equal(ta, tc) for ta, tc in zip(a, c))  # another seed, other data


def test_training_batches_have_fixed_shapes(monkeypatch):
    """The last, partial batch of an epoch is dropped in training (a captured step needs fixed
    shapes), kept in validation."""
    use_fake_mnist(monkeypatch)
    dm = MNISTDataModule(batch_size=64, train_subset=200)
    dm.setup("fit")
    assert [len(b[1]) for b in dm.train_dataloader()] == [64, 64, 64]
    assert sum(len(b[1]) for b in dm.val_dataloader()) == len(dm.val_labels)


def test_validation_set_is_rotated(monkeypatch):
    use_fake_mnist(monkeypatch)
    plain, turned = MNISTDataModule(train_rotation=0.0), MNISTDataModule(train_rotation=45.0)
    plain.setup("fit")
    turned.setup("fit")
    assert torch.equal(plain.val_labels, turned.val_labels)
    difference = (plain.val_images - turned.val_images).abs().flatten(1).amax(1)
    assert (difference > 0.1).float().mean() > 0.9


def test_data_dir_argument_wins_over_the_variable(monkeypatch, tmp_path):
    monkeypatch.setenv(DATA_DIR_VARIABLE, str(tmp_path))
    assert str(resolve_data_dir("/somewhere/else")) == "/somewhere/else"
    assert resolve_data_dir() == tmp_path
    monkeypatch.delenv(DATA_DIR_VARIABLE)
    monkeypatch.setattr(mnist, "checkout_data_dir", lambda: None)  # no shared/data beside the clone
    assert resolve_data_dir() == mnist.DEFAULT_DATA_DIR


def test_missing_mnist_offline_gives_clear_error(monkeypatch, tmp_path):
    import torchvision.datasets.mnist as tv_mnist

    def offline(*args, **kwargs):
        raise RuntimeError("no network")

    monkeypatch.setattr(tv_mnist, "download_and_extract_archive", offline)
    monkeypatch.setattr(tv_mnist.MNIST, "resources", [("https://invalid.invalid/x.gz", None)])
    with pytest.raises(MNISTNotFoundError) as info:
        load_mnist(train=True, data_dir=tmp_path)
    # a folder given by the caller comes before the variable: the advice names the folder, not it
    assert "(--data-dir, data_dir=)" in str(info.value) and "train-images-idx3-ubyte" in str(info.value)
    assert DATA_DIR_VARIABLE not in str(info.value)
    monkeypatch.setenv(DATA_DIR_VARIABLE, str(tmp_path))
    with pytest.raises(MNISTNotFoundError) as info:
        load_mnist(train=True)
    assert DATA_DIR_VARIABLE in str(info.value)


def test_damaged_mnist_file_is_named(tmp_path):
    raw = tmp_path / "MNIST" / "raw"
    raw.mkdir(parents=True)
    for name in mnist.MNIST_FILES:
        (raw / name).write_bytes(b"\x00\x00\x08\x03" + b"\x00" * 100)  # right magic, truncated
    with pytest.raises(MNISTDamagedError, match="t10k-images-idx3-ubyte is damaged"):
        load_mnist(train=False, data_dir=tmp_path)


def test_real_mnist_split(needs_mnist):
    dm = MNISTDataModule(batch_size=256, test_rotations=[0, -90, RotationSpec(45, "uniform")])
    dm.setup("fit")
    assert len(dm.train_labels) == 55_000 and len(dm.val_labels) == 5_000
    dm.setup("test")
    assert dm.test_set_names == ["rot0", "rot-90", "rot_pm45"]
    images, labels = next(iter(dm.test_dataloader()[1]))
    assert images.shape == (256, 1, 28, 28) and images.dtype == torch.float32 and labels.shape == (256,)
    assert 0.0 <= images.min() and images.max() <= 1.0
    torch.manual_seed(123)  # the split does not depend on the global seed
    dm2 = MNISTDataModule()
    dm2.setup("fit")
    assert torch.equal(dm.val_labels, dm2.val_labels)


def test_bad_datamodule_arguments():
    with pytest.raises(ValueError, match="batch_size"):
        MNISTDataModule(batch_size=0)
    with pytest.raises(ValueError, match="train_rotation"):
        MNISTDataModule(train_rotation=-5)
    with pytest.raises(ValueError, match="sweep"):
        MNISTDataModule(test_rotations="everything")
    with pytest.raises(ValueError, match="train_k"):
        ParityDataModule(n_elements=8, train_k=(0, 4))
    with pytest.raises(ValueError, match="test_k"):
        ParityDataModule(n_elements=8, test_k=(5, 9))


def test_parity_samples():
    x, y, k = parity_batch(2000, 12, (3, 7), torch.Generator().manual_seed(0))
    assert x.shape == (2000, 12) and set(x.unique().tolist()) <= {-1.0, 0.0, 1.0}
    assert torch.equal((x != 0).sum(1), k) and k.min() == 3 and k.max() == 7
    assert torch.equal(y, (x == 1).sum(1) % 2)
    assert 0.45 < y.float().mean() < 0.55  # both parities
    first = x[:, 0]
    assert (first == 1).any() and (first == -1).any()  # every position can hold a non-zero


def test_parity_datamodule_sets():
    dm = ParityDataModule(n_elements=10, train_k=(1, 5), test_k=(6, 10), test_per_k=30, val_size=500)
    dm.setup("fit")
    assert ((dm.val_inputs != 0).sum(1) <= 5).all()  # validation from the training range
    dm.setup("test")
    (only,) = dm.evaluation_sets()
    assert only.per_sample["k"].tolist() == [k for k in range(6, 11) for _ in range(30)]
    assert torch.equal((only.inputs != 0).sum(1), only.per_sample["k"])
    quick = ParityDataModule(n_elements=10, train_k=(1, 5), test_k=(6, 10), test_per_k=30, test_subset=4)
    (quick_set,) = quick.evaluation_sets()
    assert torch.equal(quick_set.inputs[:4], only.inputs[:4])  # the first samples of every k
    assert torch.equal(quick_set.inputs[4:8], only.inputs[30:34])
    torch.manual_seed(123)
    again = ParityDataModule(n_elements=10, train_k=(1, 5), test_k=(6, 10), test_per_k=30)
    assert torch.equal(again.evaluation_sets()[0].inputs, only.inputs)  # fixed, whatever the global seed
    assert dm.train_size == 128_000 and len(dm.train_dataloader()) == 1000


def test_quick_parity_runs_validate_on_a_smaller_set():
    assert ParityDataModule(n_elements=8).val_size == 8192
    assert ParityDataModule(n_elements=8, train_subset=2560).val_size == 1280
