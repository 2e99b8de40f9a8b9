"""The fixed-step baseline: always ``k`` steps, trained on the prediction of step ``k``.

Same step function, same optimiser, no halting: ``k = 1`` asks what one step can do, ``k = N`` what
the full budget can do when every input gets it. The halting logits are computed (the step function
returns them) but never used.
"""

from __future__ import annotations

import torch
from torch import Tensor

from ..losses import per_sample_loss
from .base import PonderingMethod, PonderOutput, unroll


class FixedSteps(PonderingMethod):
    """Always ``max_steps`` steps; the answer is the last step's prediction ``ŷ_k``.

    Args:
        step_function: the network that is applied at every step.
        max_steps: ``k``, the number of steps every input gets.
        loss_fn: per-sample task loss (cross-entropy by default).
        eval_max_steps: the steps at evaluation and inference (default ``k``): the answer is then the
            prediction of step ``eval_max_steps``.
    """

    loss_terms = ("task",)
    step_answers = True

    def __init__(self, step_function, max_steps: int = 1, loss_fn=None, eval_max_steps: int | None = None):
        super().__init__(step_function, max_steps, loss_fn, eval_max_steps=eval_max_steps)

    def forward(self, x) -> PonderOutput:
        return self.evaluation_forward(self.inference_input(x))

    def evaluation_forward(self, x) -> PonderOutput:
        """``eval_max_steps`` steps (default ``k``), answering with the last one's prediction: the same
        network run for longer than it was trained for."""
        return self.fit_forward(x, self.eval_steps)

    def fit_forward(self, x, steps: int | None = None) -> PonderOutput:
        logits, halting_logits, _ = unroll(self.step_function, x, steps or self.max_steps)
        k, batch = halting_logits.shape
        halt_step = halting_logits.new_full((batch,), k, dtype=torch.long)
        p = torch.zeros_like(halting_logits, dtype=logits.dtype)
        p[-1] = 1.0  # all weight on step k
        return PonderOutput(logits, halting_logits, halt_step, steps_run=k, p=p, prediction=logits[-1])

    def loss(self, out: PonderOutput, targets: Tensor) -> dict[str, Tensor]:
        task = per_sample_loss(self.loss_fn, out.prediction.float(), targets).mean()  # ℒ(y, ŷ_k)
        return {"loss": task, "task": task}
