import os

import pytest
import torch

from pondernet_tutorial.data.mnist import MNIST_FILES, MNISTNotFoundError, resolve_data_dir


def pytest_configure(config):
    """One PyTorch thread in each of pytest-xdist's test processes (``-n 2``, as CI runs them): two
    processes of two threads each on two cores wait for each other (``pondernet_tutorial.threads``)."""
    if os.environ.get("PYTEST_XDIST_WORKER"):
        torch.set_num_threads(1)


def mnist_available() -> bool:
    """MNIST where the package looks for it (as the notebooks do): $PONDERNET_DATA_DIR, else
    shared/data beside the clone, else the user cache."""
    try:
        raw = resolve_data_dir() / "MNIST" / "raw"
    except MNISTNotFoundError:
        return False
    return all((raw / name).is_file() for name in MNIST_FILES)


@pytest.fixture
def needs_mnist():
    if not mnist_available():
        pytest.skip("MNIST not on disk: set PONDERNET_DATA_DIR to the folder holding MNIST/raw")


@pytest.fixture
def without_wandb(monkeypatch):
    """The wandb package looks uninstalled, whether it is or not."""
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "wandb" else real(name, *a)
    )


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)
