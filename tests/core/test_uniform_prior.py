"""PonderNet with a uniform prior (LoopLM/Ouro, Zhu et al. 2025): its KL term against one computed here, one
sample and one step at a time, from the paper's definitions (p_n = λ_n Π_{j<n}(1 − λ_j), λ_N = 1, π_n = 1/N,
KL(p ‖ π) = −H(p) + log N); on random outputs and on the package's step functions.

Deliberate breaks these tests catch (each was tried):
- the uniform prior's log π_n = +log N instead of −log N (``log_uniform_prior``):
  test_uniform_kl_is_minus_entropy_plus_log_n, test_the_loss_on_real_step_functions;
- the geometric prior kept under ``prior="uniform"`` (the branch in ``RegularizationLoss`` skipped):
  every test here but test_the_prior_is_checked and test_a_uniform_model_trains_on_tiny_parity;
- λ_p read by the uniform model (the frozen logit set whatever ``learn_halting``):
  test_lambda_p_does_nothing_under_the_uniform_prior, test_the_loss_on_real_step_functions;
- ``halting_prior`` returning the geometric prior under ``prior="uniform"``:
  test_the_loss_on_real_step_functions.
"""

import math

import pytest
import torch
import torch.nn.functional as F

from pondernet_tutorial.methods.pondernet import (
    PonderLoss,
    PonderNet,
    RegularizationLoss,
    log_halting_distribution,
    truncate_at_epsilon,
)
from pondernet_tutorial.steps.mnist import MNISTStep
from pondernet_tutorial.steps.parity import ParityRNNStep, ParityStep
from pondernet_tutorial.steps.pointer import PointerStep


def loop_p(lam: torch.Tensor) -> list[list[float]]:
    """p_n = λ_n Π_{j<n} (1 − λ_j), with λ_N = 1, for each sample b: ``p[b][n]``."""
    n_steps, batch = lam.shape
    out = []
    for b in range(batch):
        survive, row = 1.0, []
        for n in range(n_steps):
            lam_n = 1.0 if n == n_steps - 1 else float(lam[n, b])
            row.append(lam_n * survive)
            survive *= 1.0 - lam_n
        out.append(row)
    return out


def loop_uniform_kl(p: list[list[float]], direction: str = "p_prior") -> float:
    """The batch mean of KL(p ‖ π) = −H(p) + log N, or of KL(π ‖ p) = Σ_n (1/N)(log(1/N) − log p_n)."""
    total = 0.0
    for row in p:
        n_steps = len(row)
        if direction == "p_prior":
            entropy = -sum(q * math.log(q) for q in row if q > 0)
            total += -entropy + math.log(n_steps)
        else:
            total += sum((math.log(1 / n_steps) - math.log(q)) / n_steps for q in row)
    return total / len(p)


@pytest.mark.parametrize("direction", ["p_prior", "prior_p"])
def test_uniform_kl_is_minus_entropy_plus_log_n(direction):
    z = torch.randn(9, 50, dtype=torch.float64) * 2
    kl = RegularizationLoss(0.3, 9, direction, prior="uniform").double()(log_halting_distribution(z))
    expected = loop_uniform_kl(loop_p(torch.sigmoid(z)), direction)
    assert kl.item() == pytest.approx(expected, rel=1e-6)  # log N is held in float32
    assert kl.item() >= 0


def test_the_uniform_kl_of_a_truncated_p_is_finite():
    """The ε rule sets p_n = 0 after N_ε: KL(p ‖ π) keeps 0 · log 0 = 0."""
    z = torch.randn(12, 40, dtype=torch.float64) + 1.0
    log_p = log_halting_distribution(truncate_at_epsilon(z, 0.05)).double()
    assert (log_p.exp() == 0).any()  # the rule cut some samples short
    kl = RegularizationLoss(0.3, 12, prior="uniform").double()(log_p)
    assert kl.item() == pytest.approx(loop_uniform_kl(log_p.exp().T.tolist()), rel=1e-6)


def test_the_ponder_loss_against_the_loop():
    n_steps, batch, classes, beta = 6, 20, 5, 0.07
    logits = torch.randn(n_steps, batch, classes, dtype=torch.float64)
    z = torch.randn(n_steps, batch, dtype=torch.float64)
    y = torch.randint(0, classes, (batch,))
    out = PonderLoss(0.5, n_steps, beta=beta, prior="uniform")(logits, log_halting_distribution(z), y)
    p = loop_p(torch.sigmoid(z))
    rec = sum(
        p[b][n] * float(F.cross_entropy(logits[n, b : b + 1], y[b : b + 1]))
        for b in range(batch)
        for n in range(n_steps)
    )
    rec /= batch
    assert out["reconstruction"].item() == pytest.approx(rec, rel=1e-6)
    assert out["loss"].item() == pytest.approx(rec + beta * loop_uniform_kl(p), rel=1e-6)


def pointer_inputs(batch=24, slots=8):
    g = torch.Generator().manual_seed(1)
    from pondernet_tutorial.data.pointer import pointer_batch

    x, y, _ = pointer_batch(batch, slots, (1, 4), generator=g)
    return x, y


STEPS = {
    "parity_gru": (lambda: ParityStep(n_elements=8, hidden_size=16), 2),
    "parity_rnn": (lambda: ParityRNNStep(8, hidden_size=16), 2),
    "pointer": (lambda: PointerStep(8, hidden_size=16, key_size=8), 8),
    "mnist": (lambda: MNISTStep(hidden_size=16, embedding_size=16), 10),
}


def inputs(name, batch=24):
    if name == "pointer":
        return pointer_inputs(batch)
    if name == "mnist":
        return torch.rand(batch, 1, 28, 28), torch.randint(0, 10, (batch,))
    x = torch.randint(-1, 2, (batch, 8)).float()
    return x, ((x == 1).sum(1) % 2).long()


@pytest.mark.parametrize("name", list(STEPS))
def test_the_loss_on_real_step_functions(name):
    """On each step function: the KL term is −H(p) + log N of the model's own p_n, the loss's gradient
    reaches the halting head, and inference with early exit halts where the full unroll's coins say."""
    build, _ = STEPS[name]
    model = PonderNet(build(), max_steps=6, beta=0.1, prior="uniform").train()
    x, y = inputs(name)
    out = model(x)
    losses = model.loss(out, y)
    p = loop_p(torch.sigmoid(out.halting_logits.detach().double()))
    assert losses["regularization"].item() == pytest.approx(loop_uniform_kl(p), rel=1e-5)
    losses["loss"].backward()
    assert model.step_function.halting_head.weight.grad.abs().sum() > 0
    model.eval()
    with torch.no_grad():
        full, full_steps = model.answer(model(x), torch.Generator().manual_seed(3))
        early, early_steps = model.infer(x, torch.Generator().manual_seed(3))
    torch.testing.assert_close(early_steps, full_steps)
    torch.testing.assert_close(early, full, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(model.halting_prior(9), torch.full((9,), 1 / 9))


def test_lambda_p_does_nothing_under_the_uniform_prior():
    """What UNUSED_WHEN declares for the run folders: with learned halting λ_p changes nothing (loss,
    gradients, answers); in the frozen control it sets λ_n."""
    x, y = inputs("parity_gru")

    def run(lambda_p, learn_halting=True):
        torch.manual_seed(0)
        model = PonderNet(
            ParityStep(n_elements=8, hidden_size=16),
            max_steps=5,
            lambda_p=lambda_p,
            prior="uniform",
            learn_halting=learn_halting,
        )
        out = model(x)
        losses = model.loss(out, y)
        losses["loss"].backward()
        grads = torch.cat([q.grad.flatten() for q in model.parameters() if q.grad is not None])
        with torch.no_grad():
            answer = model.eval().infer(x, torch.Generator().manual_seed(0))
        return losses["loss"].detach(), grads, answer[1]

    for a, b in zip(run(0.1), run(0.7)):
        torch.testing.assert_close(a, b, rtol=0, atol=0)
    frozen_a, frozen_b = run(0.1, False), run(0.7, False)
    assert not torch.equal(frozen_a[0], frozen_b[0])


def test_a_uniform_model_trains_on_tiny_parity():
    """A few updates of the Lightning module on 8-element parity lower the training loss."""
    from tiny_parity import loader, module, quiet_trainer

    m = module(method_options={"prior": "uniform", "beta": 0.1}, lr=3e-3, lr_schedule="constant")
    batch = next(iter(loader(256, batch_size=256, seed=5)))
    before = m.model.loss(m.model(batch[0]), batch[1])["loss"].item()
    quiet_trainer(max_epochs=8).fit(m, loader(256, batch_size=32, seed=5))
    m.model.train()
    after = m.model.loss(m.model(batch[0]), batch[1])["loss"].item()
    assert after < before


def test_the_prior_is_checked():
    with pytest.raises(ValueError, match="geometric"):
        PonderNet(ParityStep(n_elements=8), max_steps=5, prior="poisson")
    with pytest.raises(ValueError, match="uniform one sums to 1"):
        PonderNet(ParityStep(n_elements=8), max_steps=5, prior="uniform", renormalize_prior=True)
