import pytest
import torch

from pondernet_tutorial.halting import (
    constant_lambda_distribution,
    geometric_prior,
    halting_uniforms,
    log_geometric_prior,
    sample_halting_step,
)
from pondernet_tutorial.methods.base import expected_steps
from pondernet_tutorial.methods.pondernet import log_halting_distribution


def naive_p(lam: torch.Tensor) -> torch.Tensor:
    """p_n = λ_n Π_{j<n}(1 − λ_j), λ_N = 1, straight from the paper, in float64."""
    lam = lam.double().clone()
    lam[-1] = 1.0
    p = torch.zeros_like(lam)
    survive = torch.ones_like(lam[0])
    for n in range(lam.shape[0]):
        p[n] = lam[n] * survive
        survive = survive * (1 - lam[n])
    return p


@pytest.mark.parametrize("scale", [1.0, 5.0, 50.0])
def test_p_sums_to_one(scale):
    logits = torch.randn(20, 64) * scale
    logits[:, 0] = 50.0
    logits[:, 1] = -50.0
    log_p = log_halting_distribution(logits)
    assert log_p.shape == (20, 64)
    assert torch.isfinite(log_p).all()
    torch.testing.assert_close(log_p.exp().sum(0), torch.ones(64), atol=1e-6, rtol=0)


def test_matches_paper_formula():
    logits = torch.randn(12, 8) * 2
    torch.testing.assert_close(
        log_halting_distribution(logits).exp().double(), naive_p(torch.sigmoid(logits)), atol=1e-6, rtol=1e-5
    )


def test_no_underflow_to_minus_inf():
    logits = torch.full((20, 4), -50.0)  # λ ≈ 2e-22: a naive cumprod in float32 underflows
    log_p = log_halting_distribution(logits)
    assert torch.isfinite(log_p).all()
    assert log_p[-1].exp().allclose(torch.ones(4))  # all the mass halts at the forced last step


def test_single_step():
    log_p = log_halting_distribution(torch.randn(1, 3))
    torch.testing.assert_close(log_p, torch.zeros(1, 3))


def test_expected_steps():
    log_p = torch.log(torch.tensor([[0.5], [0.25], [0.25]]))
    torch.testing.assert_close(expected_steps(log_p.exp()), torch.tensor([1.75]))


def test_sampled_halting_frequencies_match_p():
    logits = torch.tensor([-1.0, 0.0, 1.0, 0.5]).repeat(20_000, 1).T.contiguous()  # (4, B)
    steps = sample_halting_step(logits, torch.Generator().manual_seed(0))
    freq = torch.bincount(steps, minlength=5)[1:].double() / steps.numel()
    torch.testing.assert_close(
        freq, log_halting_distribution(logits)[:, 0].exp().double(), atol=0.015, rtol=0
    )


def test_geometric_prior():
    prior = geometric_prior(0.2, 20)
    torch.testing.assert_close(prior[:3], torch.tensor([0.2, 0.16, 0.128]))
    assert prior.sum().item() == pytest.approx(1 - 0.8**20, abs=1e-6)
    assert geometric_prior(0.2, 20, renormalize=True).sum().item() == pytest.approx(1.0, abs=1e-6)
    assert torch.isfinite(log_geometric_prior(0.999, 5)).all()


def test_constant_lambda_distribution_is_the_prior_with_its_tail_on_step_n():
    q = constant_lambda_distribution(0.2, 6).double()
    prior = geometric_prior(0.2, 6).double()
    torch.testing.assert_close(q[:-1], prior[:-1])
    assert q[-1].item() == pytest.approx(0.8**5)  # (1 − λ_p)^{N−1}: everything not halted before N
    assert q.sum().item() == pytest.approx(1.0)


def test_halting_uniforms_do_not_depend_on_how_a_set_is_split():
    g = torch.Generator().manual_seed(0)
    whole = halting_uniforms(15, 4, g)
    g = torch.Generator().manual_seed(0)
    parts = torch.cat([halting_uniforms(10, 4, g), halting_uniforms(5, 4, g)])
    assert torch.equal(whole, parts)


@pytest.mark.parametrize("bad", [0.0, -0.1, 1.0, 1.5, float("nan")])
def test_bad_lambda_p(bad):
    with pytest.raises(ValueError, match="lambda_p"):
        geometric_prior(bad, 10)


@pytest.mark.parametrize("bad", [0, -3, 2.5])
def test_bad_max_steps(bad):
    with pytest.raises(ValueError, match="max_steps"):
        geometric_prior(0.2, bad)


def test_bad_shape():
    with pytest.raises(ValueError, match="max_steps, batch"):
        log_halting_distribution(torch.randn(5))
