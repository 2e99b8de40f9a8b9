"""ACT against a loop written from Graves (2016), its gradient, its edge cases and its early exit.

Deliberate breaks these tests catch (each was tried):
- the ponder cost detached from the halting units (``remainder.detach()``): test_ponder_cost_gradient;
- the halting unit of step N counted in R or p (``before`` as ``steps <= halt_step``): test_act_matches_loop;
- halted samples kept in the computation: test_act_drops_halted_samples;
- ``infer`` giving the last step's remainder to every halting step (``weight = 1 - total`` always):
  test_act_matches_loop;
- ``act_weights`` with ``remainder`` detached (the full unroll's gradient then differs from the early
  exit's): test_the_full_unroll_has_the_early_exits_gradients;
- ``≥ 1 − ε`` written ``>`` in ``act_halt_step`` or in ``infer``: test_a_sum_that_reaches_one_minus_epsilon_exactly_halts;
- the task loss summed over the batch, or the ponder cost detached in ``ACT.loss``:
  test_the_loss_is_the_batch_mean_and_its_ponder_gradient_is_tau_over_the_batch.
"""

import pytest
import torch
from torch import nn

from pondernet_tutorial.methods.act import ACT, act_halt_step, act_weights
from pondernet_tutorial.steps.base import StepFunction


class GRUStep(StepFunction):
    def __init__(self, d=6, hidden=12, classes=3, bias=0.0):
        super().__init__()
        self.hidden = hidden
        self.cell = nn.GRUCell(d, hidden)
        self.output_head = nn.Linear(hidden, classes)
        self.halting_head = nn.Linear(hidden, 1)
        nn.init.constant_(self.halting_head.bias, bias)
        self.calls = []

    def initial_state(self, context):
        return context.new_zeros(context.shape[0], self.hidden)

    def step(self, context, h):
        self.calls.append(context.shape[0])
        h = self.cell(context, h)
        return self.output_head(h), self.halting_head(h).squeeze(1), h


def act_loop(step_function, x, max_steps, epsilon):
    """Graves' equations, one sample at a time: N, R, p, the mean-field output and ρ = N + R."""
    results = []
    for b in range(x.shape[0]):
        xb = x[b : b + 1]
        h = step_function.initial_state(xb)
        cumulative, hs, ys = 0.0, [], []
        for n in range(1, max_steps + 1):
            y, z, h = step_function.step(xb, h)
            hs.append(torch.sigmoid(z)[0].item())
            ys.append(y[0])
            cumulative += hs[-1]
            if cumulative >= 1 - epsilon or n == max_steps:
                break
        big_n = len(hs)
        remainder = 1.0 - sum(hs[: big_n - 1])  # R = 1 − Σ_{n<N} h_n
        p = hs[: big_n - 1] + [remainder]
        output = sum(p_n * y_n for p_n, y_n in zip(p, ys))
        results.append({"N": big_n, "R": remainder, "p": p, "output": output, "rho": big_n + remainder})
    return results


@pytest.mark.parametrize("bias", [-2.0, 0.0, 1.0])
@pytest.mark.parametrize("epsilon", [0.01, 0.3])
def test_act_matches_loop(bias, epsilon):
    torch.manual_seed(0)
    step = GRUStep(bias=bias)
    act = ACT(step, max_steps=8, tau=0.01, epsilon=epsilon).eval()
    x = torch.randn(16, 6) * 2
    with torch.no_grad():
        out = act(x)  # the full unroll
        halt_step = act_halt_step(out.halting_logits, epsilon)
        p, remainder = act_weights(out.halting_logits, halt_step)
        prediction, answer_step = act.answer(out)
        early, early_step = act.infer(x)  # the early exit
        reference = act_loop(step, x, 8, epsilon)
    assert torch.equal(answer_step, halt_step) and torch.equal(early_step, halt_step)
    torch.testing.assert_close(act.weights(out), p)
    for b, ref in enumerate(reference):
        assert halt_step[b].item() == ref["N"]
        n = ref["N"]
        torch.testing.assert_close(p[:n, b], torch.tensor(ref["p"]), atol=1e-6, rtol=1e-5)
        assert (p[n:, b] == 0).all()
        torch.testing.assert_close(n + remainder[b], torch.tensor(ref["rho"]), atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(prediction[b], ref["output"], atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(early[b], ref["output"], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(p.sum(0), torch.ones(16))


def test_the_full_unroll_has_the_early_exits_gradients():
    """Training's unroll of every step, masked after T(x), backpropagates what the early exit would (its
    answer and steps are test_act_matches_loop's)."""
    torch.manual_seed(0)
    act = ACT(GRUStep(bias=-1.0), max_steps=6, tau=0.05).eval()
    x, y = torch.randn(64, 6) * 2, torch.randint(0, 3, (64,))
    grads = []
    for way in (act.infer, lambda x: act.answer(act(x))):  # early exit; full unroll masked after T(x)
        act.zero_grad()
        prediction, halt_step = way(x)
        nn.functional.cross_entropy(prediction, y).backward()
        grads.append({k: p.grad.clone() for k, p in act.named_parameters()})
    assert halt_step.float().std() > 0.3  # T(x) varies over the batch
    for name in grads[0]:
        torch.testing.assert_close(grads[0][name], grads[1][name], rtol=1e-5, atol=1e-7)


class TableStep(StepFunction):
    """Halting units read from a table H (steps × samples), so that ∂ρ/∂h_n can be read off H.grad."""

    def __init__(self, H):
        super().__init__()
        self.H = nn.Parameter(H)

    def encode(self, x):
        return x  # (B,) sample ids

    def initial_state(self, ids):
        return torch.zeros_like(ids)  # the step counter

    def step(self, ids, n):
        z = torch.logit(self.H[n, ids])  # h_n = sigmoid(z_n) = H[n, b]
        return z.new_zeros(len(ids), 2), z, n + 1


def test_ponder_cost_gradient():
    """∂(τρ)/∂h_n = −τ for n < N(x) and 0 for n ≥ N(x): N is a constant, R carries the gradient."""
    H = torch.tensor([[0.3, 0.9, 0.2], [0.3, 0.5, 0.2], [0.6, 0.5, 0.2], [0.5, 0.5, 0.2]])  # (steps, samples)
    tau = 0.1
    act = ACT(TableStep(H.clone()), max_steps=4, tau=tau, epsilon=0.01)
    out = act(torch.arange(3))
    halt_step = act_halt_step(out.halting_logits, act.epsilon)
    assert halt_step.tolist() == [3, 2, 4]  # 0.3+0.3+0.6 ≥ 0.99; 0.9+0.5; never: the last step
    _, remainder = act_weights(out.halting_logits, halt_step)
    (tau * (halt_step + remainder).sum()).backward()  # τ Σ_b ρ_b, ρ = N + R
    grad = act.step_function.H.grad
    expected = torch.zeros_like(H)
    for b, big_n in enumerate([3, 2, 4]):
        expected[: big_n - 1, b] = -tau
    torch.testing.assert_close(grad, expected)


def test_ponder_cost_in_the_loss():
    H = torch.full((5, 4), 0.3)
    act = ACT(TableStep(H), max_steps=5, tau=0.5)
    out = act(torch.arange(4))
    losses = act.loss(out, torch.zeros(4, dtype=torch.long))
    assert act_halt_step(out.halting_logits, act.epsilon).tolist() == [4] * 4  # 0.3 · 4 ≥ 0.99
    torch.testing.assert_close(losses["ponder_cost"], torch.tensor(4 + (1 - 0.9)))  # N + R, R = 1 − 3 · 0.3
    torch.testing.assert_close(losses["loss"], losses["task"] + 0.5 * losses["ponder_cost"])
    act0 = ACT(TableStep(H), max_steps=5, tau=0.0)
    losses0 = act0.loss(act0(torch.arange(4)), torch.zeros(4, dtype=torch.long))
    torch.testing.assert_close(losses0["loss"], losses0["task"])  # τ = 0: the task loss alone


def test_epsilon_close_to_one_halts_after_one_step():
    step = GRUStep(bias=-4.0)  # h ≈ 0.02 ≥ 1 − ε for ε = 0.999
    act = ACT(step, max_steps=6, epsilon=0.999).eval()
    x = torch.randn(10, 6)
    with torch.no_grad():
        out = act(x)
        prediction, halt_step = act.infer(x)
    assert (halt_step == 1).all() and step.calls[-1:] == [10] and len(step.calls) == 6 + 1  # 1 step
    _, remainder = act_weights(out.halting_logits, halt_step)
    torch.testing.assert_close(halt_step + remainder, torch.full((10,), 2.0))  # ρ = N + R = 1 + 1
    torch.testing.assert_close(prediction, out.logits[0])


def test_act_drops_halted_samples():
    H = torch.tensor([[0.995, 0.1, 0.1], [0.5, 0.1, 0.995], [0.5, 0.1, 0.5]])
    batch_sizes = []

    class Counting(TableStep):
        def step(self, ids, n):
            batch_sizes.append(len(ids))
            return super().step(ids, n)

    act = ACT(Counting(H), max_steps=3)
    _, halt_step = act.infer(torch.arange(3))
    assert halt_step.tolist() == [1, 3, 2]
    assert batch_sizes == [3, 2, 1]  # sample 0 leaves after step 1, sample 2 after step 2


def test_act_halting_step_and_weights_directly():
    z = torch.logit(torch.tensor([[0.5, 0.95, 0.2], [0.45, 0.01, 0.2]]))  # (S=2, B=3)
    assert act_halt_step(z, 0.1).tolist() == [2, 1, 2]  # Σ η: 0.5, 0.95 | 0.95, 0.96 | never: N
    p, remainder = act_weights(torch.logit(torch.tensor([[0.5], [0.3], [0.9]])), torch.tensor([3]))
    torch.testing.assert_close(remainder, torch.tensor([0.2]))
    torch.testing.assert_close(p[:, 0], torch.tensor([0.5, 0.3, 0.2]))


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"epsilon": 0.0}, "epsilon"),
        ({"epsilon": 1.0}, "epsilon"),
        ({"tau": -1e-3}, "tau"),
        ({"max_steps": 0}, "max_steps"),
    ],
)
def test_bad_arguments(kwargs, message):
    with pytest.raises(ValueError, match=message):
        ACT(GRUStep(), **kwargs)


def test_halting_bias_needs_a_halting_head():
    class NoHead(StepFunction):
        def initial_state(self, c):
            return c

        def step(self, c, h):
            return c, c[:, 0], h

    with pytest.raises(ValueError, match="halting_head"):
        ACT(NoHead(), halting_bias=-3.0)
    step = GRUStep()
    ACT(step, halting_bias=-3.0)
    assert (step.halting_head.bias == -3.0).all()


@pytest.mark.parametrize("method", ["act", "pondernet"])
def test_validation_loss_counts_trainings_steps(method):
    """With a longer evaluation budget (eval_max_steps > N), the loss is still the one training
    minimises: over the first N steps, as if the unroll had stopped there."""
    from pondernet_tutorial import ParityStep, PonderNet

    torch.manual_seed(0)
    step = ParityStep(n_elements=8, hidden_size=16)
    if method == "act":  # a negative bias: no sample halts within N, so the longer unroll differs
        model = ACT(step, max_steps=4, tau=0.01, halting_bias=-3.0, eval_max_steps=12)
    else:
        model = PonderNet(step, max_steps=4, lambda_p=0.3, eval_max_steps=12)
    model.eval()
    x = torch.randint(-1, 2, (16, 8)).float()
    y = ((x == 1).sum(1) % 2).long()
    with torch.no_grad():
        long, short = model(x), model(x, steps=4)
        assert long.halting_logits.shape[0] == 12 and short.halting_logits.shape[0] == 4
        full, first_n = model.loss(long, y), model.loss(short, y)
        for name in set(full) - {"weights"}:  # the loss and its terms
            assert torch.equal(full[name], first_n[name]), name


def test_a_sum_that_reaches_one_minus_epsilon_exactly_halts():
    """N is the first step with Σ h ≥ 1 − ε (Graves's ≥, not >): with h = 0.5 exactly and ε = 0.5 the
    first step already reaches it, in the full unroll and in the early exit alike."""
    act = ACT(TableStep(torch.full((3, 2), 0.5)), max_steps=3, epsilon=0.5)
    out = act(torch.arange(2))
    assert act_halt_step(out.halting_logits, act.epsilon).tolist() == [1, 1]
    assert act.infer(torch.arange(2))[1].tolist() == [1, 1]


def test_the_loss_is_the_batch_mean_and_its_ponder_gradient_is_tau_over_the_batch():
    """ACT.loss averages over the batch: the task term of two-class zero logits is log 2 whatever the
    batch, and ∂(τ · mean ρ)/∂h_n = −τ/B for n < N(x) (the loss's own gradient, as
    test_ponder_cost_gradient's for the sum)."""
    H = torch.tensor([[0.3, 0.9, 0.2], [0.3, 0.5, 0.2], [0.6, 0.5, 0.2], [0.5, 0.5, 0.2]])
    tau = 0.1
    act = ACT(TableStep(H.clone()), max_steps=4, tau=tau, epsilon=0.01)
    losses = act.loss(act(torch.arange(3)), torch.zeros(3, dtype=torch.long))
    torch.testing.assert_close(losses["task"], torch.log(torch.tensor(2.0)))
    losses["loss"].backward()
    expected = torch.zeros_like(H)
    for b, big_n in enumerate([3, 2, 4]):
        expected[: big_n - 1, b] = -tau / 3
    torch.testing.assert_close(act.step_function.H.grad, expected)
