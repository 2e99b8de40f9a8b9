"""A tiny PonderNet on 8-element parity and a loader of it, shared by the module's tests
(tests/core/test_lightning.py) and the model files' (tests/runs/test_model_files.py). This folder is on
``sys.path`` under pytest (it holds the rootdir's conftest.py and no ``__init__.py``).

:func:`module` is the plain :class:`~pondernet_tutorial.PonderLitModule` around a built model (the
taught code: nothing from ``runs/``); :func:`run_module` is the run machinery's
:class:`~pondernet_tutorial.runs.module.RunModule`, which builds the same model from its names
(:data:`PARITY`) and saves them as hyperparameters."""

import lightning as L
import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

from pondernet_tutorial import ACT, FixedSteps, ParityStep, PonderLitModule, PonderNet

PARITY = {"step": "parity_gru", "n_classes": 2, "step_options": {"n_elements": 8, "hidden_size": 16}}
METHODS = {"pondernet": PonderNet, "act": ACT, "fixed": FixedSteps}


def model(method="pondernet", max_steps=5, **options):
    """The halting method ``method`` over the tiny parity step function (``options``: the method's)."""
    return METHODS[method](ParityStep(n_elements=8, hidden_size=16), max_steps=max_steps, **options)


def module(method="pondernet", max_steps=5, method_options=None, loss_fn=None, **kwargs):
    """The plain module around :func:`model` (``kwargs``: the module's, e.g. ``lr``)."""
    return PonderLitModule(model(method, max_steps, loss_fn=loss_fn, **(method_options or {})), **kwargs)


def run_module(method="pondernet", max_steps=5, **kwargs):
    """The same model as a :class:`~pondernet_tutorial.runs.module.RunModule`, built from names."""
    from pondernet_tutorial.runs.module import RunModule

    options = {"max_steps": max_steps, **kwargs.pop("method_options", {})}
    return RunModule(**PARITY, method=method, method_options=options, **kwargs)


QUIET = dict(accelerator="cpu", logger=False, enable_progress_bar=False, enable_model_summary=False)
"""A Trainer's options on the CPU that print nothing and log nothing (checkpoints aside)."""


def quiet_trainer(**options):
    """A Lightning ``Trainer`` on the CPU that writes and prints nothing (:data:`QUIET`, and no
    checkpoint); ``options``: any other argument of ``L.Trainer``."""
    return L.Trainer(**{**QUIET, "enable_checkpointing": False, **options})


def parity(n, seed):
    """``n`` vectors of 8 elements in {-1, 0, 1} drawn from ``seed``, and the parity of their ones."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randint(-1, 2, (n, 8), generator=g).float()
    return x, (x == 1).sum(-1).remainder(2)


def datamodule(train=None, val=None, batch_size=32):
    """A Lightning data module of given ``(x, y)`` pairs for training and validation (by default 64
    parity vectors of seed 0, for both)."""
    train = train if train is not None else parity(64, 0)
    val = val if val is not None else train
    return L.LightningDataModule.from_datasets(
        TensorDataset(*train), TensorDataset(*val), batch_size=batch_size
    )


def fit_with_callback(folder, epochs: int, root, **options):
    """fit() of a tiny module on :func:`datamodule`, with a ``ModelCheckpoint`` of the caller's own
    saving into ``folder`` (``options``: fit's, such as ``ckpt_path``)."""
    from lightning.pytorch.callbacks import ModelCheckpoint

    from pondernet_tutorial import fit

    callback = ModelCheckpoint(dirpath=folder)
    return fit(
        module(), datamodule(), epochs, callbacks=[callback], default_root_dir=root, **QUIET, **options
    )


def loader(n=64, batch_size=32, seed=0):
    return DataLoader(TensorDataset(*parity(n, seed)), batch_size=batch_size)


def weighted_cross_entropy(logits, targets, weight=1.0):
    """A loss that is not registered: a model file may name it only when the caller trusts the file."""
    return weight * F.cross_entropy(logits, targets, reduction="none")
