"""The training engine: a step with fixed shapes that never waits for the device.

* the halting rules decide all steps at once exactly as the early-exit loop does, on the same coins;
* ACT's training unroll (all steps, masked after N(x)) has the loss and gradients of its early exit;
* the whole training step compiles into one graph (``fullgraph=True``) for every method: a graph break
  or a shape that depends on the data fails the test;
* a Lightning training step, metrics and logging included, runs no operation that makes the host wait
  (``.item()``, ``nonzero``, a boolean index);
* a run with ``compile=True`` (the shipped experiments' default) trains.

Deliberate breaks these tests catch (each was tried):
- ACT's fit_forward going back to the early-exit unroll: test_training_step_compiles_whole (graph
  break) and test_no_host_sync_in_a_training_step;
- the Bernoulli rule's vectorised decisions reading the coins of the next step (``uniforms.T[1:]``):
  test_rules_decide_at_once_as_the_loop_does;
- ACT's halting decided at once with ``>`` instead of the loop's ``≥``:
  test_rules_decide_at_once_as_the_loop_does and test_act_full_unroll_has_the_early_exits_loss_and_gradients;
- a NaN check in the metrics (``nan_strategy="warn"``): test_no_host_sync_in_a_training_step.

The CUDA-graph path is tested in test_cuda_graph.py.
"""

import lightning as L
import pytest
import torch
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils.data import DataLoader, TensorDataset

from pondernet_tutorial import PonderLitModule
from pondernet_tutorial.methods.act import ACT, ACTHalting
from pondernet_tutorial.methods.base import halting_steps, unroll
from pondernet_tutorial.methods.pondernet import BernoulliHalting, ThresholdHalting
from pondernet_tutorial.steps.base import StepFunction

METHODS = {  # name: (method, options)
    "pondernet": ("pondernet", {"max_steps": 5, "lambda_p": 0.3}),
    "pondernet-paper": (
        "pondernet",
        {"max_steps": 5, "lambda_p": 0.3, "train_epsilon": 0.05, "eval_max_steps": 8},
    ),
    "pondernet-frozen": ("pondernet", {"max_steps": 5, "lambda_p": 0.3, "learn_halting": False}),
    "act": ("act", {"max_steps": 5, "tau": 0.01, "halting_bias": -1.0, "eval_max_steps": 8}),
    "fixed": ("fixed", {"max_steps": 3}),
}


class Replay(StepFunction):
    """A step function that replays given halting logits, so that both ways see the same numbers."""

    def __init__(self, halting_logits):
        super().__init__()
        self.z = halting_logits  # (N, B)
        self.head = nn.Linear(1, 1)

    def encode(self, x):
        return torch.arange(x.shape[0])  # the rows' indices travel as the context

    def initial_state(self, rows):
        return torch.zeros(rows.shape[0], dtype=torch.long)

    def step(self, rows, n):
        z = self.z[n[0], rows]  # this step's logits of the samples still running
        return torch.zeros(len(rows), 2), z, n + 1


@pytest.mark.parametrize("name", ["bernoulli", "threshold", "act"])
def test_rules_decide_at_once_as_the_loop_does(name):
    torch.manual_seed(0)
    z = torch.randn(7, 500) * 2 - 1  # (N, B)
    rules = {
        "bernoulli": lambda: BernoulliHalting(torch.Generator().manual_seed(3)),
        "threshold": lambda: ThresholdHalting(0.6),
        "act": lambda: ACTHalting(0.05),
    }
    _, _, early = unroll(Replay(z), torch.zeros(500, 1), 7, rules[name]())  # the early-exit loop
    at_once = halting_steps(rules[name](), z)  # tensor operations only
    assert torch.equal(early, at_once)
    assert early.float().std() > 0.5  # the steps vary: the agreement is not trivial


def parity_module(name, seed=0, **kwargs):
    torch.manual_seed(seed)
    method, options = METHODS[name]
    return PonderLitModule(
        "parity_gru",
        2,
        method=method,
        step_options={"n_elements": 8, "hidden_size": 16},
        method_options=options,
        **kwargs,
    )


def parity_batch(n=64, seed=1):
    g = torch.Generator().manual_seed(seed)
    x = torch.randint(-1, 2, (n, 8), generator=g).float()
    return x, ((x == 1).sum(1) % 2).long()


def test_act_full_unroll_has_the_early_exits_loss_and_gradients():
    torch.manual_seed(0)
    from pondernet_tutorial.steps.parity import ParityStep

    act = ACT(ParityStep(8, hidden_size=16), max_steps=6, tau=0.05, halting_bias=-1.0)
    x, y = parity_batch(200)
    grads = []
    for forward in (act.forward, act.fit_forward):  # early exit, full unroll masked after N(x)
        act.zero_grad()
        out = forward(x)
        losses = act.loss(out, y)
        losses["loss"].backward()
        grads.append({k: p.grad.clone() for k, p in act.named_parameters()})
        if forward == act.forward:
            early, early_losses = out, losses
    full, full_losses = out, losses
    assert torch.equal(early.halt_step, full.halt_step)
    assert early.halt_step.float().std() > 0.3  # N(x) varies over the batch
    torch.testing.assert_close(early.prediction, full.prediction)
    for name in ("loss", "task", "ponder_cost"):
        torch.testing.assert_close(early_losses[name], full_losses[name])
    for name in grads[0]:
        torch.testing.assert_close(grads[0][name], grads[1][name], rtol=1e-5, atol=1e-7)


@pytest.mark.slow
@pytest.mark.parametrize("method", METHODS)
def test_training_step_compiles_whole(method):
    """Forward, loss and backward of a training batch as one graph: ``fullgraph=True`` raises on a
    graph break, and with ``dynamic=False`` a shape that depends on the data cannot be traced."""
    torch._dynamo.reset()
    module = parity_module(method).train()
    x, y = parity_batch()

    def step(x, y):
        values = module._training_values(x, y)
        return values["loss"], values["acc"], values["halt_step"]

    compiled = torch.compile(step, fullgraph=True, dynamic=False)
    loss, acc, halt_step = compiled(x, y)
    loss.backward()
    eager_loss, eager_acc, eager_steps = step(x, y)
    torch.testing.assert_close(loss, eager_loss, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(acc, eager_acc)
    torch.testing.assert_close(halt_step, eager_steps, rtol=1e-4, atol=1e-5)
    assert module.model.step_function.cell.weight_ih.grad.abs().sum() > 0  # the backward ran
    with torch.no_grad():  # validation's unroll (the evaluation budget) compiles whole too
        module.eval()
        evaluation = torch.compile(lambda x, y: module._fit_losses(x, y, evaluation=True)[1], fullgraph=True)
        torch.testing.assert_close(
            evaluation(x, y)["loss"], module._fit_losses(x, y, evaluation=True)[1]["loss"]
        )


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
        if name == "index" and any(
            isinstance(i, torch.Tensor) and i.dtype == torch.bool for i in (args[1] if len(args) > 1 else [])
        ):
            self.seen.append("boolean index")
        return func(*args, **(kwargs or {}))


@pytest.mark.parametrize("method", METHODS)
def test_no_host_sync_in_a_training_step(method):
    """A whole Lightning training step (forward, loss, expected metrics, logging) runs no operation
    that would make the host wait for a CUDA device (checked on the CPU through the dispatcher)."""
    module = parity_module(method)
    watch = SyncWatch()
    step = module.training_step

    def watched(batch, batch_idx):
        with watch:
            return step(batch, batch_idx)

    module.training_step = watched
    x, y = parity_batch(256)
    trainer = L.Trainer(
        accelerator="cpu",
        max_epochs=1,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    trainer.fit(module, DataLoader(TensorDataset(x, y), batch_size=64))
    assert watch.seen == []
    assert trainer.callback_metrics["train/acc"] > 0  # the step ran and logged


def fit(module, epochs=2, **trainer_options):
    x, y = parity_batch(512, seed=5)
    vx, vy = parity_batch(128, seed=6)
    trainer = L.Trainer(
        accelerator="cpu",
        max_epochs=epochs,
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        enable_checkpointing=False,
        num_sanity_val_steps=0,
        **trainer_options,
    )
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
    assert len(train_calls) == 2 * len(module.metrics["fit"])  # once per metric and epoch, 8 batches each
    assert trainer.callback_metrics["train/acc"] > 0 and "val/acc" in trainer.callback_metrics
