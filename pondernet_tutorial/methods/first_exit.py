"""Inference with early exit for the heads that halt by a rule on their own logits (TRM's, HRM's).

Each sample leaves after the first step ``n`` whose halting logits ``z_n`` satisfy the head's rule
(TRM: ``q_n > 0``; HRM: ``q^halt_n > q^cont_n``), or at the step limit, with that step's answer ``ŷ_T``.
The loop is :meth:`PonderNet.infer <pondernet_tutorial.methods.pondernet.PonderNet.infer>`'s, whose
rule is a coin instead: halted samples leave the batch, and the loop ends when none is left.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

from ..steps.base import select_rows, state_batch_size
from .base import HaltingMethod, finite_input


def exit_at_first(method: HaltingMethod, x, halts: Callable[[Tensor], Tensor]) -> tuple[Tensor, Tensor]:
    """``prediction (B, C)`` and ``T(x) (B,)``: each sample stops at the first step where ``halts(z_n)``
    holds, or at ``method.eval_steps``."""
    device = next(method.parameters()).device
    context = method.step_function.encode(finite_input(x, next(method.parameters()).dtype))
    h = method.step_function.initial_state(context)
    batch, last = state_batch_size(h), method.eval_steps
    running = torch.arange(batch, device=device)  # the samples still computed
    halt_step = torch.full((batch,), last, device=device)
    for n in range(1, last + 1):
        y_n, z_n, h = method.step_function.step(context, h)
        if n == 1:
            prediction = y_n.new_zeros(batch, *y_n.shape[1:])
        halts_now = halts(z_n)
        if n == last:
            halts_now = torch.ones_like(halts_now)  # the step limit
        prediction[running[halts_now]] = y_n[halts_now]  # ŷ_T
        halt_step[running[halts_now]] = n
        running, keep = running[~halts_now], ~halts_now
        if len(running) == 0:
            break  # every sample has halted: the remaining steps are never computed
        context, h = select_rows(context, keep), select_rows(h, keep)  # halted samples leave
    return prediction, halt_step
