"""Mistakes a user of the Python API plausibly makes, each refused in one line that says what to do
(found by a package-reuse review).

Deliberate breaks these tests catch (each was tried):
- the halting logit's shape not checked in inference (PonderNet's or ACT's): an IndexError or a
  broadcasting error instead, and ACT's training check of its logits removed:
  test_a_halting_logit_of_shape_b_1_is_named;
- PonderLitModule's check of its model removed: test_a_step_function_not_wrapped_in_a_method;
- fit's check of its data module removed: test_fit_wants_a_data_module;
- fit's check of patience or of stop_at_val_acc removed (Lightning takes patience=-1 and stops at the
  first epoch without a better accuracy): test_fit_refuses_a_negative_patience_and_an_accuracy_above_1;
- diagnose judging one input: test_diagnose_gives_no_verdict_from_one_input;
- float(lambda_p) unguarded, and training_threads' check removed:
  test_a_missing_lambda_p_and_negative_threads_are_named.
"""

import pytest
import torch
from lightning import LightningDataModule
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from pondernet_tutorial import ACT, PonderLitModule, PonderNet, StepFunction, diagnose, fit


class Step(StepFunction):
    """A small recurrent step; ``squeeze=False`` keeps the halting logit's last axis, (B, 1), as a user
    who forgot ``.squeeze(1)`` would; ``head`` names its halting layer."""

    def __init__(self, squeeze=True, head="halting_head", n_inputs=4, size=8):
        super().__init__()
        self.squeeze, self.head = squeeze, head
        self.cell = nn.GRUCell(n_inputs, size)
        self.out = nn.Linear(size, 2)
        setattr(self, head, nn.Linear(size, 1))

    def initial_state(self, x):
        return x.new_zeros(len(x), self.cell.hidden_size)

    def step(self, x, h):
        h = self.cell(x, h)
        z = getattr(self, self.head)(h)
        return self.out(h), z.squeeze(1) if self.squeeze else z, h


@pytest.mark.parametrize("method", [PonderNet, ACT])
def test_a_halting_logit_of_shape_b_1_is_named(method):
    model = method(Step(squeeze=False), max_steps=3)
    x, y = torch.randn(5, 4), torch.randint(0, 2, (5,))
    with pytest.raises(ValueError, match=r"halting_head\(h\)\.squeeze\(1\)"):
        model.loss(model(x), y)  # training
    model.eval()
    with pytest.raises(ValueError, match=r"must have shape \(5,\), got \(5, 1\).*squeeze\(1\)"):
        model.infer(x)  # inference, with early exit


def test_a_step_function_not_wrapped_in_a_method():
    with pytest.raises(TypeError, match=r"model must be a halting method, e.g. PonderNet\(Step\(...\)\)"):
        PonderLitModule(Step())
    with pytest.raises(ValueError, match="need lr > 0"):
        PonderLitModule(PonderNet(Step(), max_steps=3), lr="1e-3")


def test_fit_wants_a_data_module():
    loader = DataLoader(TensorDataset(torch.randn(8, 4), torch.randint(0, 2, (8,))), batch_size=4)
    with pytest.raises(TypeError, match="need a LightningDataModule .*got DataLoader"):
        fit(PonderLitModule(PonderNet(Step(), max_steps=3)), loader, max_epochs=1)


def test_halting_bias_names_the_class_not_the_whole_module():
    with pytest.raises(ValueError) as error:
        ACT(Step(head="halt"), max_steps=3, halting_bias=-3.0)
    assert str(error.value) == "halting_bias needs a halting_head (nn.Linear, with a bias) in Step."


def test_diagnose_gives_no_verdict_from_one_input():
    model = PonderNet(Step(), max_steps=3)
    assert (
        diagnose(model, torch.randn(1, 4), difficulty=[2], show=False).verdict
        == "no verdict from a single input"
    )
    assert (
        diagnose(model, torch.randn(2, 4), difficulty=[1, 2], show=False).verdict
        != "no verdict from a single input"
    )


def test_a_missing_lambda_p_and_negative_threads_are_named():
    from pondernet_tutorial.threads import training_threads

    with pytest.raises(ValueError, match="lambda_p must be a number strictly between 0 and 1, got None"):
        PonderNet(Step(), max_steps=3, lambda_p=None)
    with pytest.raises(ValueError, match="threads must be a whole number >= 1"):
        with training_threads(-3):
            pass


@pytest.mark.parametrize(
    "given, message",
    [
        ({"patience": -1}, "patience must be a whole number from 0 to"),
        ({"patience": 2.5}, "patience must be a whole number from 0 to"),
        ({"stop_at_val_acc": 99}, "stop_at_val_acc must be an accuracy from 0 to 1, or None, got 99"),
        ({"stop_at_val_acc": "0.9"}, "stop_at_val_acc must be an accuracy"),
    ],
)
def test_fit_refuses_a_negative_patience_and_an_accuracy_above_1(given, message):
    data = torch.randn(8, 4), torch.randint(0, 2, (8,))
    datamodule = LightningDataModule.from_datasets(TensorDataset(*data), TensorDataset(*data), batch_size=4)
    with pytest.raises(ValueError, match=message):
        fit(PonderLitModule(PonderNet(Step(), max_steps=3)), datamodule, max_epochs=1, **given)
