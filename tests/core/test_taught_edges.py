"""Edges of the taught code that no test named: a mutation sweep of methods/, halting.py, the
LightningModule, fit() and the fast path (212 mutants, stop 60) left 18 changes alive that break a
promise of a docstring or of the book. Each test below failed under the mutant named in its docstring.
"""

import math

import pytest
import torch
from lightning import LightningDataModule, Trainer
from lightning.pytorch.callbacks import Callback
from torch import nn
from torch.utils.data import TensorDataset

from pondernet_tutorial import (
    ACT,
    FixedSteps,
    MNISTStep,
    ParityStep,
    PonderLitModule,
    PonderLoss,
    PonderNet,
    StepFunction,
    TRMHalting,
    fit,
)
from pondernet_tutorial.capture_check import capture_hazards
from pondernet_tutorial.fast_path import GraphedPonderLitModule, fast_module, graph_blockers
from pondernet_tutorial.fitting import early_stopping, mode
from pondernet_tutorial.halting import check_max_steps
from pondernet_tutorial.steps.mnist import MNISTRefineStep

QUIET = dict(logger=False, enable_progress_bar=False, enable_model_summary=False, accelerator="cpu")


def parity(n=8, elements=8):
    x = torch.randint(-1, 2, (n, elements)).float()
    return x, ((x == 1).sum(-1) % 2).long()


def test_fixed_steps_infers_at_the_evaluations_step_count():
    """(Mutant: FixedSteps.infer unrolls max_steps, not eval_max_steps.)"""
    model = FixedSteps(ParityStep(8, hidden_size=8), max_steps=2, eval_max_steps=5).eval()
    x, _ = parity()
    prediction, halt_step = model.infer(x)
    assert torch.allclose(prediction, model(x).logits[-1]) and (halt_step == 5).all()


def test_trm_trains_one_step_with_exploration():
    """k ~ U{2..N} has nothing to draw from at N = 1. (Mutant: the n_steps < 2 guard dropped.)"""
    model = TRMHalting(ParityStep(8, hidden_size=8), max_steps=1, exploration=1.0).train()
    x, y = parity()
    assert torch.isfinite(model.loss(model(x), y)["loss"])


@pytest.mark.parametrize("epsilon", [0, 1, 1.5])
def test_a_train_epsilon_outside_0_1_is_refused(epsilon):
    """(Mutant: train_epsilon not checked.)"""
    with pytest.raises(ValueError, match="train_epsilon must lie strictly between 0 and 1"):
        PonderNet(ParityStep(8), max_steps=3, train_epsilon=epsilon)


def test_max_steps_true_and_infinite_weights_are_refused():
    """(Mutants: a bool max_steps accepted; β or τ = inf accepted.)"""
    with pytest.raises(ValueError, match="max_steps must be a whole number"):
        check_max_steps(True)
    with pytest.raises(ValueError, match="tau must be >= 0 and finite, got inf"):
        ACT(ParityStep(8), max_steps=3, tau=math.inf)
    with pytest.raises(ValueError, match="beta must be >= 0 and finite, got inf"):
        PonderLoss(lambda_p=0.2, max_steps=3, beta=math.inf)


class Headed(StepFunction):
    def __init__(self, head):
        super().__init__()
        self.halting_head = head


@pytest.mark.parametrize("head", [nn.Linear(4, 1, bias=False), nn.Identity()], ids=["no bias", "not linear"])
def test_a_halting_bias_needs_a_linear_head_with_a_bias(head):
    """(Mutant: only a missing head refused.)"""
    with pytest.raises(ValueError, match="halting_bias needs a halting_head \\(nn.Linear, with a bias\\)"):
        ACT(Headed(head), max_steps=3, halting_bias=1.0)


def data(n=10, batch=4, x=None, y=None):
    if x is None:
        x, y = parity(n)
    return LightningDataModule.from_datasets(TensorDataset(x, y), TensorDataset(x, y), batch_size=batch)


def test_an_uneven_last_batch_counts_each_sample_once():
    """val/loss is the mean over samples, a scalar loss weighing every sample of its batch. (Mutant: a
    scalar counted once per batch.)"""
    torch.manual_seed(0)
    module = PonderLitModule(PonderNet(ParityStep(8, hidden_size=8), max_steps=3))
    x, y = parity(10)
    trainer = Trainer(**QUIET)
    (logged,) = trainer.validate(module, data(10, 4, x, y), verbose=False)
    module.eval()
    with torch.no_grad():
        losses = [module.step_values(x[i : i + 4], y[i : i + 4], evaluation=True)["loss"] for i in (0, 4, 8)]
    expected = (4 * losses[0] + 4 * losses[1] + 2 * losses[2]) / 10
    assert logged["val/loss"] == pytest.approx(float(expected), rel=1e-5)


def test_a_constant_rate_has_no_schedule():
    """(Mutant: lr_schedule="constant" still given the plateau schedule.)"""
    module = PonderLitModule(PonderNet(ParityStep(8), max_steps=3), lr_schedule="constant")
    module.trainer = Trainer(**QUIET)  # with validation: the plateau schedule's condition
    assert isinstance(module.configure_optimizers(), torch.optim.Adam)


class Seen(Callback):
    def __init__(self):
        self.metrics = None

    def on_validation_end(self, trainer, pl_module):
        if not trainer.sanity_checking and self.metrics is None:
            self.metrics = dict(trainer.callback_metrics)


def test_the_training_means_are_logged_before_the_epochs_validation(tmp_path):
    """The plateau schedule and the callbacks read train/ at validation's end. (Mutant: logged only at
    the epoch's end.)"""
    seen = Seen()
    module = PonderLitModule(PonderNet(ParityStep(8, hidden_size=8), max_steps=3))
    fit(module, data(), 1, callbacks=[seen], default_root_dir=tmp_path, **QUIET)
    assert "train/loss" in seen.metrics


def test_stop_at_val_acc_alone_stops_and_a_loss_is_minimised():
    """(Mutants: stop_at_val_acc without patience adds no early stopping; mode() always "max".)"""
    stopping = early_stopping(0, 0.5, 10)
    assert stopping is not None and stopping.stopping_threshold == 0.5
    assert mode("val/loss") == "min" and mode("val/acc") == "max"


class Normed(StepFunction):
    """A step with a batch norm: the capture check must leave its running statistics as they were."""

    def __init__(self):
        super().__init__()
        self.norm, self.out, self.halting_head = nn.BatchNorm1d(8), nn.Linear(8, 2), nn.Linear(8, 1)

    def initial_state(self, x):
        return self.norm(x)

    def step(self, x, h):
        return self.out(h), self.halting_head(h).squeeze(1), h


def test_the_capture_check_changes_no_buffer():
    """(Mutant: the buffers not restored after capture_hazards.)"""
    module = GraphedPonderLitModule(PonderNet(Normed(), max_steps=3)).train()
    before = {name: b.clone() for name, b in module.named_buffers()}
    module.capture_hazards(*parity())
    assert all(torch.equal(before[name], b) for name, b in module.named_buffers())


def test_value_clipping_and_16_mixed_keep_the_eager_path():
    """(Mutants: clipping by value taken by the fast path; 16-mixed not named as a blocker.)"""
    module = PonderLitModule(PonderNet(ParityStep(8), max_steps=3))
    trainer = Trainer(gradient_clip_val=1.0, gradient_clip_algorithm="value", **QUIET)
    assert fast_module(module, trainer) is module
    with pytest.raises(ValueError, match="gradient clipping by norm"):
        fast_module(module, trainer, fast=True)
    assert any("16-mixed" in reason for reason in graph_blockers(Trainer(**QUIET), precision="16-mixed"))


def test_an_operation_whose_shape_depends_on_the_data_is_a_hazard():
    """(Mutant: dynamic-output-shape operations not flagged.)"""
    x = torch.randn(6)
    hazards = capture_hazards(lambda: torch.nonzero(x > 0), torch.device("cpu"))
    assert any("shape depends on the data" in hazard for hazard in hazards)


def test_the_mnist_steps_normalise_and_the_refining_step_adds_its_input():
    """(Mutants: (x − mean)/std dropped; the refining step without its residual F_n.)"""
    torch.manual_seed(0)
    step = MNISTStep().eval()
    x = torch.rand(3, 1, 28, 28)
    normalised = (x - 0.1307) / 0.3081
    assert torch.allclose(step.embedding(x), step.embedding.net(normalised))
    refine = MNISTRefineStep().eval()
    features = refine.encode(x)
    _, _, following = refine.step(features, features)
    assert torch.allclose(following, torch.relu(features + refine.block(features)))


def test_a_size_of_zero_is_refused():
    """(Mutant: size 0 accepted.)"""
    with pytest.raises(ValueError, match="hidden_size must be >= 1, got 0"):
        ParityStep(8, hidden_size=0)


def test_the_training_loss_weighs_the_steps_with_the_epsilon_rule():
    """p_1 = 0.5 and p_2 = 0.475 pass 1 − ε = 0.95 at step 2: the rest of the mass goes there and the
    steps after it weigh nothing. (Mutant: the training loss computed without the ε rule; before, only a
    count of calls in test_layout noticed it.)"""
    from pondernet_tutorial.methods.base import Unroll

    model = PonderNet(ParityStep(8), max_steps=4, train_epsilon=0.05).train()
    halting = torch.logit(torch.tensor([[0.5], [0.95], [0.5], [0.5]]))  # (N, B=1) λ_n
    losses = model.loss(Unroll(torch.zeros(4, 1, 2), halting), torch.tensor([1]))
    assert torch.allclose(losses["weights"][:, 0], torch.tensor([0.5, 0.5, 0.0, 0.0]), atol=1e-6)
