"""PonderNet and the fixed-step baseline over step functions: shapes, gradients, early exit, states.

Deliberate breaks these tests catch (each was tried):
- early exit no longer dropping halted samples (``select_rows`` skipped in ``infer``):
  test_early_exit_drops_halted_samples;
- ``infer`` comparing the coin of step n + 1 (``coins[running, n]``):
  test_early_exit_sampling_matches_full_unroll;
- the ε rule stopping at ``Σ p ≥ 1 − ε`` (``cdf < 1 − ε``): test_the_epsilon_rule_stops_where_the_mass_exceeds_one_minus_epsilon;
- ``weights`` truncating in eval mode too: test_weights_truncate_in_training_only;
- the frozen logit ``log λ_p`` instead of ``logit λ_p``: test_a_frozen_halting_has_the_priors_lambda_at_every_step.
"""

import pytest
import torch
from torch import nn

from pondernet_tutorial.halting import MAX_STEPS, constant_lambda_distribution
from pondernet_tutorial.methods.act import ACT
from pondernet_tutorial.methods.fixed import FixedSteps
from pondernet_tutorial.methods.pondernet import PonderNet, log_halting_distribution, truncate_at_epsilon
from pondernet_tutorial.steps.base import StepFunction
from pondernet_tutorial.steps.mnist import MNISTStep
from pondernet_tutorial.steps.parity import ParityStep


def mnist_pondernet(max_steps=20, **kwargs):
    return PonderNet(MNISTStep(), max_steps=max_steps, **kwargs)


def batch(b=8):
    return torch.rand(b, 1, 28, 28), torch.randint(0, 10, (b,))


def test_shapes_full_and_inferred():
    model = mnist_pondernet(max_steps=6)
    out = model(batch()[0])
    assert out.logits.shape == (6, 8, 10) and out.halting_logits.shape == (6, 8)
    p = model.weights(out)
    assert p.shape == (6, 8)
    torch.testing.assert_close(p.sum(0), torch.ones(8))
    model.eval()
    prediction, halt_step = model.infer(batch()[0])
    assert prediction.shape == (8, 10) and halt_step.shape == (8,)
    assert ((halt_step >= 1) & (halt_step <= 6)).all()


def test_gradients_reach_every_part():
    model = mnist_pondernet(max_steps=5)
    x, y = batch()
    out = model(x)
    model.loss(out, y)["loss"].backward()
    step = model.step_function
    for name, module in [
        ("cnn", step.embedding),
        ("mlp", step.mlp),
        ("output head", step.output_head),
        ("halting head", step.halting_head),
    ]:
        grads = [p.grad for p in module.parameters()]
        assert all(g is not None and g.abs().sum() > 0 for g in grads), name


class Counting(StepFunction):
    """A linear step that records the batch size of every call."""

    def __init__(self, d=5, classes=3):
        super().__init__()
        self.cell = nn.Linear(d, d)
        self.output_head = nn.Linear(d, classes)
        self.halting_head = nn.Linear(d, 1)
        self.sizes = []

    def initial_state(self, context):
        return torch.zeros_like(context)

    def step(self, context, h):
        self.sizes.append(len(context))
        h = torch.tanh(self.cell(context) + h)
        return self.output_head(h), self.halting_head(h).squeeze(1), h


def test_early_exit_drops_halted_samples():
    step = Counting()
    model = PonderNet(step, max_steps=10).eval()
    with torch.no_grad():
        step.halting_head.bias.fill_(-0.5)
        _, halt_step = model.infer(torch.randn(200, 5), generator=torch.Generator().manual_seed(0))
    running = [(halt_step >= n).sum().item() for n in range(1, int(halt_step.max()) + 1)]
    assert step.sizes == running  # step n computes exactly the samples that have not halted before n
    assert running[0] == 200 and running[-1] < 50


def test_every_sample_halts_at_step_one():
    model = mnist_pondernet(max_steps=20).eval()
    with torch.no_grad():
        model.step_function.halting_head.bias.fill_(30.0)  # λ ≈ 1
        prediction, halt_step = model.infer(batch(32)[0], generator=torch.Generator().manual_seed(0))
    assert (halt_step == 1).all() and prediction.shape == (32, 10)


def test_eval_runs_to_the_end_when_lambda_is_small():
    model = mnist_pondernet(max_steps=7).eval()
    with torch.no_grad():
        model.step_function.halting_head.bias.fill_(-20.0)
        _, halt_step = model.infer(batch(4)[0])
    assert (halt_step == 7).all()


def test_max_steps_one_and_a_batch_of_one():
    model = mnist_pondernet(max_steps=1)
    x, y = batch(1)
    out = model(x)
    torch.testing.assert_close(model.weights(out), torch.ones(1, 1))  # λ_N = 1 at N = 1
    losses = model.loss(out, y)
    assert torch.isfinite(losses["loss"])
    losses["loss"].backward()
    model.eval()
    with torch.no_grad():
        assert model.infer(x)[1].tolist() == [1]


def test_early_exit_in_bfloat16():
    model = mnist_pondernet(max_steps=8).eval()
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        model.step_function.halting_head.bias.fill_(-1.0)
        prediction, halt_step = model.infer(batch(64)[0], generator=torch.Generator().manual_seed(0))
    assert prediction.dtype == torch.bfloat16 and torch.isfinite(prediction.float()).all()
    assert halt_step.min() >= 1 and halt_step.max() <= 8


def test_early_exit_sampling_matches_full_unroll():
    model = mnist_pondernet(max_steps=10).eval()
    x = batch(64)[0]
    with torch.no_grad():
        model.step_function.halting_head.bias.fill_(-1.5)
        early, early_step = model.infer(x, generator=torch.Generator().manual_seed(3))
        full, full_step = model.answer(model(x), generator=torch.Generator().manual_seed(3))
    assert torch.equal(early_step, full_step) and early_step.float().std() > 0
    torch.testing.assert_close(early, full)


class LSTMStep(StepFunction):
    """A step function whose hidden state is a tuple (h, c)."""

    def __init__(self, d=6, hidden=10):
        super().__init__()
        self.hidden = hidden
        self.cell = nn.LSTMCell(d, hidden)
        self.output_head = nn.Linear(hidden, 2)
        self.halting_head = nn.Linear(hidden, 1)

    def initial_state(self, context):
        zeros = context.new_zeros(context.shape[0], self.hidden)
        return zeros, zeros.clone()

    def step(self, context, state):
        h, c = self.cell(context, state)
        return self.output_head(h), self.halting_head(h).squeeze(1), (h, c)


def test_tuple_states_in_training_and_with_early_exit():
    model = PonderNet(LSTMStep(), max_steps=6)
    x = torch.randn(32, 6)
    out = model(x)
    model.loss(out, torch.randint(0, 2, (32,)))["loss"].backward()
    model.eval()
    with torch.no_grad():
        model.step_function.halting_head.bias.fill_(-1.0)
        early, early_step = model.infer(x, generator=torch.Generator().manual_seed(1))
        full = model(x)
        answer, answer_step = model.answer(full, generator=torch.Generator().manual_seed(1))
    assert torch.equal(early_step, answer_step) and early_step.float().std() > 0
    torch.testing.assert_close(early, answer)
    torch.testing.assert_close(model.weights(full), log_halting_distribution(full.halting_logits).exp())


def test_same_seed_same_result():
    torch.manual_seed(1)
    a = mnist_pondernet().eval()
    torch.manual_seed(1)
    b = mnist_pondernet().eval()
    x = batch(16)[0]
    with torch.no_grad():
        out_a = a.infer(x, generator=torch.Generator().manual_seed(5))
        out_b = b.infer(x, generator=torch.Generator().manual_seed(5))
    assert torch.equal(out_a[1], out_b[1]) and torch.equal(out_a[0], out_b[0])


def test_fixed_steps_answers_with_step_k():
    step = Counting()
    model = FixedSteps(step, max_steps=4)
    x, y = torch.randn(9, 5), torch.randint(0, 3, (9,))
    out = model(x)
    assert step.sizes == [9, 9, 9, 9]
    prediction, halt_step = model.answer(out)
    torch.testing.assert_close(prediction, out.logits[-1])
    assert (halt_step == 4).all()
    torch.testing.assert_close(model.weights(out)[:, 0], torch.tensor([0.0, 0.0, 0.0, 1.0]))
    losses = model.loss(out, y)
    torch.testing.assert_close(losses["loss"], nn.functional.cross_entropy(out.logits[-1], y))
    torch.testing.assert_close(model.eval().infer(x)[0], out.logits[-1])


def test_bad_inputs():
    model = mnist_pondernet(max_steps=3)
    with pytest.raises(ValueError, match=r"\(batch, 1, 28, 28\).*unsqueeze"):
        model(torch.rand(4, 28, 28))
    with pytest.raises(ValueError, match="floating-point"):
        model(torch.randint(0, 255, (4, 1, 28, 28), dtype=torch.uint8))
    with pytest.raises(ValueError, match=r"\(batch, 1, 28, 28\)"):
        model(torch.rand(4, 3, 32, 32))
    with pytest.raises(TypeError, match="torch.Tensor"):
        model([[0.0]])
    with pytest.raises(ValueError, match="NaN"):
        model.infer(torch.full((2, 1, 28, 28), float("nan")))
    with pytest.raises(ValueError, match="max_steps"):
        mnist_pondernet(max_steps=0)
    with pytest.raises(ValueError, match="eval_max_steps"):  # validation's loss reads the first max_steps
        mnist_pondernet(max_steps=5, eval_max_steps=3)
    with pytest.raises(TypeError, match="StepFunction"):
        PonderNet(nn.Linear(3, 3), 3)


@pytest.mark.parametrize("method", [PonderNet, ACT, FixedSteps])
@pytest.mark.parametrize(
    "options", [{"max_steps": MAX_STEPS + 1}, {"max_steps": 3, "eval_max_steps": MAX_STEPS + 1}]
)
def test_a_step_count_above_the_maximum_is_refused_at_construction(method, options):
    """Issue 39: ``PonderNet(ParityStep(16), max_steps=10**9)`` allocated a 4 GB prior before any check;
    the constructor refuses N above MAX_STEPS, the command line's maximum, in one line."""
    with pytest.raises(
        ValueError, match=f"max_steps must be a whole number from 1 to {MAX_STEPS:,}"
    ) as caught:
        method(ParityStep(16), **options)
    assert "\n" not in str(caught.value)


def test_a_billion_steps_is_refused_before_anything_is_allocated():
    with pytest.raises(ValueError, match="max_steps must be a whole number from 1 to"):
        PonderNet(ParityStep(16), max_steps=10**9)


def test_the_epsilon_rule_stops_where_the_mass_exceeds_one_minus_epsilon():
    """The paper's N_ε is the first n with Σ_{j≤n} p_j > 1 − ε, strictly: with λ = 0.5 at every step
    (z = 0, exact in float32) the mass after step 1 is 0.5, not above 1 − ε = 0.5, so the unroll ends at
    step 2, which takes the rest: p = (0.5, 0.5, 0, 0)."""
    p = log_halting_distribution(truncate_at_epsilon(torch.zeros(4, 1), 0.5)).exp()[:, 0]
    torch.testing.assert_close(p, torch.tensor([0.5, 0.5, 0.0, 0.0]))


def test_weights_truncate_in_training_only():
    """``weights`` is the ε-truncated p in training and the whole p over every step in eval mode (the
    evaluation's E[n] and distance to the prior read it)."""
    model = PonderNet(ParityStep(8), max_steps=6, train_epsilon=0.05)
    out = model(torch.randn(4, 8))
    full = log_halting_distribution(out.halting_logits.float()).exp()
    truncated = log_halting_distribution(truncate_at_epsilon(out.halting_logits.float(), 0.05)).exp()
    assert not torch.allclose(full, truncated)  # the rule cuts this unroll
    torch.testing.assert_close(model.train().weights(out), truncated)
    torch.testing.assert_close(model.eval().weights(out), full)


def test_a_frozen_halting_has_the_priors_lambda_at_every_step():
    """The control (``learn_halting=False``) halts with λ_n = λ_p whatever the step function says: its
    p_n is λ_p (1 − λ_p)^(n−1), the rest at N."""
    model = PonderNet(ParityStep(8), max_steps=5, lambda_p=0.2, learn_halting=False)
    weights = model.eval().weights(model(torch.randn(3, 8)))
    torch.testing.assert_close(weights, constant_lambda_distribution(0.2, 5)[:, None].expand(5, 3))
