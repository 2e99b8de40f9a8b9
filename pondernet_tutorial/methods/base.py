"""What every halting method shares: the full unroll, ``forward(x)``, that training uses (every step for
every sample: fixed shapes, no wait for the device), the per-sample task loss and ``E[n]``. The other way
through a method is ``infer``."""

from __future__ import annotations

from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..halting import check_bias, check_max_steps
from ..steps.base import StepFunction, check_step, halting_head


class Unroll(NamedTuple):  # every step's prediction ŷ_n (N, B, C) and halting logit z_n (N, B)
    logits: Tensor
    halting_logits: Tensor


def per_sample_cross_entropy(logits: Tensor, targets: Tensor) -> Tensor:
    """Cross-entropy of every sample, not reduced: ``(M, C), (M,) -> (M,)``."""
    return F.cross_entropy(logits, targets, reduction="none")


def per_sample_loss(loss_fn, logits: Tensor, targets: Tensor) -> Tensor:
    """``loss_fn(logits, targets)``, checked to give one loss per sample (no reduction)."""
    losses = loss_fn(logits, targets)
    if losses.shape != targets.shape[:1]:
        raise ValueError(
            f"loss_fn must return one loss per sample, shape {tuple(targets.shape[:1])}, got {tuple(losses.shape)} "
            f"from predictions {tuple(logits.shape)}: use reduction='none', on predictions of the targets' shape."
        )
    return losses


def expected_steps(p: Tensor) -> Tensor:
    """``(B,)`` ``E[n] = Σ_n n · p_n`` of a ``(N, B)`` distribution over the steps, between 1 and N."""
    steps = torch.arange(1, p.shape[0] + 1, device=p.device, dtype=p.dtype)
    return (p * steps[:, None]).sum(0)


def at_step(logits: Tensor, step: Tensor) -> Tensor:
    """``(B, C)``: each sample's prediction at its step ``n`` in 1..N (``logits``: ``(N, B, C)``)."""
    return logits.gather(0, (step - 1).view(1, -1, 1).expand(1, -1, logits.shape[-1])).squeeze(0)


def finite_input(x: Tensor, dtype: torch.dtype) -> Tensor:
    """An input given to ``infer``: finite floats, cast to the model's dtype (other tensors as given)."""
    if isinstance(x, Tensor) and x.is_floating_point():
        if bad := int((~torch.isfinite(x)).sum()):
            raise ValueError(f"the input holds NaN or infinite values ({bad} of {x.numel()}): fix them.")
        return x.to(dtype)
    return x


class HaltingMethod(nn.Module):
    """A step function, unrolled for ``max_steps`` steps (``eval_max_steps`` ≥ ``max_steps`` in eval mode).

    A subclass says four things: ``loss(out, y)`` trains on a full unroll (its dict holds the loss terms
    and ``"weights"``, the ``p_n`` it used); ``weights(out)`` gives its steps' weights ``p_n``;
    ``answer(out, generator)`` the answer and halting step that inference would take, drawn from it;
    ``infer(x, generator)`` is inference itself, each sample leaving at its halting step.

    Args:
        step_function: the network applied at every step.
        loss_fn: per-sample task loss ``(logits (M, C), targets (M,)) -> (M,)``; cross-entropy by default.
        halting_bias: if given, the initial bias of the step function's ``halting_head``.
    """

    loss_terms: tuple[str, ...] = ()  # the named terms of loss() besides "loss"
    random_halting = False  # answer() and infer() flip coins: the halting step is random
    step_answers = True  # the answer is one step's prediction ŷ_n (the per-step tables)

    def halting_prior(self, n_steps: int) -> Tensor | None:
        """The distribution over steps 1..n_steps that the method pulls ``p_n`` towards; None: no prior."""
        return None

    def __init__(self, step_function, max_steps, loss_fn=None, halting_bias=None, eval_max_steps=None):
        super().__init__()
        if not isinstance(step_function, StepFunction):
            raise TypeError(f"step_function must be a StepFunction, got {type(step_function).__name__}.")
        self.step_function = step_function
        self.max_steps = check_max_steps(max_steps)
        self.eval_steps = (
            self.max_steps if eval_max_steps is None else check_max_steps(eval_max_steps, "eval_max_steps")
        )
        if self.eval_steps < self.max_steps:  # validation's loss reads the first max_steps steps
            raise ValueError(f"eval_max_steps ({eval_max_steps}) must be >= max_steps ({max_steps}).")
        self.loss_fn = loss_fn or per_sample_cross_entropy
        if halting_bias is not None:  # the halting head's initial bias (ACT's +1)
            nn.init.constant_(halting_head(step_function).bias, check_bias(halting_bias))

    def forward(self, x, steps: int | None = None) -> Unroll:
        steps = steps or (self.max_steps if self.training else self.eval_steps)  # every step, every sample
        context = self.step_function.encode(x)  # once per forward pass, not once per step
        h = self.step_function.initial_state(context)
        logits, halting_logits = [], []
        for _ in range(steps):
            y_n, z_n, h = self.step_function.step(context, h)  # (ŷ_n, z_n, h_{n+1}) = s(x, h_n)
            if not logits and (getattr(z_n, "shape", None) != y_n.shape[:1] or y_n.dim() != 2):
                check_step(y_n, z_n)  # the first step's shapes: what is wrong, before it broadcasts
            logits.append(y_n)
            halting_logits.append(z_n)
        return Unroll(torch.stack(logits), torch.stack(halting_logits))
