"""The run machinery's module, built from names: the names are checked, saved as plain data, and a
module built from them pickles (what ``ddp_spawn`` needs).

Deliberate breaks these tests catch (each was tried):
- ``RunModule`` saving ``grad_clip`` with the hyperparameters (model files would change):
  test_hyperparameters_are_plain_data_and_checked.
"""

import functools
import pickle

import pytest
import torch
import torch.nn.functional as F
from tiny_parity import run_module, weighted_cross_entropy

from pondernet_tutorial.runs.module import RunModule


def test_hyperparameters_are_plain_data_and_checked():
    m = run_module(max_steps=7, method_options={"lambda_p": 0.3, "beta": 0.02}, grad_clip=0.5)
    assert m.hparams.method_options == {"max_steps": 7, "lambda_p": 0.3, "beta": 0.02}
    assert m.hparams.step == "parity_gru" and m.hparams.loss_fn == "cross_entropy"
    assert set(m.hparams) == {
        "step", "n_classes", "method", "step_options", "method_options", "loss_fn",
        "lr", "lr_schedule", "lr_patience", "lr_factor", "eval_seed",
    }  # fmt: skip
    assert m.grad_clip == 0.5
    with pytest.raises(ValueError, match="does not take"):
        run_module(method="act", method_options={"lambda_p": 0.2})
    with pytest.raises(ValueError, match="n_classes"):
        RunModule("parity_gru", 1, step_options={"n_elements": 8})
    with pytest.raises(ValueError, match="unknown method"):
        run_module(method="never")
    with pytest.raises(ValueError, match="unknown step function"):
        RunModule("nope", 2)
    with pytest.raises(ValueError, match="lambda"):
        run_module(loss_fn=lambda logits, y: F.cross_entropy(logits, y, reduction="none"))


def test_a_module_of_names_pickles():
    m = run_module(loss_fn=functools.partial(weighted_cross_entropy, weight=2.0))
    assert m.hparams.loss_fn == {"partial": "tiny_parity:weighted_cross_entropy", "keywords": {"weight": 2.0}}
    copy = pickle.loads(pickle.dumps(m))
    torch.testing.assert_close(
        copy.model.loss_fn(torch.zeros(2, 2), torch.tensor([0, 1])),
        torch.full((2,), 2 * 0.6931),
        atol=1e-4,
        rtol=0,
    )
