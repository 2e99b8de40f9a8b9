"""What a user can hand the LightningModule wrong, each refused in one line that says what to do: its
options, whether a fit validates (which patience and the plateau schedule watch), and each batch
(checked by :func:`~pondernet_tutorial.fitting.fit`'s ``CheckBatches``, before the step: on a GPU only
the check of the first batch of training, of validation and of testing reads values from the device,
so it waits once in each; on the CPU every batch's targets are checked).
"""

from __future__ import annotations

import numbers

import lightning as L
import torch
from lightning.pytorch.utilities.model_helpers import is_overridden
from torch import Tensor

from .halting import is_finite_number
from .methods.base import per_sample_cross_entropy


def check_module(model, lr, lr_schedule, lr_patience, lr_factor, eval_seed) -> dict:
    """:class:`~pondernet_tutorial.PonderLitModule`'s arguments; its numbers as Python's (numpy's would be
    pickled into the checkpoints as numpy objects, which a checkpoint read as data refuses)."""
    if not callable(getattr(model, "loss", None)):  # a step function, not yet in a halting method
        raise TypeError(f"model must be a halting method, e.g. PonderNet({type(model).__name__}(...)).")
    if not is_finite_number(lr) or not lr > 0 or lr_schedule not in ("plateau", "constant"):
        raise ValueError(f"need lr > 0 and lr_schedule 'plateau' or 'constant', got {lr!r}, {lr_schedule!r}.")
    for name, value in (("lr_patience", lr_patience), ("eval_seed", eval_seed)):
        if isinstance(value, bool) or not isinstance(value, numbers.Integral) or not 0 <= value < 2**63:
            raise ValueError(f"{name} must be a whole number from 0 to 2**63 - 1, got {value!r}.")
    if not is_finite_number(lr_factor) or not 0 < lr_factor < 1:
        raise ValueError(
            f"lr_factor must lie strictly between 0 and 1 (it scales the rate), got {lr_factor!r}."
        )
    return dict(
        lr=float(lr), lr_factor=float(lr_factor), lr_patience=int(lr_patience), eval_seed=int(eval_seed)
    )


def validates(datamodule, limit_val_batches) -> bool:
    """Whether a fit validates: validation batches not turned off, and a data module (if any) that
    gives validation data."""
    return limit_val_batches != 0 and (
        datamodule is None or is_overridden("val_dataloader", datamodule, L.LightningDataModule)
    )


def check_batch(batch, model, precision="32-true") -> None:
    """``batch`` must be ``(inputs, targets)``, its targets class indices, its inputs not float64 for a
    model of another dtype (numpy's default: torch's layers would fail deep inside the first step),
    and, at the Trainer's default ``precision`` (which converts no input), of the model's dtype."""
    if not isinstance(batch, (tuple, list)) or len(batch) != 2:
        what = f"{len(batch)} items" if isinstance(batch, (tuple, list)) else type(batch).__name__
        raise ValueError(
            f"a batch must be (inputs, targets), got {what}: give a dataset of pairs, such as TensorDataset(x, y)."
        )
    x, y = batch
    if not isinstance(y, Tensor) or y.is_floating_point() or y.is_complex():
        raise ValueError(
            f"targets must be class indices (an integer tensor), got {getattr(y, 'dtype', type(y).__name__)}: "
            "this module trains classifiers (it scores accuracy and keeps the best epoch by it)."
        )
    if model.loss_fn is per_sample_cross_entropy and y.dtype != torch.long:  # torch's cross-entropy
        raise ValueError(f"targets must be class indices of dtype torch.long, got {y.dtype}: use y.long().")
    weight = next(model.parameters(), None)
    if (
        not isinstance(x, Tensor)
        or weight is None
        or not weight.is_floating_point()
        or weight.dtype == x.dtype
    ):
        return
    if x.dtype == torch.float64 or (x.is_floating_point() and str(precision) in ("32-true", "32")):
        cast = {
            torch.float32: "x.float()",
            torch.float64: "x.double() (or the Trainer's precision='64-true')",
        }
        raise ValueError(
            f"the inputs are {str(x.dtype)[6:]} and the model's weights {weight.dtype}: use "
            f"{cast.get(weight.dtype, f'x.to({weight.dtype})')}."
        )


CLASS_ADVICE = "number the classes from 0, or give the step's output layer more"


def check_step_returns(model, x, y=None) -> int | None:
    """One step of ``model``'s step function on two inputs, in eval mode (no batch statistics move, no
    dropout draws) and on a copy of the random state, must return three values ``(ŷ_n, z_n,
    h_next)``: a step that returns two, or ``None``, would fail in the unroll's unpacking in Python's
    words. The targets ``y`` (of the same batch) must be classes of that prediction
    (:func:`check_classes`). Returns the number of classes, where the step predicts classes."""
    step_function = getattr(model, "step_function", None)
    if step_function is None or not isinstance(x, Tensor):
        return None
    training = step_function.training
    devices = [x.device] if x.device.type == "cuda" else []  # a step may draw (a random first state)
    try:
        with torch.no_grad(), torch.random.fork_rng(devices=devices):
            context = step_function.eval().encode(x[:2])
            out = step_function.step(context, step_function.initial_state(context))
    finally:
        step_function.train(training)
    if not isinstance(out, (tuple, list)) or len(out) != 3:
        what = f"{len(out)} values" if isinstance(out, (tuple, list)) else type(out).__name__
        raise ValueError(
            f"{type(step_function).__name__}.step must return three values, (ŷ_n, z_n, h_next): the "
            f"prediction, the halting logit and the next state; it returned {what}."
        )
    if (
        isinstance(out[0], Tensor)
        and out[0].dim() == 2
        and model.loss_fn is per_sample_cross_entropy
        and isinstance(y, Tensor)
    ):
        check_classes(y, out[0].shape[-1], "the step", CLASS_ADVICE)
        return out[0].shape[-1]
    return None


def check_classes(y: Tensor, classes: int, who: str, advice: str) -> None:
    """The targets ``y`` must be classes of a prediction over ``classes`` (0 to classes - 1), or a
    ``ValueError`` naming ``who`` predicts them and the ``advice``: torch's cross-entropy fails on others
    in its own words, and on a GPU with a device-side assert that ends the session. It reads the
    device once."""
    if not y.numel():
        return
    y = y.detach() if y.is_floating_point() else y.detach().long()
    low, high = (float(v) for v in torch.aminmax(y))
    if not 0 <= low <= high < classes:  # (a NaN fails too)
        raise ValueError(
            f"targets must be classes from 0 to {classes - 1} ({who} predicts {classes}), got "
            f"{low if low < 0 else high:g}: {advice}."
        )
