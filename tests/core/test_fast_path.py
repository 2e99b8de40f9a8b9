"""``fit()``'s fast path: on one CUDA device the plain module's step is replayed from one CUDA graph.

There is no GPU here: the tests make the Trainer's checks see one (``graph_blockers`` finds nothing
missing) and replace CUDA's graphs with the stand-in of ``tests/stand_in_graphs.py``, which replays
the recorded step on the CPU.

Deliberate breaks these tests catch (each was tried):
- ``fast_module`` returning the module unchanged: test_fit_takes_the_fast_path_and_ends_on_the_plain_weights;
- the Trainer's clipping value not handed to the graphed module: the same test (the weights differ);
- ``GraphedStep`` not asking ``check`` before the capture: test_a_step_that_reads_a_value_on_the_host_trains_eagerly;
- ``fast=False`` ignored: test_fast_false_and_the_cpu_leave_the_module_as_it_is.
"""

import re
import warnings

import lightning as L
import pytest
import torch
from stand_in_graphs import StandInGraphs, capturable_adam_on_the_cpu  # noqa: F401 (a fixture)
from torch.utils.data import DataLoader, TensorDataset

from pondernet_tutorial import fast_path
from pondernet_tutorial.fast_path import GraphedPonderLitModule
from pondernet_tutorial.fitting import fit
from pondernet_tutorial.lightning_module import PonderLitModule
from pondernet_tutorial.methods.pondernet import PonderNet
from pondernet_tutorial.steps.parity import ParityStep

QUIET = dict(
    accelerator="cpu",
    logger=False,
    enable_progress_bar=False,
    enable_model_summary=False,
    num_sanity_val_steps=0,
)


def parity(n, seed):
    g = torch.Generator().manual_seed(seed)
    x = torch.randint(-1, 2, (n, 8), generator=g).float()
    return x, (x == 1).sum(-1).remainder(2)


def loaders():
    train = DataLoader(TensorDataset(*parity(384, 5)), batch_size=64, drop_last=True)
    return train, DataLoader(TensorDataset(*parity(128, 6)), batch_size=64)


def plain_module(step=ParityStep):
    torch.manual_seed(0)
    return PonderLitModule(PonderNet(step(8, hidden_size=16), max_steps=5, lambda_p=0.3), lr=0.01)


class Recorded:
    """Stand-in graphs that keep what they did, made where ``fast_module`` makes CUDA's."""

    made: list[StandInGraphs] = []

    def __new__(cls):
        graphs = StandInGraphs()
        cls.made.append(graphs)
        return graphs


@pytest.fixture
def one_gpu(monkeypatch):
    """The Trainer's checks find one CUDA device, and CUDA's graphs are the stand-in's."""
    Recorded.made = []
    monkeypatch.setattr(fast_path, "graph_blockers", lambda trainer, precision=None: [])
    monkeypatch.setattr(fast_path, "CudaGraphs", Recorded)
    return Recorded.made


def train(module, tmp_path, **options):
    train, val = loaders()
    data = L.LightningDataModule.from_datasets(train.dataset, val.dataset, batch_size=64)
    data.train_dataloader = lambda: train  # drop_last: every batch of the captured shape
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        trainer, _ = fit(
            module, data, max_epochs=2, default_root_dir=tmp_path, gradient_clip_val=0.05, **QUIET, **options
        )
    return trainer, [str(w.message) for w in caught if issubclass(w.category, RuntimeWarning)]


def test_fit_takes_the_fast_path_and_ends_on_the_plain_weights(one_gpu, tmp_path):
    """On one (stand-in) GPU, ``fit`` trains a graphed module over the caller's very model, clipping as
    the Trainer was asked to, and ends on the weights that the plain module's eager fit gives (capturable
    Adam rounds apart by about 1e-6)."""
    eager, fast = plain_module(), plain_module()
    eager_trainer, _ = train(eager, tmp_path / "eager", fast=False)
    fast_trainer, said = train(fast, tmp_path / "fast")
    assert type(eager_trainer.lightning_module) is PonderLitModule
    graphed = fast_trainer.lightning_module
    assert isinstance(graphed, GraphedPonderLitModule) and graphed.model is fast.model
    assert graphed.grad_clip == 0.05 and fast_trainer.gradient_clip_val is None
    (graphs,) = one_gpu
    assert graphs.captures == 1 and graphs.replays == 2 * 6 - 3 and said == []
    assert dict(graphed.hparams) == dict(fast.hparams)  # its checkpoints load into the plain module
    for (name, a), (_, b) in zip(eager.named_parameters(), fast.named_parameters()):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5, msg=name)
    assert not fast.training  # fit's own ending: the best weights, in eval mode


class ReadsTheHost(ParityStep):
    """A user's step function that reads a value of the device on the host, every step."""

    def step(self, context, h):
        if h.abs().sum().item() > 1e9:  # the host waits for the device here
            h = h / 2
        return super().step(context, h)


def test_a_step_that_reads_a_value_on_the_host_trains_eagerly(one_gpu, tmp_path):
    """A step with ``.item()`` is never captured: one warning names the operation and the line, and
    every step runs eagerly."""
    module = plain_module(ReadsTheHost)
    trainer, said = train(module, tmp_path)
    (graphs,) = one_gpu
    assert graphs.captures == 0 and graphs.replays == 0 and trainer.global_step == 2 * 6
    assert len(said) == 1 and "\n" not in said[0], said
    assert re.search(
        r"cannot be replayed from a CUDA graph \(aten\.\S+ at test_fast_path\.py:\d+ in step", said[0]
    )


def test_fast_false_and_the_cpu_leave_the_module_as_it_is(monkeypatch, tmp_path):
    """On the CPU ``fit`` trains the module it is given, and ``fast=True`` says in one line what it
    lacks; ``fast=False`` never wraps, whatever the device."""
    module = plain_module()
    trainer, _ = train(module, tmp_path / "cpu")
    assert trainer.lightning_module is module
    with pytest.raises(ValueError, match=r"^fit\(fast=True\) needs a CUDA device: drop fast=True\.$"):
        train(plain_module(), tmp_path / "asked", fast=True)
    monkeypatch.setattr(fast_path, "graph_blockers", lambda trainer, precision=None: [])
    module = plain_module()
    trainer, _ = train(module, tmp_path / "off", fast=False)
    assert trainer.lightning_module is module
