"""The fixed-step baseline: always ``k`` steps, trained on the prediction of step ``k``.

Same step function, same optimiser, no halting: ``k = 1`` asks what one step can do, ``k = N`` what
the full budget can do when every input gets it. The halting logits are computed (the step function
returns them) but never used.
"""

from __future__ import annotations

import torch
from torch import Tensor

from .base import HaltingMethod, Unroll, finite_input, per_sample_loss


class FixedSteps(HaltingMethod):
    """Always ``max_steps`` steps; the answer is the last step's prediction ``ŷ_k``.

    Args:
        step_function: the network that is applied at every step.
        max_steps: ``k``, the number of steps every input gets.
        loss_fn: per-sample task loss (cross-entropy by default).
        eval_max_steps: the steps at evaluation and inference (default ``k``): the answer is then the
            prediction of step ``eval_max_steps``, the same network run for longer than it was trained for.
    """

    loss_terms = ("task",)

    def __init__(self, step_function, max_steps: int = 1, loss_fn=None, eval_max_steps: int | None = None):
        super().__init__(step_function, max_steps, loss_fn, eval_max_steps=eval_max_steps)

    def weights(self, out: Unroll) -> Tensor:
        """All weight on the last step unrolled."""
        p = torch.zeros_like(out.halting_logits, dtype=torch.float32)
        p[-1] = 1.0
        return p

    def answer(self, out: Unroll, generator=None) -> tuple[Tensor, Tensor]:
        """``ŷ_k`` and ``k`` (no coin: ``generator`` is unused)."""
        k, batch = out.halting_logits.shape
        return out.logits[-1], out.halting_logits.new_full((batch,), k, dtype=torch.long)

    def loss(self, out: Unroll, targets: Tensor) -> dict[str, Tensor]:
        task = per_sample_loss(self.loss_fn, out.logits[-1].float(), targets).mean()  # ℒ(y, ŷ_k)
        return {"loss": task, "task": task, "weights": self.weights(out)}

    def infer(self, x, generator=None) -> tuple[Tensor, Tensor]:
        """Every sample runs ``eval_max_steps`` steps: no early exit."""
        return self.answer(self(finite_input(x, next(self.parameters()).dtype), self.eval_steps))
