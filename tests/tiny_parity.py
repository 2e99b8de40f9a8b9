"""A tiny PonderNet on 8-element parity and a loader of it, shared by the module's tests
(tests/core/test_lightning.py) and the run machinery's (tests/runs). This folder is on ``sys.path`` under
pytest (it holds the rootdir's conftest.py and no ``__init__.py``)."""

import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

from pondernet_tutorial import ACT, FixedSteps, ParityStep, PonderLitModule, PonderNet

PARITY = {"step": "parity_gru", "n_classes": 2, "step_options": {"n_elements": 8, "hidden_size": 16}}
METHODS = {"pondernet": PonderNet, "act": ACT, "fixed": FixedSteps}


def module(method="pondernet", max_steps=5, loss_fn=None, **options):
    """The plain module over a model built by hand."""
    model = METHODS[method](
        ParityStep(n_elements=8, hidden_size=16), max_steps=max_steps, loss_fn=loss_fn, **options
    )
    return PonderLitModule(model)


def run_module(method="pondernet", max_steps=5, **kwargs):
    """The run machinery's module, built from names (as a run folder and a model file describe it)."""
    from pondernet_tutorial.runs.module import RunModule

    options = {"max_steps": max_steps, **kwargs.pop("method_options", {})}
    return RunModule(**PARITY, method=method, method_options=options, **kwargs)


def loader(n=64, batch_size=32, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randint(-1, 2, (n, 8), generator=g).float()
    return DataLoader(TensorDataset(x, ((x == 1).sum(1) % 2).long()), batch_size=batch_size)


def weighted_cross_entropy(logits, targets, weight=1.0):
    """A loss that is not registered: a model file may name it only when the caller trusts the file."""
    return weight * F.cross_entropy(logits, targets, reduction="none")
