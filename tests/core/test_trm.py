"""TRM's halting head against a loop written from its equations (one sample at a time, with autograd),
its exploration's law, its early exit, every step function of the package, and a short training.

Deliberate breaks these tests catch (each was tried):
- the target taken from the next step's answer (``correct[1:]``): test_trm_matches_loop;
- the halting rule ``q_n > 0`` read as ``q_n < 0``: test_trm_matches_loop, test_answer_and_infer_match_loop;
- the exploration turned off in training: test_exploration_follows_trms_law;
- the exploration drawn once per sample instead of at every step: test_exploration_follows_trms_law;
- the exploration drawn on the CPU: test_the_training_step_is_capturable;
- the terms after T(x) kept (``until_halt`` all ones): test_trm_matches_loop;
- halted samples kept in the computation: test_infer_drops_halted_samples.
"""

import pytest
import torch
import torch.nn.functional as F
from tiny_parity import loader, quiet_trainer
from torch import nn

from pondernet_tutorial import ParityStep, PonderLitModule
from pondernet_tutorial.capture_check import capture_hazards
from pondernet_tutorial.data.parity import parity_batch
from pondernet_tutorial.data.pointer import pointer_batch
from pondernet_tutorial.methods.trm import TRMHalting, trm_halt_step
from pondernet_tutorial.steps.base import StepFunction
from pondernet_tutorial.steps.mnist import MNISTPlainStep, MNISTRefineStep, MNISTStep
from pondernet_tutorial.steps.parity import ParityRNNStep
from pondernet_tutorial.steps.pointer import PointerStep


class TableStep(StepFunction):
    """Answers and halting logits read from tables (steps × samples), as parameters."""

    def __init__(self, logits, q):
        super().__init__()
        self.logits, self.q = nn.Parameter(logits), nn.Parameter(q)  # (S, B, C), (S, B)
        self.calls = []

    def encode(self, x):
        return x  # (B,) sample ids

    def initial_state(self, ids):
        return torch.zeros_like(ids)  # the step counter

    def step(self, ids, n):
        self.calls.append(len(ids))
        return self.logits[n, ids], self.q[n, ids], n + 1


def trm_loop(step_function, x, y, n_steps, weight, minimum=None):
    """TRM's head from its equations, one sample at a time: the step it halts at (the first with
    σ(q_n) > 1/2, not before the exploration's minimum m_n), the answer there, and its two sums over
    n ≤ T of −log softmax(ŷ_n)_y and −[c_n log σ(q_n) + (1 − c_n) log(1 − σ(q_n))], c_n = 1[ŷ_n right]."""
    results = []
    for b in range(len(y)):
        context = step_function.encode(x[b : b + 1])
        h = step_function.initial_state(context)
        task, halting = 0.0, 0.0
        for n in range(1, n_steps + 1):
            answer, q, h = step_function.step(context, h)
            right = 1.0 if answer[0].argmax().item() == y[b].item() else 0.0
            task = task - torch.log_softmax(answer[0], -1)[y[b]]
            sigma = torch.sigmoid(q[0])
            halting = halting - (right * torch.log(sigma) + (1.0 - right) * torch.log(1.0 - sigma))
            allowed = minimum is None or n >= minimum[n - 1][b]
            if (sigma.item() > 0.5 and allowed) or n == n_steps:
                break
        results.append({"T": n, "answer": answer[0], "task": task, "halting": halting})
    return results


def table_trm(steps=6, batch=24, classes=3, seed=0, **options):
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(steps, batch, classes, generator=g) * 2
    q = torch.randn(steps, batch, generator=g) * 2 - 1  # some halt early, some never
    return TRMHalting(TableStep(logits, q), max_steps=steps, halting_bias=None, **options), torch.arange(
        batch
    )


def parity_trm(**options):
    torch.manual_seed(1)
    step = ParityStep(n_elements=8, hidden_size=16)
    nn.init.normal_(step.halting_head.weight, std=1.5)  # halting logits that cross 0 at various steps
    return TRMHalting(step, max_steps=6, halting_bias=0.0, **options), parity_batch(32, 8, (1, 8))[0]


MINIMA = {  # the exploration's minima m_n given to the loss: none, and a table with some of them
    "none": lambda steps, batch: torch.zeros(steps, batch, dtype=torch.long),
    "table": lambda steps, batch: (
        torch.randint(2, steps + 1, (steps, batch)) * (torch.rand(steps, batch) < 0.4)
    ),
}


@pytest.mark.parametrize("minimum", sorted(MINIMA))
@pytest.mark.parametrize("weight", [0.5, 1.0])
@pytest.mark.parametrize("make", [table_trm, parity_trm])
def test_trm_matches_loop(make, weight, minimum):
    """The full unroll's loss, its terms, its halting step and its gradients are the loop's."""
    trm, x = make(halting_weight=weight)
    trm.train()
    n_steps = trm.max_steps
    y = torch.randint(0, 2, (len(x),))
    table = MINIMA[minimum](n_steps, len(x))
    trm.exploration_minimum = lambda q: table  # the draws of training, fixed for the loop
    trm.zero_grad()
    losses = trm.loss(trm(x), y)
    losses["loss"].backward()
    grads = {k: p.grad.clone() for k, p in trm.named_parameters()}
    trm.zero_grad()
    reference = trm_loop(trm.step_function, x, y, n_steps, weight, table)
    halt = torch.tensor([r["T"] for r in reference])
    assert 1 < halt.float().mean() < n_steps and halt.unique().numel() > 2  # T(x) varies
    task = torch.stack([r["task"] for r in reference]).mean()
    halting = torch.stack([r["halting"] for r in reference]).mean()
    torch.testing.assert_close(losses["task"], task)
    torch.testing.assert_close(losses["halting"], halting)
    torch.testing.assert_close(losses["loss"], task + weight * halting)
    assert torch.equal(losses["weights"], F.one_hot(halt - 1, n_steps).T.float())
    (task + weight * halting).backward()
    for name, parameter in trm.named_parameters():
        torch.testing.assert_close(grads[name], parameter.grad, rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("make", [table_trm, parity_trm])
def test_answer_and_infer_match_loop(make):
    """Evaluation halts at the first σ(q_n) > 1/2 over eval_max_steps steps, with no exploration (p = 1),
    on the full unroll and in the early exit."""
    trm, x = make(exploration=1.0)
    trm.eval()
    y = torch.randint(0, 2, (len(x),))
    with torch.no_grad():
        out = trm(x)
        prediction, halt_step = trm.answer(out)
        early, early_step = trm.infer(x)
        losses = trm.loss(out, y)
        reference = trm_loop(trm.step_function, x, y, trm.eval_steps, 0.5)
    halt = torch.tensor([r["T"] for r in reference])
    assert halt.unique().numel() > 2
    assert torch.equal(halt_step, halt) and torch.equal(early_step, halt)
    assert torch.equal(losses["weights"].argmax(0) + 1, halt)  # the loss of evaluation explores nothing
    assert torch.equal(trm.weights(out), F.one_hot(halt - 1, trm.eval_steps).T.float())
    torch.testing.assert_close(prediction, torch.stack([r["answer"] for r in reference]))
    torch.testing.assert_close(early, prediction)


def test_evaluation_reads_eval_max_steps():
    """Beyond training's N: eval_max_steps bounds evaluation's halting step, N bounds training's."""
    g = torch.Generator().manual_seed(0)
    q = torch.full((7, 4), -1.0)
    q[5, 0] = 1.0  # sample 0 halts at step 6, the others never
    trm = TRMHalting(
        TableStep(torch.randn(7, 4, 3, generator=g), q), max_steps=3, eval_max_steps=7, halting_bias=None
    )
    trm.eval()
    with torch.no_grad():
        assert trm.infer(torch.arange(4))[1].tolist() == [6, 7, 7, 7]
        assert trm.answer(trm(torch.arange(4)))[1].tolist() == [6, 7, 7, 7]
        trm.train()
        assert trm.loss(trm(torch.arange(4)), torch.zeros(4, dtype=torch.long))["weights"][-1].all()  # T = 3


def test_exploration_follows_trms_law():
    """Each step draws afresh: with probability p a minimum k ~ U{2..N}, so a sample that wants to halt
    is held at step n with probability v_n = p (N − n) / (N − 1), and P(T = n) = (1 − v_n) Π_{j<n} v_j."""
    n_steps, p, batch = 5, 0.6, 200_000
    wants_to_halt = torch.full((n_steps, batch), 3.0)  # σ(q_n) > 1/2 at every step
    trm = TRMHalting(
        TableStep(torch.zeros(n_steps, batch, 2), wants_to_halt), n_steps, exploration=p, halting_bias=None
    )
    ids, y = torch.arange(batch), torch.zeros(batch, dtype=torch.long)
    trm.train()
    with torch.no_grad():
        halt_step = trm.loss(trm(ids), y)["weights"].argmax(0)
    frequency = torch.bincount(halt_step, minlength=n_steps).double() / batch
    held, expected = 1.0, []
    for n in range(1, n_steps + 1):
        v = p * (n_steps - n) / (n_steps - 1)
        expected.append(held * (1 - v))
        held *= v
    assert abs(sum(expected) - 1) < 1e-12
    torch.testing.assert_close(frequency, torch.tensor(expected, dtype=torch.float64), atol=4e-3, rtol=0)
    trm.exploration = 0.0  # no exploration: every sample halts at once
    with torch.no_grad():
        assert (trm.loss(trm(ids), y)["weights"][0] == 1).all()


def test_infer_drops_halted_samples():
    q = torch.tensor([[2.0, -1.0, -1.0], [0.5, -1.0, 3.0], [0.5, -1.0, 0.5]])
    step = TableStep(torch.zeros(3, 3, 2), q)
    _, halt_step = TRMHalting(step, max_steps=3, halting_bias=None).infer(torch.arange(3))
    assert halt_step.tolist() == [1, 3, 2]
    assert step.calls == [3, 2, 1]  # sample 0 leaves after step 1, sample 2 after step 2


def test_halt_step_directly():
    q = torch.tensor([[-1.0, 0.0, 2.0], [1.0, 0.5, 2.0], [1.0, -3.0, 2.0]])  # (N=3, B=3)
    assert trm_halt_step(q).tolist() == [2, 2, 1]  # q = 0 is σ(q) = 1/2: not above, no halt
    assert trm_halt_step(q, torch.tensor([[0, 0, 3], [3, 0, 3], [0, 0, 3]])).tolist() == [3, 2, 3]


STEPS = {  # every step function of the package, small, and a batch of its inputs
    "mnist_mlp": (lambda: MNISTStep(hidden_size=16, embedding_size=16), lambda: torch.rand(8, 1, 28, 28), 10),
    "mnist_refine": (lambda: MNISTRefineStep(hidden_size=16), lambda: torch.rand(8, 1, 28, 28), 10),
    "mnist_cnn": (lambda: MNISTPlainStep(embedding_size=16), lambda: torch.rand(8, 1, 28, 28), 10),
    "parity_gru": (
        lambda: ParityStep(n_elements=8, hidden_size=16),
        lambda: parity_batch(8, 8, (1, 8))[0],
        2,
    ),
    "parity_rnn": (
        lambda: ParityRNNStep(n_elements=8, hidden_size=16),
        lambda: parity_batch(8, 8, (1, 8))[0],
        2,
    ),
    "pointer": (lambda: PointerStep(n_slots=8), lambda: pointer_batch(8, 8, (1, 4))[0], 8),
}


@pytest.mark.parametrize("name", sorted(STEPS))
def test_every_step_function(name):
    """Training's unroll and loss backpropagate, and the early exit is the full unroll's answer; the
    plain CNN has no halting layer to start at −5 (its logit is always 0: it never halts before N)."""
    make, inputs, classes = STEPS[name]
    bias = None if name == "mnist_cnn" else -5.0
    trm = TRMHalting(make(), max_steps=4, halting_bias=bias)
    x, y = inputs(), torch.randint(0, classes, (8,))
    trm.loss(trm(x), y)["loss"].backward()
    assert all(p.grad is not None for p in trm.parameters() if p.requires_grad)
    trm.eval()
    with torch.no_grad():
        prediction, halt_step = trm.answer(trm(x))
        early, early_step = trm.infer(x)
    assert torch.equal(early_step, halt_step) and (halt_step == 4).all()  # σ(q) < 1/2 everywhere at first
    torch.testing.assert_close(early, prediction)


def test_the_default_bias_and_bad_arguments():
    step = ParityStep(n_elements=8, hidden_size=16)
    TRMHalting(step)
    assert (step.halting_head.bias == -5.0).all()  # TRM's code starts every Q bias at −5
    with pytest.raises(ValueError, match="halting_head"):
        TRMHalting(MNISTPlainStep())
    for options, message in [
        ({"exploration": -0.1}, "exploration"),
        ({"exploration": 1.5}, "exploration"),
        ({"halting_weight": -1.0}, "halting_weight"),
        ({"max_steps": 0}, "max_steps"),
        ({"max_steps": 4, "eval_max_steps": 3}, "eval_max_steps"),
    ]:
        with pytest.raises(ValueError, match=message):
            TRMHalting(ParityStep(n_elements=8, hidden_size=16), **options)


def test_the_training_step_is_capturable():
    """Forward, loss (with exploration) and backward on PyTorch's meta device, standing in for a GPU: no
    host synchronisation, no data-dependent shape, random numbers drawn on the device."""
    trm = TRMHalting(ParityStep(n_elements=8, hidden_size=16), max_steps=4).to("meta").train()
    x, y = (t.to("meta") for t in parity_batch(32, 8, (1, 8))[:2])
    assert capture_hazards(lambda: trm.loss(trm(x), y)["loss"].backward(), "meta") == []


@pytest.mark.slow
def test_training_lowers_the_loss():
    """A few epochs of tiny parity through Lightning lower evaluation's loss (no exploration there)."""
    torch.manual_seed(0)
    module = PonderLitModule(TRMHalting(ParityStep(n_elements=8, hidden_size=16), max_steps=4), lr=1e-2)
    x, y = next(iter(loader(64, 64, seed=3)))

    def loss():
        module.eval()
        with torch.no_grad():
            value = module.unroll_and_loss(x, y)[1]["loss"].item()
        module.train()
        return value

    before = loss()
    quiet_trainer(max_epochs=8, num_sanity_val_steps=0).fit(module, loader(128, 32), loader(64, 32, seed=1))
    assert loss() < 0.9 * before  # 7.4 to 5.9 on 2 cores, seed 0
