"""``fit()``'s fast path: on one CUDA device the plain module's step is replayed from one CUDA graph.

There is no GPU here: the tests make the Trainer's checks see one (``graph_blockers`` finds nothing
missing) and replace CUDA's graphs with the stand-in of ``tests/stand_in_graphs.py``, which replays
the recorded step on the CPU.

Deliberate breaks these tests catch (each was tried):
- ``fast_module`` returning the module unchanged: test_fit_takes_the_fast_path_and_ends_on_the_plain_weights;
- the Trainer's clipping value not handed to the graphed module: the same test (the weights differ);
- ``GraphedStep`` not asking ``check`` before the capture: test_a_step_that_reads_a_value_on_the_host_trains_eagerly;
- ``fast=False`` ignored: test_fast_false_and_the_cpu_leave_the_module_as_it_is;
- the Trainer's clipping not given back after fit: test_fit_takes_the_fast_path_and_ends_on_the_plain_weights;
- the shorter last batch of an epoch warned about:
  test_an_epochs_shorter_last_batch_is_stepped_eagerly_without_a_word;
- gradient accumulation not refused: test_gradient_accumulation_trains_eagerly (Lightning refuses it);
- the subclass's line not printed:
  test_a_subclass_trains_its_own_step_eagerly_and_says_so;
- ``on_save_checkpoint`` keeping the capture's settings or the manual step count:
  test_a_checkpoint_resumes_on_the_other_path[fast-plain]; ``on_load_checkpoint`` not carrying the
  automatic count: test_a_checkpoint_resumes_on_the_other_path[plain-fast];
- the capture putting Adam's initial rate in place of the rate it finds (a resumed run's cut lost):
  test_the_capture_keeps_the_learning_rate_it_finds;
- a compiled module leaving torch.compile's workers running, not giving their number back, or
  stopping them on the CPU: test_a_compiled_step_stops_the_compile_workers_after_its_first_step.
"""

import importlib
import re
import warnings
from types import SimpleNamespace

import lightning as L
import pytest
import torch
from stand_in_graphs import StandInGraphs, capturable_adam_on_the_cpu  # noqa: F401 (a fixture)
from tiny_parity import QUIET, parity
from torch.utils.data import DataLoader, TensorDataset

from pondernet_tutorial import fast_path
from pondernet_tutorial.fast_path import GraphedPonderLitModule
from pondernet_tutorial.fitting import fit
from pondernet_tutorial.lightning_module import PonderLitModule
from pondernet_tutorial.methods.pondernet import PonderNet
from pondernet_tutorial.steps.parity import ParityStep


def loaders(n=384):
    train = DataLoader(TensorDataset(*parity(n, 5)), batch_size=64)
    return train, DataLoader(TensorDataset(*parity(128, 6)), batch_size=64)


def plain_module(step=ParityStep, cls=PonderLitModule):
    torch.manual_seed(0)
    return cls(PonderNet(step(8, hidden_size=16), max_steps=5, lambda_p=0.3), lr=0.01)


class Recorded:
    """Stand-in graphs that keep what they did, made where the module picks CUDA's (``graphs_for``)."""

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
    monkeypatch.setattr(fast_path, "graphs_for", lambda device: Recorded())
    return Recorded.made


def train(module, tmp_path, clip=0.05, n=384, **options):
    train, val = loaders(n)
    data = L.LightningDataModule.from_datasets(train.dataset, val.dataset, batch_size=64)
    data.train_dataloader = lambda: train  # in order: the same batches on every path
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        trainer, _ = fit(
            module,
            data,
            **{"max_epochs": 2, **options},
            default_root_dir=tmp_path,
            gradient_clip_val=clip,
            num_sanity_val_steps=0,
            **QUIET,
        )
    assert trainer.gradient_clip_val == clip  # the Trainer's own setting, given back after the fast path
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
    assert graphed.grad_clip == 0.05
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
    module, eager = plain_module(ReadsTheHost), plain_module(ReadsTheHost)
    trainer, said = train(module, tmp_path)
    (graphs,) = one_gpu
    assert graphs.captures == 0 and graphs.replays == 0 and trainer.global_step == 2 * 6
    train(eager, tmp_path / "eager", fast=False)
    for (name, a), (_, b) in zip(eager.named_parameters(), module.named_parameters()):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5, msg=name)  # every step taken, eagerly
    assert len(said) == 1 and "\n" not in said[0], said
    assert re.search(
        r"cannot be replayed from a CUDA graph \(aten\.\S+ at test_fast_path\.py:\d+ in step", said[0]
    )


def test_an_epochs_shorter_last_batch_is_stepped_eagerly_without_a_word(one_gpu, tmp_path):
    """Data whose size is no multiple of the batch end each epoch on a shorter batch: stepped eagerly,
    as it cannot be replayed, and not worth a warning (a reader's ``from_datasets`` cannot drop it)."""
    trainer, said = train(plain_module(), tmp_path, n=384 + 32)
    (graphs,) = one_gpu
    assert said == [] and graphs.captures == 1 and graphs.replays == 2 * 6 - 3
    assert trainer.lightning_module._graphed is None and trainer.global_step == 2 * 7


def test_cuda_graphs_are_picked_on_a_cuda_device_only():
    """What the tests replace: the module's own choice of graphs, CUDA's on a CUDA device, none elsewhere."""
    assert isinstance(fast_path.graphs_for(torch.device("cuda", 0)), fast_path.CudaGraphs)
    assert fast_path.graphs_for(torch.device("cpu")) is None


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


def test_gradient_accumulation_trains_eagerly(one_gpu, tmp_path):
    """Manual optimisation has no gradient accumulation: such a fit stays on the plain path, and
    ``fast=True`` says why in one line."""
    module = plain_module()
    trainer, _ = train(module, tmp_path, accumulate_grad_batches=2)
    assert trainer.lightning_module is module and trainer.global_step == 2 * 3
    with pytest.raises(ValueError, match=r"^fit\(fast=True\) needs no gradient accumulation"):
        train(plain_module(), tmp_path / "asked", accumulate_grad_batches=2, fast=True)


@pytest.mark.parametrize("first, then", [("plain", "fast"), ("fast", "plain")])
def test_a_checkpoint_resumes_on_the_other_path(first, then, monkeypatch, tmp_path):
    """A checkpoint of one path resumes on the other at its step, with Adam's state: one written on a
    GPU resumes on a CPU (where Adam refuses its capture settings), and the other way round."""
    from pondernet_tutorial.checkpointing import FolderCheckpoint

    def on(path):
        monkeypatch.undo()  # the CPU as it is: Adam(capturable=True) refused, no graphs
        if path == "fast":
            monkeypatch.setattr(
                importlib.import_module("torch.optim.adam"),
                "_get_capturable_supported_devices",
                lambda *a, **k: ["cpu"],
            )
            monkeypatch.setattr(fast_path, "graph_blockers", lambda trainer, precision=None: [])
            monkeypatch.setattr(fast_path, "graphs_for", lambda device: StandInGraphs())
        return None if path == "fast" else False

    folder = tmp_path / "checkpoints"
    last = FolderCheckpoint(folder, "last", enable_version_counter=False)
    trainer, _ = train(plain_module(), tmp_path / "first", max_epochs=1, fast=on(first), callbacks=[last])
    assert trainer.global_step == 6
    module = plain_module()
    trainer, _ = train(module, tmp_path / "then", ckpt_path=folder / "last.ckpt", fast=on(then))
    assert trainer.global_step == 12 and trainer.current_epoch == 2
    assert isinstance(trainer.lightning_module, GraphedPonderLitModule) == (then == "fast")
    group = trainer.optimizers[0].param_groups[0]
    assert group["capturable"] == (then == "fast")


def test_a_subclass_trains_its_own_step_eagerly_and_says_so(one_gpu, tmp_path, capsys):
    """A subclass of the plain module has its own training step, which the graph would not replay: on
    a GPU that has everything else it trains eagerly with one line that says so, and ``fast=True``
    names what is missing."""

    class OwnStep(PonderLitModule):
        pass

    module = plain_module(cls=OwnStep)
    trainer, _ = train(module, tmp_path, max_epochs=1)
    assert trainer.lightning_module is module and one_gpu == []
    assert capsys.readouterr().err.splitlines() == [
        "fit: OwnStep trains eagerly: the fast path wraps only the plain PonderLitModule."
    ]
    with pytest.raises(ValueError, match=r"^fit\(fast=True\) needs the plain PonderLitModule, not OwnStep"):
        train(module, tmp_path / "asked", fast=True)


def test_the_capture_keeps_the_learning_rate_it_finds():
    """A resumed run's optimiser comes back with its rate already cut, as a float (Lightning restores
    rates on the CPU): the tensor that the recorded update reads must hold that rate, 0.005 here, not
    the 0.01 Adam was built with."""
    weight = torch.nn.Parameter(torch.zeros(3))
    optimizer = torch.optim.Adam([weight], lr=0.01)
    optimizer.param_groups[0]["lr"] = 0.005
    optimizer.param_groups[0]["initial_lr"] = 0.01  # as a schedule records it
    fast_path.GraphedStep.optimizer_tensors_to_device(SimpleNamespace(optimizer=optimizer))
    rate = optimizer.param_groups[0]["lr"]
    assert torch.is_tensor(rate) and rate.item() == pytest.approx(0.005)


def test_the_fast_path_and_fit_run_on_the_lightning_and_torchmetrics_before_their_newest_options(monkeypatch):
    """Lightning before 2.6 has no Trainer.fit(weights_only=...) and torchmetrics before 1.7 no
    nan_strategy="disable": with either, fit() or every fast module failed where they are built (seen
    with Lightning 2.5.5 and torchmetrics 1.6.0, which the requirements admit). Break: pass
    weights_only=True to fit unconditionally, or build MeanMetric(nan_strategy="disable") alone."""
    from torchmetrics import MeanMetric

    from pondernet_tutorial import fast_path
    from pondernet_tutorial.fitting import as_data

    def fit_before_2_6(
        self, model, train_dataloaders=None, val_dataloaders=None, datamodule=None, ckpt_path=None
    ):
        pass

    def fit_from_2_6(self, model, datamodule=None, ckpt_path=None, weights_only=None):
        pass

    assert as_data(fit_before_2_6) == {} and as_data(fit_from_2_6) == {"weights_only": True}

    class MeanBefore1_7(MeanMetric):  # torchmetrics 1.4 to 1.6: "error", "warn", "ignore" or a number
        def __init__(self, nan_strategy="warn", **kwargs):
            if nan_strategy == "disable":
                raise ValueError(
                    f"Arg nan_strategy should either be a float or one of ... but got {nan_strategy}."
                )
            super().__init__(nan_strategy=nan_strategy, **kwargs)

    monkeypatch.setattr(fast_path, "MeanMetric", MeanBefore1_7)
    assert fast_path.unchecked_mean().nan_strategy == "warn"
    monkeypatch.undo()
    assert fast_path.unchecked_mean().nan_strategy == "disable"


def test_a_compiled_step_stops_the_compile_workers_after_its_first_step(one_gpu, monkeypatch, tmp_path):
    """After the first step of a compiled module on a GPU, torch.compile's pool of compile workers is
    shut down and later compilations run in the process (with the pool up, a step loaded from the
    on-disk cache ran eight times slower on an H200); fit gives the number of workers back at its end.
    On the CPU nothing changes."""
    from torch._inductor import async_compile, config

    shut = []
    monkeypatch.setattr(
        async_compile, "shutdown_compile_workers", lambda: shut.append(config.compile_threads)
    )
    monkeypatch.setattr(fast_path, "on_cuda", lambda device: True)  # the stand-in GPU
    with config.patch(compile_threads=7):  # torch's own override: a monkeypatch would delete the entry
        seen = []

        class Look(L.Callback):
            def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
                seen.append(config.compile_threads)

        module = GraphedPonderLitModule(plain_module().model, lr=0.01)
        module.compiled = True  # as compile=True leaves it, without a compilation this test does not need
        train(module, tmp_path, clip=None, callbacks=[Look()])
        assert shut == [1] and seen[0] == 7 and set(seen[1:]) == {1}
        assert config.compile_threads == 7
        plain = GraphedPonderLitModule(plain_module().model, lr=0.01)  # not compiled: the pool is left alone
        train(plain, tmp_path / "plain", clip=None)
        assert shut == [1]
        monkeypatch.setattr(fast_path, "on_cuda", lambda device: False)  # the CPU: nothing changes
        module = GraphedPonderLitModule(plain_module().model, lr=0.01)
        module.compiled = True
        train(module, tmp_path / "cpu", clip=None)
        assert shut == [1] and config.compile_threads == 7
