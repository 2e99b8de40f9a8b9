"""The run machinery's module (:class:`~pondernet_tutorial.runs.module.RunModule`) is the plain
:class:`~pondernet_tutorial.PonderLitModule` built from names, with a fast path: its own gradient
clipping, the training values summed on the device (one tensor, handed to the metrics once an epoch),
metrics without the NaN check that makes the host wait, and ``torch.compile``. The fast path must
compute what the plain module computes: the same weights after a few training steps and the same
logged epoch means (up to the rounding of a sum taken in another order). A module built from names
pickles, as ``ddp_spawn`` needs.

Deliberate breaks these tests catch (each was tried):
- ``RunModule.stage_metrics`` with a wrong metric (``SumMetric`` instead of ``MeanMetric``):
  test_the_fast_path_trains_and_logs_as_the_plain_module;
- ``RunModule.configure_gradient_clipping`` not clipping (``grad_clip`` ignored):
  test_the_fast_path_trains_and_logs_as_the_plain_module;
- ``build_model`` dropping ``method_options`` or the loss: test_the_names_build_the_plain_model;
- ``RunModule.summed_values`` adding the batch's mean instead of its sum:
  test_the_fast_path_trains_and_logs_as_the_plain_module;
- ``build_model`` letting a method's TypeError through for an option it does not take:
  test_names_and_options_that_build_no_model_are_refused.
"""

import functools
import pickle

import pytest
import torch
from tiny_parity import PARITY, loader, module, quiet_trainer, run_module, weighted_cross_entropy

from pondernet_tutorial.runs.module import RunModule

METHOD_OPTIONS = {
    "pondernet": {"lambda_p": 0.3, "beta": 0.02},
    "act": {"tau": 0.01, "halting_bias": -1.0},
    "fixed": {},
}


def trained(m, clip=None, epochs=2):
    """``m`` after ``epochs`` epochs of 2 batches (clipped by the Trainer where ``clip`` is given) and
    the trainer's last logged values."""
    trainer = quiet_trainer(max_epochs=epochs, num_sanity_val_steps=0, gradient_clip_val=clip)
    trainer.fit(m, loader(128, batch_size=64), loader(96, batch_size=32, seed=1))
    return m, trainer.callback_metrics


def pair(method, seed=0, **run_options):
    """The plain module and the run's module around the same model, with the same initial weights."""
    options = METHOD_OPTIONS[method]
    torch.manual_seed(seed)
    plain = module(method, 5, method_options=options, lr=0.05, lr_patience=0)
    torch.manual_seed(seed)
    fast = run_module(method, 5, method_options=options, lr=0.05, lr_patience=0, **run_options)
    return plain, fast


@pytest.mark.parametrize("method", sorted(METHOD_OPTIONS))
def test_the_fast_path_trains_and_logs_as_the_plain_module(method):
    """Clipping by the module (RunModule) against clipping by the Trainer (the plain module), the
    metrics without the NaN check against torchmetrics' default: the same weights, bit for bit, and the
    same means of every logged value, training's and validation's."""
    plain, fast = pair(method, grad_clip=0.05)
    for (name, p), (_, q) in zip(plain.named_parameters(), fast.named_parameters()):
        assert torch.equal(p, q), name  # the same model, the same start
    (plain, logged), (fast, fast_logged) = trained(plain, clip=0.05), trained(fast)
    for (name, p), (_, q) in zip(plain.named_parameters(), fast.named_parameters()):
        torch.testing.assert_close(p, q, rtol=0, atol=0, msg=name)
    stages = (("train", plain.train_metrics), ("val", plain.val_metrics))
    expected = {f"{stage}/{name}" for stage, metrics in stages for name in metrics}
    assert expected <= set(logged) and set(logged) == set(fast_logged)
    for name in sorted(logged):
        torch.testing.assert_close(logged[name], fast_logged[name], rtol=1e-6, atol=1e-6, msg=name)
    torch.manual_seed(0)  # the clipping took hold: without it the weights part
    unclipped, _ = trained(pair(method)[1])
    moved = sum(not torch.equal(p, q) for p, q in zip(unclipped.parameters(), fast.parameters()))
    assert moved > 0


@pytest.mark.slow
def test_the_compiled_unroll_trains_as_the_plain_module():
    """``compile=True``: the same weights and logged means, up to the rounding of fused kernels."""
    torch._dynamo.reset()
    plain, fast = pair("pondernet", grad_clip=0.05, compile=True)
    (plain, logged), (fast, fast_logged) = trained(plain, clip=0.05), trained(fast)
    assert fast.compiled
    for (name, p), (_, q) in zip(plain.named_parameters(), fast.named_parameters()):
        torch.testing.assert_close(p, q, rtol=1e-4, atol=1e-5, msg=name)
    for name in sorted(logged):
        torch.testing.assert_close(logged[name], fast_logged[name], rtol=1e-4, atol=1e-5, msg=name)


def test_the_names_build_the_plain_model():
    """The names a model file holds rebuild the model: its class, options and loss; saved as plain data
    beside the plain module's settings, without the fast path's (grad_clip, compile)."""
    loss = functools.partial(weighted_cross_entropy, weight=2.0)
    m = run_module("act", max_steps=7, method_options={"tau": 0.02}, loss_fn=loss, grad_clip=0.5)
    assert type(m.model).__name__ == "ACT" and m.model.max_steps == 7 and m.model.tau == 0.02
    assert m.model.loss_fn(torch.zeros(2, 2), torch.zeros(2, dtype=torch.long)).tolist() == pytest.approx(
        [2 * 0.6931] * 2, abs=1e-4
    )
    assert dict(m.hparams) == {
        **PARITY,
        "method": "act",
        "method_options": {"max_steps": 7, "tau": 0.02},
        "loss_fn": {"partial": "tiny_parity:weighted_cross_entropy", "keywords": {"weight": 2.0}},
        "lr": 1e-3,
        "lr_schedule": "plateau",
        "lr_patience": 2,
        "lr_factor": 0.5,
        "eval_seed": 0,
    }
    assert RunModule(**dict(m.hparams)).hparams == m.hparams  # a model file's hparams build it again
    copy = pickle.loads(pickle.dumps(m))  # what ddp_spawn sends to its workers
    assert copy.hparams == m.hparams and torch.equal(
        copy.model.loss_fn(torch.zeros(1, 2), torch.tensor([1])),
        m.model.loss_fn(torch.zeros(1, 2), torch.tensor([1])),
    )


def test_names_and_options_that_build_no_model_are_refused():
    """What a run or a model file may name: a registered step, method and loss (a lambda cannot be
    saved as a name), options the method takes, in their ranges, and at least two classes."""
    with pytest.raises(ValueError, match="does not take"):  # the ranges: tests/core/test_lightning.py
        run_module(method="act", method_options={"lambda_p": 0.2})
    with pytest.raises(ValueError, match="n_classes"):
        RunModule("parity_gru", 1, step_options={"n_elements": 8})
    with pytest.raises(ValueError, match="unknown method"):
        run_module(method="never")
    with pytest.raises(ValueError, match="unknown step function"):
        RunModule("nope", 2)
    with pytest.raises(ValueError, match="lambda"):
        run_module(loss_fn=lambda logits, y: torch.nn.functional.cross_entropy(logits, y, reduction="none"))
