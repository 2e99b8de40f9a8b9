"""The training engine: a step with fixed shapes that never waits for the device.

* the whole training step compiles into one graph (``fullgraph=True``) for every method: a graph break
  or a shape that depends on the data fails the test;
* the module's step values (unroll, loss, the expected accuracy and steps) and their backward run no
  operation that makes the host wait (``.item()``, ``nonzero``, a boolean index); the run machinery's
  whole Lightning step, metrics included, is tested in tests/runs;
* the plain module logs its means once an epoch.

Deliberate breaks these tests catch (each was tried):
- a boolean index in ``act_weights`` (``eta_before[before == 0] = 0``): test_no_host_sync_in_the_step_values.

The CUDA-graph path is tested in tests/runs/test_cuda_graph.py.
"""

import pytest
import torch
from tiny_parity import quiet_trainer
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils.data import DataLoader, TensorDataset

from pondernet_tutorial import ACT, FixedSteps, ParityStep, PonderLitModule, PonderNet

METHODS = {  # name: (method, options)
    "pondernet": (PonderNet, {"max_steps": 5, "lambda_p": 0.3}),
    "pondernet-paper": (
        PonderNet,
        {"max_steps": 5, "lambda_p": 0.3, "train_epsilon": 0.05, "eval_max_steps": 8},
    ),
    "pondernet-frozen": (PonderNet, {"max_steps": 5, "lambda_p": 0.3, "learn_halting": False}),
    "act": (ACT, {"max_steps": 5, "tau": 0.01, "halting_bias": -1.0, "eval_max_steps": 8}),
    "fixed": (FixedSteps, {"max_steps": 3}),
}


def parity_module(name, seed=0, **kwargs):
    torch.manual_seed(seed)
    method, options = METHODS[name]
    return PonderLitModule(method(ParityStep(n_elements=8, hidden_size=16), **options), **kwargs)


def parity_batch(n=64, seed=1):
    g = torch.Generator().manual_seed(seed)
    x = torch.randint(-1, 2, (n, 8), generator=g).float()
    return x, ((x == 1).sum(1) % 2).long()


@pytest.mark.slow
@pytest.mark.parametrize("method", METHODS)
def test_training_step_compiles_whole(method):
    """Forward, loss and backward of a training batch as one graph: ``fullgraph=True`` raises on a
    graph break, and with ``dynamic=False`` a shape that depends on the data cannot be traced."""
    torch._dynamo.reset()
    module = parity_module(method).train()
    x, y = parity_batch()

    def step(x, y):
        values = module.step_values(x, y)
        return values["loss"], values["acc"], values["expected_steps"]

    compiled = torch.compile(step, fullgraph=True, dynamic=False)
    loss, acc, steps = compiled(x, y)
    loss.backward()
    eager_loss, eager_acc, eager_steps = step(x, y)
    torch.testing.assert_close(loss, eager_loss, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(acc, eager_acc)
    torch.testing.assert_close(steps, eager_steps, rtol=1e-4, atol=1e-5)
    assert module.model.step_function.cell.weight_ih.grad.abs().sum() > 0  # the backward ran
    with torch.no_grad():  # validation's unroll (the evaluation budget) compiles whole too
        module.eval()
        evaluation = torch.compile(lambda x, y: module.unroll_and_loss(x, y)[1], fullgraph=True)
        torch.testing.assert_close(evaluation(x, y)["loss"], module.unroll_and_loss(x, y)[1]["loss"])


SYNCING_OPS = ("_local_scalar_dense", "nonzero", "masked_select", "is_nonzero", "unique", "item")


class SyncWatch(TorchDispatchMode):
    """Records every operation that makes the host wait for a value from the device."""

    def __init__(self):
        super().__init__()
        self.seen = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = func.overloadpacket.__name__
        if name in SYNCING_OPS:
            self.seen.append(name)
        if name in ("index", "index_put", "index_put_") and any(
            isinstance(i, torch.Tensor) and i.dtype == torch.bool for i in (args[1] if len(args) > 1 else [])
        ):
            self.seen.append("boolean index")
        return func(*args, **(kwargs or {}))


@pytest.mark.parametrize("method", METHODS)
def test_no_host_sync_in_the_step_values(method):
    """Forward, loss and the expected metrics of a training batch, and their backward, run no operation
    that would make the host wait for a CUDA device (checked on the CPU through the dispatcher)."""
    module = parity_module(method).train()
    x, y = parity_batch(256)
    watch = SyncWatch()
    with watch:
        values = module.step_values(x, y)
        values["loss"].backward()
    assert watch.seen == []
    assert values["acc"].shape == (256,) and module.model.step_function.cell.weight_ih.grad is not None


def fit(module, epochs=2, **trainer_options):
    x, y = parity_batch(512, seed=5)
    vx, vy = parity_batch(128, seed=6)
    trainer = quiet_trainer(max_epochs=epochs, num_sanity_val_steps=0, **trainer_options)
    trainer.fit(
        module,
        DataLoader(TensorDataset(x, y), batch_size=64),
        DataLoader(TensorDataset(vx, vy), batch_size=64),
    )
    return trainer


def test_mnist_step_computes_the_mlp_of_the_embedding_and_the_state():
    """The embedding's share of the first layer is computed once (in encode); each step adds the
    state's share: the same h_{n+1} = MLP([e, h_n]) as the concatenation."""
    from pondernet_tutorial.steps.mnist import MNISTStep

    torch.manual_seed(0)
    step = MNISTStep().eval()
    x, h = torch.rand(8, 1, 28, 28), torch.randn(8, 64)
    expected = step.mlp(torch.cat([step.embedding(x), h], dim=1))
    torch.testing.assert_close(step.step(step.encode(x), h)[2], expected)


def test_metrics_are_logged_once_an_epoch():
    """No ``self.log`` in a training step (Lightning's bookkeeping of each call costs more than the
    step's metrics): the means are logged at the end of the epoch."""
    module = parity_module("pondernet")
    calls = []
    log = module.log
    module.log = lambda name, *args, **kwargs: calls.append(name) or log(name, *args, **kwargs)
    trainer = fit(module, epochs=2)
    train_calls = [name for name in calls if name.startswith("train/")]
    assert len(train_calls) == 2 * len(module.train_metrics)  # once per metric and epoch, 8 batches each
    assert trainer.callback_metrics["train/acc"] > 0 and "val/acc" in trainer.callback_metrics
