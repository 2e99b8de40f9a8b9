"""The 40-line PonderNet of the book computes what the package computes.

Deliberate breaks these tests catch (each was tried): ``heads[-1] = True`` removed from
``sample_halting_step`` (test_the_coins_stop_every_sample_by_the_last_step); ``optimizer.zero_grad()``
removed from ``train_on_parity`` (test_each_update_uses_its_own_batchs_gradient).
"""

import copy

import pytest
import torch
import torch.nn.functional as F

from pondernet_tutorial.data.parity import parity_batch
from pondernet_tutorial.halting import sample_halting_step
from pondernet_tutorial.methods.pondernet import PonderLoss, PonderNet, log_halting_distribution
from pondernet_tutorial.minimal import (
    MinimalPonderNet,
    halting_log_p,
    ponder_loss,
    train_on_parity,
)
from pondernet_tutorial.minimal import sample_halting_step as minimal_sample
from pondernet_tutorial.steps.parity import ParityStep


def test_halting_distribution_equals_the_package():
    torch.manual_seed(0)
    z = 3 * torch.randn(12, 7, dtype=torch.float64)
    z[1, 0], z[2, 1], z[4, 2] = 40.0, -40.0, 25.0  # saturated sigmoids: log space must stay finite
    ours, package = halting_log_p(z), log_halting_distribution(z)
    assert torch.isfinite(ours).all()
    torch.testing.assert_close(ours, package, rtol=0, atol=1e-12)
    torch.testing.assert_close(ours.exp().sum(0), torch.ones(7, dtype=torch.float64))


@pytest.mark.parametrize("lambda_p, beta", [(0.2, 0.01), (0.1, 0.5), (0.5, 0.0)])
def test_loss_and_its_gradient_equal_the_package(lambda_p, beta):
    torch.manual_seed(1)
    n_steps, batch, n_classes = 9, 5, 4
    y_hat = torch.randn(n_steps, batch, n_classes, requires_grad=True)
    z = torch.randn(n_steps, batch, requires_grad=True)
    y = torch.randint(0, n_classes, (batch,))

    ours = ponder_loss(y_hat, z, y, lambda_p, beta)
    ours_grads = torch.autograd.grad(ours, (y_hat, z))
    package = PonderLoss(lambda_p, n_steps, beta)(y_hat, log_halting_distribution(z), y)["loss"]
    package_grads = torch.autograd.grad(package, (y_hat, z))

    torch.testing.assert_close(ours, package)
    for a, b in zip(ours_grads, package_grads):
        torch.testing.assert_close(a, b)


def test_exercise_two_a_loss_averaged_over_everything_leaves_the_halting_untrained():
    """The chapter's exercise 2: with the default mean reduction and no ``.view``, the task loss is one
    number for every step and sample; the p_n, which sum to 1, weigh it to itself, and L_Rec gives the
    halting no gradient. The per-sample loss does give it one."""
    torch.manual_seed(2)
    n_steps, batch, n_classes = 6, 5, 3
    y_hat = torch.randn(n_steps, batch, n_classes, dtype=torch.float64)
    y = torch.randint(0, n_classes, (batch,))
    z = torch.randn(n_steps, batch, dtype=torch.float64, requires_grad=True)
    averaged = F.cross_entropy(y_hat.reshape(-1, n_classes), y.repeat(n_steps))  # the exercise's change
    rec = (halting_log_p(z).exp() * averaged).sum(0).mean()
    torch.testing.assert_close(rec, averaged)
    assert torch.autograd.grad(rec, z)[0].abs().max() < 1e-12
    per_sample = ponder_loss(y_hat, z, y, beta=0.0)
    assert torch.autograd.grad(per_sample, z)[0].abs().max() > 1e-3


def test_same_network_and_coins_as_the_package():
    """With the weights of a package PonderNet over ParityStep, the minimal model unrolls the same
    predictions and halting logits, and its coins stop at the same steps for the same seed."""
    torch.manual_seed(2)
    package = PonderNet(ParityStep(n_elements=6, hidden_size=16), max_steps=7).train()
    minimal = MinimalPonderNet(6, 2, hidden_size=16, max_steps=7)
    weights = package.step_function.state_dict()
    renamed = {"output_head": "output", "halting_head": "halt"}
    minimal.load_state_dict(
        {renamed.get(k.split(".")[0], k.split(".")[0]) + k[k.index(".") :]: v for k, v in weights.items()}
    )
    x = torch.randint(-1, 2, (11, 6)).float()

    full = package(x)  # training mode: all N steps
    y_hat, z = minimal(x)
    torch.testing.assert_close(y_hat, full.logits)
    torch.testing.assert_close(z, full.halting_logits)

    ours = minimal_sample(z, torch.Generator().manual_seed(3))
    theirs = sample_halting_step(z, torch.Generator().manual_seed(3))
    assert torch.equal(ours, theirs)
    assert len(set(ours.tolist())) > 1  # the coins differ between samples: the check is not vacuous


def test_training_learns_parity_of_three_elements():
    torch.manual_seed(4)
    model = MinimalPonderNet(3, 2, hidden_size=16, max_steps=4)
    losses = train_on_parity(model, updates=300, generator=torch.Generator().manual_seed(5))
    assert len(losses) == 300
    assert sum(losses[:20]) / 20 > 0.6  # chance: log 2 = 0.69
    assert sum(losses[-20:]) / 20 < 0.2


def test_the_coins_stop_every_sample_by_the_last_step():
    """λ_N = 1: a network whose halting probabilities are all about 0 still stops at step N."""
    assert minimal_sample(torch.full((5, 4), -30.0), torch.Generator().manual_seed(0)).tolist() == [5] * 4


def test_each_update_uses_its_own_batchs_gradient():
    """Two updates of train_on_parity are two Adam steps on fresh batches, each from that batch's
    gradient alone (the gradients are zeroed between them), as a loop written out here."""
    torch.manual_seed(6)
    model = MinimalPonderNet(3, 2, hidden_size=8, max_steps=4)
    reference = copy.deepcopy(model)
    train_on_parity(model, updates=2, generator=torch.Generator().manual_seed(7))
    optimizer, generator = torch.optim.Adam(reference.parameters(), lr=3e-3), torch.Generator().manual_seed(7)
    for _ in range(2):
        x, y, _ = parity_batch(128, 3, (1, 3), generator)
        optimizer.zero_grad()
        ponder_loss(*reference(x), y, beta=0.01).backward()
        optimizer.step()
    for ours, theirs in zip(model.parameters(), reference.parameters(), strict=True):
        torch.testing.assert_close(ours, theirs)
