import pytest
import torch
from torch import nn

from pondernet_tutorial import PonderNet, StepFunction, mnist_pondernet
from pondernet_tutorial.halting import log_halting_distribution, threshold_halting_step
from pondernet_tutorial.losses import PonderLoss


def batch(b=8):
    return torch.rand(b, 1, 28, 28), torch.randint(0, 10, (b,))


def test_shapes_full():
    model = mnist_pondernet(max_steps=6)
    out = model(batch()[0], halting="full")
    assert out.logits.shape == (6, 8, 10)
    assert out.lambda_logits.shape == (6, 8)
    assert out.log_p.shape == (6, 8)
    assert out.expected_steps.shape == (8,)
    assert out.halt_step is None and out.steps_run == 6
    assert ((out.expected_steps >= 1) & (out.expected_steps <= 6)).all()


def test_shapes_sample():
    model = mnist_pondernet(max_steps=6).eval()
    out = model(batch()[0])
    assert out.halt_step.shape == (8,)
    assert out.prediction_logits.shape == (8, 10)
    assert ((out.halt_step >= 1) & (out.halt_step <= out.steps_run)).all()
    with pytest.raises(ValueError, match="full"):
        _ = out.expected_steps


def test_gradients_reach_every_part():
    model = mnist_pondernet(max_steps=5)
    x, y = batch()
    out = model(x)
    PonderLoss(0.2, 5)(out.logits, out.log_p, y)["loss"].backward()
    step = model.step_function
    for name, module in [
        ("cnn", step.embedding),
        ("mlp", step.mlp),
        ("output head", step.output_head),
        ("lambda head", step.lambda_head),
    ]:
        grads = [p.grad for p in module.parameters()]
        assert all(g is not None and g.abs().sum() > 0 for g in grads), name


def test_eval_stops_early_when_lambda_is_large():
    model = mnist_pondernet(max_steps=20).eval()
    with torch.no_grad():
        model.step_function.lambda_head.bias.fill_(10.0)  # λ ≈ 1: every sample halts at step 1
        out = model(batch(32)[0], generator=torch.Generator().manual_seed(0))
        assert out.steps_run < 20
        assert out.steps_run == 1 and (out.halt_step == 1).all()
        out = model(batch(32)[0], halting="threshold")
        assert out.steps_run == 1


def test_eval_runs_to_the_end_when_lambda_is_small():
    model = mnist_pondernet(max_steps=7).eval()
    with torch.no_grad():
        model.step_function.lambda_head.bias.fill_(-20.0)
        out = model(batch(4)[0])
    assert out.steps_run == 7 and (out.halt_step == 7).all()


def test_early_exit_sampling_matches_full_unroll():
    model = mnist_pondernet(max_steps=10).eval()
    x = batch(64)[0]
    with torch.no_grad():
        early = model(x, halting="sample", generator=torch.Generator().manual_seed(3))
        full = model(x, halting="full", sample=True, generator=torch.Generator().manual_seed(3))
    assert torch.equal(early.halt_step, full.halt_step)
    torch.testing.assert_close(early.prediction_logits, full.prediction_logits)


def test_threshold_matches_cumulative_p():
    model = mnist_pondernet(max_steps=10).eval()
    x = batch(64)[0]
    with torch.no_grad():
        model.step_function.lambda_head.bias.fill_(-1.5)
        full = model(x, halting="full")
        thr = model(x, halting="threshold")
    assert torch.equal(thr.halt_step, threshold_halting_step(full.log_p, 0.5))


def test_same_seed_same_result():
    torch.manual_seed(1)
    a = mnist_pondernet().eval()
    torch.manual_seed(1)
    b = mnist_pondernet().eval()
    x = batch(16)[0]
    with torch.no_grad():
        out_a = a(x, generator=torch.Generator().manual_seed(5))
        out_b = b(x, generator=torch.Generator().manual_seed(5))
    assert torch.equal(out_a.halt_step, out_b.halt_step)
    assert torch.equal(out_a.logits, out_b.logits)


class Parity(StepFunction):
    """A toy step function: any module can ponder, here a GRU cell over a bit string."""

    def __init__(self):
        super().__init__()
        self.cell = nn.GRUCell(8, 16)
        self.heads = nn.Linear(16, 3)

    def initial_state(self, context):
        return context.new_zeros(context.shape[0], 16)

    def step(self, context, h):
        h = self.cell(context, h)
        out = self.heads(h)
        return out[:, :2], out[:, 2], h


def test_generic_step_function():
    model = PonderNet(Parity(), max_steps=4)
    out = model(torch.randn(5, 8))
    assert out.logits.shape == (4, 5, 2)
    torch.testing.assert_close(out.log_p.exp().sum(0), torch.ones(5))
    torch.testing.assert_close(out.log_p, log_halting_distribution(out.lambda_logits))


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
    with pytest.raises(ValueError, match="halting"):
        model(torch.rand(2, 1, 28, 28), halting="never")
    with pytest.raises(ValueError, match="max_steps"):
        mnist_pondernet(max_steps=0)
    with pytest.raises(ValueError, match="threshold"):
        PonderNet(Parity(), 3, threshold=0.0)
