"""HRM's halting head against a loop written from the paper's equations (Wang et al. 2025, §2), on
random step-function outputs and on the package's step functions; its early exit, its exploration and
a training run.

The reference (:func:`hrm_loop`) runs one sample at a time, as HRM's code runs one segment at a time:
at each step it reads the halt and continue logits, decides to halt, and computes the continue target
by running the next step again, with no gradient.

Deliberate breaks these tests catch (each was tried):
- the continue target at the last step bootstrapped from max(halt, continue) of step N + 1, not halt
  alone: test_loss_matches_the_loop;
- the continue target not detached (``q_next.detach()`` removed): test_the_gradient_matches_the_loop;
- the halt target 1[ŷ_n ≠ y]: test_loss_matches_the_loop;
- halting on ``q^halt < q^cont``: test_loss_matches_the_loop, test_infer_matches_the_loop_and_answer;
- the exploration's minimum ignored in training (``minimum=None``): test_loss_matches_the_loop;
- the exploration drawing k from {1..N} (``randint(1, …)``): test_exploration_draws_its_minimum;
- steps after T(x) counted in the loss (``taken`` all ones): test_loss_matches_the_loop;
- ``infer`` keeping halted samples in the batch (no ``select_rows``): test_infer_drops_halted_samples.
"""

import math

import pytest
import torch
from torch import nn

from pondernet_tutorial.methods.act import ACT
from pondernet_tutorial.methods.hrm import HRMHalting
from pondernet_tutorial.steps.base import StepFunction
from pondernet_tutorial.steps.mnist import MNISTPlainStep, MNISTRefineStep, MNISTStep
from pondernet_tutorial.steps.parity import ParityRNNStep, ParityStep
from pondernet_tutorial.steps.pointer import PointerStep


class TableStep(StepFunction):
    """Random step-function outputs: step n of sample b reads a random feature vector F[n, b] (the
    halting head's input) and random class logits Y[n, b], both trainable."""

    def __init__(self, steps, batch, classes=3, features=5, seed=0):
        super().__init__()
        g = torch.Generator().manual_seed(seed)
        self.F = nn.Parameter(torch.randn(steps, batch, features, generator=g))
        self.Y = nn.Parameter(2 * torch.randn(steps, batch, classes, generator=g))
        self.halting_head = nn.Linear(features, 1)

    def encode(self, ids):
        return ids  # (B,) sample ids

    def initial_state(self, ids):
        return torch.zeros_like(ids)  # the step counter

    def step(self, ids, n):
        return self.Y[n, ids], self.halting_head(self.F[n, ids]).squeeze(1), n + 1


class GRUStep(StepFunction):
    def __init__(self, d=6, hidden=12, classes=3):
        super().__init__()
        self.hidden = hidden
        self.cell = nn.GRUCell(d, hidden)
        self.output_head = nn.Linear(hidden, classes)
        self.halting_head = nn.Linear(hidden, 1)
        self.calls = []

    def initial_state(self, context):
        return context.new_zeros(context.shape[0], self.hidden)

    def step(self, context, h):
        self.calls.append(context.shape[0])
        h = self.cell(context, h)
        return self.output_head(h), self.halting_head(h).squeeze(1), h


def bce(logit, target):
    """Binary cross-entropy of σ(logit) against a target in [0, 1], written out (log σ(−z) = log(1 − σ(z)))."""
    log_sigmoid = nn.functional.logsigmoid
    return -(target * log_sigmoid(logit) + (1 - target) * log_sigmoid(-logit))


def hrm_loop(step_function, x, y, max_steps, weight, minimum=None):
    """The paper's ACT, one sample at a time: per sample, its halting step T, the three loss terms
    summed over its steps 1..T, and its step-T prediction. ``minimum``: each sample's k (default 1)."""
    results = []
    for b in range(len(y)):
        xb = x[b : b + 1]
        context = step_function.encode(xb)
        h = step_function.initial_state(context)
        k = 1 if minimum is None else int(minimum[b])
        task = halt = cont = 0.0
        for m in range(1, max_steps + 1):
            y_m, q_m, h = step_function.step(context, h)
            q_halt, q_cont = q_m[0, 0], q_m[0, 1]
            correct = float(y_m[0].argmax().item() == y[b].item())  # Ĝ_halt = 1[ŷ^m = y]
            with torch.no_grad():  # the next segment, run again for the target
                _, q_next, _ = step_function.step(context, h)
            if m >= max_steps:  # Ĝ_cont = Q̂_halt^{m+1} at the limit
                target = torch.sigmoid(q_next[0, 0])
            else:  # else max(Q̂_halt^{m+1}, Q̂_cont^{m+1})
                target = torch.sigmoid(torch.maximum(q_next[0, 0], q_next[0, 1]))
            task = task + nn.functional.cross_entropy(y_m, y[b : b + 1])
            halt = halt + bce(q_halt, torch.tensor(correct))
            cont = cont + bce(q_cont, target)
            if m >= max_steps or (q_halt.item() > q_cont.item() and m >= k):
                break
        total = task + weight * (halt + cont)
        results.append({"T": m, "task": task, "halt": halt, "cont": cont, "loss": total, "answer": y_m[0]})
    return results


def spy_on_minimum(method):
    """Record the exploration's minima that ``method.loss`` draws."""
    drawn = []
    draw = method.minimum_steps

    def recorded(batch, device):
        drawn.append(draw(batch, device))
        return drawn[-1]

    method.minimum_steps = recorded
    return drawn


def randomize_head(method, scale=3.0, seed=1):
    g = torch.Generator().manual_seed(seed)
    head = method.step_function.halting_head
    with torch.no_grad():
        head.weight.copy_(scale * torch.randn(head.weight.shape, generator=g))
        head.bias.copy_(torch.randn(head.bias.shape, generator=g))


def table_case(max_steps=6, batch=40, exploration=0.5, halting_weight=0.5, seed=0, eval_max_steps=None):
    step = TableStep(max(max_steps + 1, eval_max_steps or 0), batch, seed=seed)
    method = HRMHalting(
        step, max_steps, halting_weight=halting_weight, exploration=exploration, eval_max_steps=eval_max_steps
    )
    randomize_head(method, seed=seed + 1)
    y = torch.randint(0, 3, (batch,), generator=torch.Generator().manual_seed(seed + 2))
    return method, torch.arange(batch), y


@pytest.mark.parametrize("exploration", [0.0, 0.5, 1.0])
@pytest.mark.parametrize("source", ["table", "gru"])
def test_loss_matches_the_loop(source, exploration):
    torch.manual_seed(0)
    if source == "table":
        method, x, y = table_case(exploration=exploration)
    else:
        method = HRMHalting(GRUStep(), max_steps=6, halting_weight=1.0, exploration=exploration)
        randomize_head(method)
        x, y = 2 * torch.randn(40, 6), torch.randint(0, 3, (40,))
    drawn = spy_on_minimum(method)
    losses = method.loss(method(x), y)
    minimum = drawn[0]
    reference = hrm_loop(method.step_function, x, y, 6, method.halting_weight, minimum)
    T = torch.tensor([r["T"] for r in reference])
    assert 1 < len(set(T.tolist())) and T.min() < 6  # the halting step varies, and some halt early
    if exploration == 1.0:
        assert (minimum >= 2).all() and (T >= minimum).all()
    weights = losses["weights"]
    assert torch.equal(weights.argmax(0) + 1, T) and torch.equal(weights.sum(0), torch.ones(40))
    for term, key in (("task", "task"), ("halt", "q_halt"), ("cont", "q_continue"), ("loss", "loss")):
        expected = torch.stack([r[term] for r in reference]).mean()
        torch.testing.assert_close(losses[key], expected, rtol=1e-5, atol=1e-5, msg=key)


def test_the_gradient_matches_the_loop():
    """The full unroll, masked after T(x), backpropagates what the per-sample loop does: the targets
    c_n and G_n carry no gradient, and the steps after T none."""
    method, x, y = table_case(exploration=0.0)
    grads = []
    for way in ("unroll", "loop"):
        method.zero_grad()
        if way == "unroll":
            loss = method.loss(method(x), y)["loss"]
        else:
            loss = torch.stack([r["loss"] for r in hrm_loop(method.step_function, x, y, 6, 0.5)]).mean()
        loss.backward()
        grads.append({k: p.grad.clone() for k, p in method.named_parameters()})
    for name in grads[0]:
        torch.testing.assert_close(grads[0][name], grads[1][name], rtol=1e-5, atol=1e-6, msg=name)


def test_infer_matches_the_loop_and_answer():
    method, x, y = table_case(batch=50, eval_max_steps=9)
    method.eval()
    with torch.no_grad():
        out = method(x)
        prediction, halt_step = method.answer(out)
        early, early_step = method.infer(x)
        reference = hrm_loop(method.step_function, x, y, 9, 0.5)  # no exploration
    assert out.logits.shape[0] == 9 and out.halting_logits.shape[0] == 9  # N + 1 = 7 ≤ 9 steps
    assert torch.equal(early_step, halt_step)
    assert halt_step.tolist() == [r["T"] for r in reference] and len(set(halt_step.tolist())) > 2
    torch.testing.assert_close(early, prediction)
    torch.testing.assert_close(prediction, torch.stack([r["answer"] for r in reference]))
    torch.testing.assert_close(method.weights(out).argmax(0) + 1, halt_step)


def test_infer_drops_halted_samples():
    torch.manual_seed(0)
    step = GRUStep()
    method = HRMHalting(step, max_steps=6)
    randomize_head(method)
    method.eval()
    with torch.no_grad():
        _, halt_step = method.infer(2 * torch.randn(50, 6))
    still_running = [int((halt_step >= n).sum()) for n in range(1, int(halt_step.max()) + 1)]
    assert step.calls == still_running and still_running[-1] < 50


def test_hrms_initialisation_runs_every_step():
    """HRM's code starts both logits at −5 with zero weights: halt never beats continue, so every sample
    runs N steps, and the halt logit starts at 'wrong' (σ(−5) ≈ 0.007)."""
    method = HRMHalting(GRUStep(), max_steps=5).eval()
    head = method.step_function.halting_head
    assert (head.weight == 0).all() and (head.bias == -5.0).all() and head.out_features == 2
    with torch.no_grad():
        _, halt_step = method.infer(torch.randn(8, 6))
    assert (halt_step == 5).all()


def test_the_last_steps_target_reads_a_step_beyond_the_limit():
    """Training's unroll holds step N + 1's halting logits, computed without gradient, and the target
    of step N is σ of its halt logit."""
    method, x, y = table_case(max_steps=4)
    out = method(x)
    assert out.logits.shape[0] == 4 and out.halting_logits.shape[0] == 5
    params = list(method.parameters())
    grads = torch.autograd.grad(out.halting_logits[4].sum(), params, allow_unused=True, retain_graph=True)
    assert all(g is None or not g.any() for g in grads)  # step N + 1 built no graph
    assert torch.autograd.grad(out.halting_logits[3].sum(), params[0])[0].any()
    method.eval()
    assert method(x).halting_logits.shape[0] == 5  # also for validation's loss at eval_max_steps = N


def test_exploration_draws_its_minimum():
    """k = 1 with probability 1 − p; otherwise uniform over 2..N."""
    torch.manual_seed(0)
    method = HRMHalting(GRUStep(), max_steps=5, exploration=0.3)
    k = method.minimum_steps(40000, "cpu")
    explored = k[k > 1]
    assert abs(len(explored) / len(k) - 0.3) < 0.01 and (k >= 1).all() and (k <= 5).all()
    counts = torch.bincount(explored, minlength=6)[2:].float() / len(explored)
    torch.testing.assert_close(counts, torch.full((4,), 0.25), atol=0.02, rtol=0)
    assert (HRMHalting(GRUStep(), max_steps=5, exploration=0.0).minimum_steps(100, "cpu") == 1).all()
    assert (HRMHalting(GRUStep(), max_steps=1, exploration=1.0).minimum_steps(100, "cpu") == 1).all()


def test_validation_loss_explores_nothing():
    method, x, y = table_case(exploration=1.0)
    method.eval()
    first = method.loss(method(x), y)
    assert torch.equal(first["weights"], method.loss(method(x), y)["weights"])
    torch.testing.assert_close(first["weights"], method.weights(method(x)))


STEP_FUNCTIONS = {
    "parity_gru": (lambda: ParityStep(8, hidden_size=16), lambda: torch.randint(-1, 2, (12, 8)).float(), 2),
    "parity_rnn": (
        lambda: ParityRNNStep(8, hidden_size=16),
        lambda: torch.randint(-1, 2, (12, 8)).float(),
        2,
    ),
    "mnist_mlp": (
        lambda: MNISTStep(hidden_size=16, embedding_size=16),
        lambda: torch.rand(12, 1, 28, 28),
        10,
    ),
    "mnist_refine": (lambda: MNISTRefineStep(hidden_size=16), lambda: torch.rand(12, 1, 28, 28), 10),
    "pointer": (lambda: PointerStep(n_slots=8), None, 8),
}


@pytest.mark.parametrize("name", sorted(STEP_FUNCTIONS))
def test_every_step_function_of_the_package(name):
    """On each step function: the head widened to two logits, the loss against the loop, a backward
    pass, and ``infer`` against ``answer``."""
    from pondernet_tutorial.data.pointer import pointer_batch

    torch.manual_seed(0)
    make_step, make_x, classes = STEP_FUNCTIONS[name]
    x = pointer_batch(12, 8, (1, 4))[0] if make_x is None else make_x()
    y = torch.randint(0, classes, (12,))
    method = HRMHalting(make_step(), max_steps=4, exploration=0.0)
    randomize_head(method)
    method.eval()  # dropout off: the loop and the unroll see the same network
    losses = method.loss(method(x), y)
    reference = hrm_loop(method.step_function, x, y, 4, 0.5)
    expected = torch.stack([r["loss"] for r in reference]).mean()
    torch.testing.assert_close(losses["loss"], expected, rtol=1e-4, atol=1e-5)
    losses["loss"].backward()
    assert method.step_function.halting_head.weight.grad.abs().sum() > 0
    with torch.no_grad():
        _, early_step = method.infer(x)
        _, halt_step = method.answer(method(x))
    assert torch.equal(early_step, halt_step)


def test_other_methods_keep_one_halting_logit():
    step, other = ParityStep(8, hidden_size=16), ParityStep(8, hidden_size=16)
    HRMHalting(step, max_steps=3)
    act = ACT(other, max_steps=3)
    assert step.halting_head.out_features == 2 and other.halting_head.out_features == 1
    assert act(torch.ones(4, 8)).halting_logits.shape == (3, 4)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"exploration": -0.1}, "exploration"),
        ({"exploration": 1.5}, "exploration"),
        ({"halting_weight": -1.0}, "halting_weight"),
        ({"halting_bias": math.inf}, "halting_bias"),
        ({"max_steps": 0}, "max_steps"),
    ],
)
def test_bad_arguments(kwargs, message):
    with pytest.raises(ValueError, match=message):
        HRMHalting(GRUStep(), **kwargs)


def test_a_step_function_without_a_halting_head():
    with pytest.raises(ValueError, match="halting_head"):
        HRMHalting(MNISTPlainStep())


def test_training_lowers_the_loss():
    """A tiny parity run through ``fit``: the loss and each Q term fall, and the halt logit learns to
    say whether the answer is right."""
    from tiny_parity import loader, quiet_trainer

    from pondernet_tutorial.lightning_module import PonderLitModule

    torch.manual_seed(0)
    method = HRMHalting(ParityStep(8, hidden_size=16), max_steps=5)
    data = loader(256, batch_size=32)
    x, y = next(iter(loader(256, batch_size=256)))

    def losses():
        method.eval()
        with torch.no_grad():
            return {k: float(v) for k, v in method.loss(method(x), y).items() if k != "weights"}

    before = losses()
    method.train()
    quiet_trainer(max_epochs=15).fit(PonderLitModule(method, lr=1e-2, lr_schedule="constant"), data)
    after = losses()
    assert after["loss"] < 0.8 * before["loss"] and after["q_halt"] < before["q_halt"], (before, after)
