import pytest
import torch
import torch.nn.functional as F
from torch import nn

from pondernet_tutorial.halting import geometric_prior
from pondernet_tutorial.methods.pondernet import (
    PonderLoss,
    ReconstructionLoss,
    RegularizationLoss,
    log_halting_distribution,
)

N, B, C = 7, 16, 10


def loop_losses(logits, lam, y, lambda_p, beta):
    """Straight from the paper, one sample and one step at a time."""
    rec, reg = 0.0, 0.0
    prior = [lambda_p * (1 - lambda_p) ** n for n in range(N)]
    for b in range(B):
        survive = 1.0
        for n in range(N):
            lam_n = 1.0 if n == N - 1 else float(lam[n, b])
            p_n = lam_n * survive
            survive *= 1 - lam_n
            ce = float(F.cross_entropy(logits[n, b : b + 1].double(), y[b : b + 1]))
            rec += p_n * ce / B
            if p_n > 0:
                reg += p_n * (torch.log(torch.tensor(p_n)) - torch.log(torch.tensor(prior[n]))).item() / B
    return rec, reg, rec + beta * reg


def test_vectorised_equals_loop():
    logits = torch.randn(N, B, C, dtype=torch.float64)
    lam_logits = torch.randn(N, B, dtype=torch.float64)
    y = torch.randint(0, C, (B,))
    loss = PonderLoss(0.3, N, beta=0.05)
    out = loss(logits, log_halting_distribution(lam_logits), y)
    rec, reg, total = loop_losses(logits, torch.sigmoid(lam_logits), y, 0.3, 0.05)
    assert out["reconstruction"].item() == pytest.approx(rec, rel=1e-5)
    assert out["regularization"].item() == pytest.approx(reg, rel=1e-5)
    assert out["loss"].item() == pytest.approx(total, rel=1e-5)


def test_kl_zero_at_the_prior_and_nonnegative_where_it_is_a_divergence():
    """With the renormalised prior both directions are divergences: ≥ 0, and 0 at the prior. With the
    paper's unnormalised prior (mass (1 − λ_p)^N missing) KL(p_G ‖ p) is not a divergence and can be
    negative; KL(p ‖ p_G) stays ≥ 0 since p_G sums to less than 1."""
    for _ in range(5):
        log_p = log_halting_distribution(torch.randn(N, B) * 3)
        for direction in ("p_prior", "prior_p"):
            assert RegularizationLoss(0.2, N, direction, renormalize_prior=True)(log_p).item() >= -1e-6
        assert RegularizationLoss(0.2, N, "p_prior")(log_p).item() >= -1e-6
    prior = geometric_prior(0.2, N, renormalize=True)
    log_p = prior.log()[:, None].repeat(1, 3)
    for direction in ("p_prior", "prior_p"):
        kl = RegularizationLoss(0.2, N, direction, renormalize_prior=True)(log_p)
        assert abs(kl.item()) < 1e-6
    # the unnormalised prior misses (1 - λ_p)^N of its mass, so KL(prior ‖ p_G) = -log(1 - (1 - λ_p)^N) > 0
    kl = RegularizationLoss(0.2, N, renormalize_prior=False)(log_p)
    assert kl.item() == pytest.approx(-torch.log1p(torch.tensor(-(0.8**N))).item(), rel=1e-4)
    # ... and KL(p_G ‖ p) against the unnormalised prior is negative for p = the renormalised prior
    swapped = RegularizationLoss(0.2, N, "prior_p", renormalize_prior=False)(log_p)
    assert swapped.item() < 0


def test_prior_p_equals_popular_kldivloss():
    log_p = log_halting_distribution(torch.randn(N, B))
    p_g = geometric_prior(0.2, N)
    popular = nn.KLDivLoss(reduction="batchmean")(log_p.exp().T.log(), p_g.expand(B, N))
    ours = RegularizationLoss(0.2, N, direction="prior_p")(log_p)
    assert ours.item() == pytest.approx(popular.item(), rel=1e-5)
    forward = RegularizationLoss(0.2, N, direction="p_prior")(log_p)
    assert forward.item() != pytest.approx(ours.item(), rel=1e-3)  # the two directions really differ


@pytest.mark.parametrize("direction", ["p_prior", "prior_p"])
@pytest.mark.parametrize("value", [50.0, -50.0, 1e4, -1e4])
def test_finite_for_saturated_lambda(direction, value):
    lam_logits = torch.full((N, B), value, requires_grad=True)
    logits = torch.randn(N, B, C, requires_grad=True)
    y = torch.randint(0, C, (B,))
    loss = PonderLoss(0.2, N, beta=0.01, direction=direction)
    out = loss(logits, log_halting_distribution(lam_logits), y)
    out["loss"].backward()
    assert torch.isfinite(out["loss"])
    assert torch.isfinite(lam_logits.grad).all() and torch.isfinite(logits.grad).all()


@pytest.mark.parametrize("value", [float("inf"), -float("inf")])
def test_an_infinite_halting_logit_gives_the_paper_kl_its_limit(value):
    """λ_n = 1 or 0 exactly: p_n = 0 at the steps it rules out, and KL(p ‖ p_G) keeps 0 · log 0 = 0, its
    value and gradient those of a logit of ±1e30 (not NaN)."""
    kl = RegularizationLoss(0.2, N)
    grads = []
    for z_1 in (value, 1e30 if value > 0 else -1e30):
        z = torch.zeros(N, B)
        z[0] = z_1
        z.requires_grad_(True)
        out = kl(log_halting_distribution(z))
        out.backward()
        grads.append((out.detach(), z.grad))
    (inf_kl, inf_grad), (limit_kl, limit_grad) = grads
    assert torch.isfinite(inf_kl) and torch.isfinite(inf_grad).all()
    assert inf_kl == limit_kl and torch.equal(inf_grad, limit_grad)


def test_popular_kldivloss_breaks_when_p_underflows():
    """What the book explains: p.log() of an underflowed float32 p is -inf, and the popular loss is inf."""
    lam = torch.full((B, N), 1 - 1e-30)  # halts at once: later p_n underflow to 0 in float32
    p = torch.cat([lam[:, :1], torch.cumprod(1 - lam, 1)[:, :-1] * lam[:, 1:]], 1)
    popular = nn.KLDivLoss(reduction="batchmean")(p.log(), geometric_prior(0.2, N).expand(B, N))
    assert not torch.isfinite(popular)
    ours = RegularizationLoss(0.2, N, "prior_p")(log_halting_distribution(torch.full((N, B), 69.0)))
    assert torch.isfinite(ours)


def test_reconstruction_weights_each_sample_by_its_own_p():
    logits = torch.randn(2, 2, C)
    y = torch.tensor([0, 1])
    log_p = torch.log(torch.tensor([[0.9, 0.1], [0.1, 0.9]]))
    ours = ReconstructionLoss()(logits, log_p, y)
    per = torch.stack([F.cross_entropy(logits[n], y, reduction="none") for n in range(2)])
    assert ours.item() == pytest.approx((log_p.exp() * per).sum(0).mean().item(), rel=1e-6)
    mean_reduced = sum((log_p.exp()[n] * F.cross_entropy(logits[n], y)).mean() for n in range(2))
    assert ours.item() != pytest.approx(mean_reduced.item(), rel=1e-3)


def test_bad_inputs():
    with pytest.raises(ValueError, match="kl_direction"):
        RegularizationLoss(0.2, N, direction="sideways")
    with pytest.raises(ValueError, match="one loss per sample"):
        ReconstructionLoss(nn.CrossEntropyLoss())(
            torch.zeros(N, 3, C), torch.zeros(N, 3), torch.zeros(3, dtype=torch.long)
        )
    with pytest.raises(ValueError, match="lambda_p"):
        PonderLoss(1.0, N)
    with pytest.raises(ValueError, match="beta"):
        PonderLoss(0.2, N, beta=-1)
    with pytest.raises(ValueError, match="lambda_p"):
        PonderLoss(1.2, N)
    with pytest.raises(ValueError, match="max_steps"):
        RegularizationLoss(0.2, 0)
    with pytest.raises(ValueError, match="shape"):
        RegularizationLoss(0.2, N)(torch.zeros(N + 1, 3))
    with pytest.raises(ValueError, match="expected logits"):
        ReconstructionLoss()(torch.zeros(N, 3, C), torch.zeros(N, 3), torch.zeros(4, dtype=torch.long))
