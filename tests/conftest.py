import os
from pathlib import Path

import pytest
import torch

SHARED_DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"


def mnist_available() -> bool:
    root = Path(os.environ.get("PONDERNET_DATA_DIR", SHARED_DATA))
    return (root / "MNIST" / "raw" / "train-images-idx3-ubyte").exists()


@pytest.fixture(autouse=True)
def _data_dir(monkeypatch):
    if "PONDERNET_DATA_DIR" not in os.environ and SHARED_DATA.exists():
        monkeypatch.setenv("PONDERNET_DATA_DIR", str(SHARED_DATA))


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
