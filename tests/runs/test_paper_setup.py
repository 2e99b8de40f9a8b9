"""The paper's parity set-up: its tanh RNN, its rule for N in training, an evaluation budget larger than
training's, ACT's evaluation budget, and the control with λ_n frozen at λ_p.

Deliberate breaks these tests catch (each was tried):
- the ε rule cutting at Σ p ≥ 1 − ε − 0.01 instead of Σ p > 1 − ε: test_epsilon_rule_matches_the_paper;
- the step at N_ε left to the network's own λ (no logit 1e4, λ = 1, put there by ``truncate_at_epsilon``):
  test_epsilon_rule_matches_the_paper;
- the loss of an evaluation unroll computed over its last N steps instead of its first:
  test_the_evaluation_budget_changes_inference_not_the_loss;
- the frozen control's early exit seeing the network's λ (``lambda_logits`` returning ``z`` in ``infer``):
  test_the_frozen_control_ignores_the_input;
- an option added without its place in ``OMITTED_AT_DEFAULT``: test_new_options_leave_the_shipped_identities_alone.
"""

import pytest
import torch

from pondernet_tutorial.methods.act import ACT
from pondernet_tutorial.methods.base import expected_steps
from pondernet_tutorial.methods.pondernet import PonderNet, log_halting_distribution, truncate_at_epsilon
from pondernet_tutorial.runs.config import TrainConfig
from pondernet_tutorial.steps.parity import ParityRNNStep


def paper_p(lam: torch.Tensor, epsilon: float) -> torch.Tensor:
    """The truncated distribution, one sample at a time, from the paper's words: p_n = λ_n Π(1 − λ_j);
    N is the smallest n with Σ_{j≤n} p_j > 1 − ε (or the last step); the mass left goes to step N."""
    n_steps, batch = lam.shape
    out = torch.zeros(n_steps, batch, dtype=torch.float64)
    for b in range(batch):
        survive, total = 1.0, 0.0
        for n in range(n_steps):
            p = float(lam[n, b]) * survive if n < n_steps - 1 else survive
            total += p
            if total > 1 - epsilon or n == n_steps - 1:
                out[n, b] = survive  # everything not yet halted halts here
                break
            out[n, b] = p
            survive *= 1 - float(lam[n, b])
    return out


@pytest.mark.parametrize("epsilon", [0.05, 0.3])
def test_epsilon_rule_matches_the_paper(epsilon):
    torch.manual_seed(0)
    z = torch.randn(12, 400) - 1.5  # (N, B)
    truncated = log_halting_distribution(truncate_at_epsilon(z, epsilon)).exp().double()
    expected = paper_p(torch.sigmoid(z.double()), epsilon)
    torch.testing.assert_close(truncated, expected, rtol=1e-5, atol=1e-6)
    lengths = (expected > 0).sum(0)
    assert lengths.float().std() > 0.5 and (lengths < 12).any()  # the rule really cuts, at various n


def test_truncated_training_has_finite_losses_and_gradients():
    torch.manual_seed(0)
    model = PonderNet(ParityRNNStep(8, hidden_size=16), max_steps=10, lambda_p=0.1, train_epsilon=0.05)
    with torch.no_grad():
        model.step_function.halting_head.bias.fill_(1.0)  # halts early: most samples are truncated
    x = torch.randint(-1, 2, (64, 8)).float()
    y = ((x == 1).sum(1) % 2).long()
    out = model(x)
    p = model.weights(out)  # training mode: the ε rule
    assert (p[-1] == 0).float().mean() > 0.5  # cut before the last step
    torch.testing.assert_close(p.sum(0), torch.ones(64))
    losses = model.loss(out, y)
    losses["loss"].backward()
    assert all(torch.isfinite(v).all() for v in losses.values())
    assert all(torch.isfinite(p.grad).all() for p in model.parameters() if p.grad is not None)
    with pytest.raises(ValueError, match="p_prior"):
        PonderNet(ParityRNNStep(8), max_steps=10, train_epsilon=0.05, kl_direction="prior_p")


def test_the_evaluation_budget_changes_inference_not_the_loss():
    torch.manual_seed(0)
    model = PonderNet(ParityRNNStep(8, hidden_size=16), max_steps=6, lambda_p=0.1, eval_max_steps=30).eval()
    with torch.no_grad():
        model.step_function.halting_head.bias.fill_(-3.0)  # λ ≈ 0.05: many samples go past step 6
    x = torch.randint(-1, 2, (300, 8)).float()
    y = ((x == 1).sum(1) % 2).long()
    with torch.no_grad():
        eval_view = model(x)  # eval mode: the evaluation's budget
        train_view = model.train()(x)  # training's
        model.eval()
        _, halt_step = model.infer(x, generator=torch.Generator().manual_seed(0))
    assert train_view.logits.shape[0] == 6 and eval_view.logits.shape[0] == 30
    torch.testing.assert_close(model.loss(train_view, y), model.loss(eval_view, y))
    assert (halt_step > 6).float().mean() > 0.3
    torch.testing.assert_close(model.weights(eval_view).sum(0), torch.ones(300))


def test_act_evaluates_with_its_own_budget():
    torch.manual_seed(0)
    act = ACT(ParityRNNStep(8, hidden_size=16), max_steps=5, halting_bias=-4.0, eval_max_steps=40).eval()
    x = torch.randint(-1, 2, (50, 8)).float()
    with torch.no_grad():
        assert act.train().answer(act(x))[1].max() <= 5
        act.eval()
        (_, early), (_, full) = act.infer(x), act.answer(act(x))
    assert early.min() > 5  # h ≈ 0.02: about 50 steps needed, 40 allowed
    assert torch.equal(early, full)


def test_the_frozen_control_ignores_the_input():
    torch.manual_seed(0)
    model = PonderNet(ParityRNNStep(8, hidden_size=16), max_steps=20, lambda_p=0.2, learn_halting=False)
    x = torch.randint(-1, 2, (4000, 8)).float()
    y = ((x == 1).sum(1) % 2).long()
    out = model(x)
    model.loss(out, y)["loss"].backward()
    assert model.step_function.halting_head.weight.grad is None  # λ is not learned
    steps = expected_steps(model.weights(out).detach())
    torch.testing.assert_close(steps, steps[:1].expand(4000))  # the same for all
    model.eval()
    with torch.no_grad():
        sampled = model.infer(x, generator=torch.Generator().manual_seed(1))[1].float()
    geometric_mean = steps[0]
    assert abs(sampled.mean() - geometric_mean) < 0.2  # Bernoulli(λ_p) coins, whatever the network says


def test_new_options_leave_the_shipped_identities_alone():
    old = TrainConfig(experiment="parity-interpolation").identity()
    assert not {"train_epsilon", "learn_halting", "eval_max_steps"} & set(old)
    assert "eval_max_steps" not in TrainConfig(experiment="parity-interpolation", method="act").identity()
    paper = TrainConfig(experiment="parity-paper16-interpolation")
    options = paper.method_options
    assert (options["train_epsilon"], options["lambda_p"], options["eval_max_steps"], paper.step) == (
        0.05,
        0.1,
        100,
        "parity_rnn",
    )
    assert paper.variant == "pondernet-lambda_p=0.1-beta=0.01"
    control = TrainConfig(experiment="parity-paper16-interpolation", method_options={"learn_halting": False})
    assert control.variant == "pondernet-lambda_p=0.1-beta=0.01-learn_halting=false"
