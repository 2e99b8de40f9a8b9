"""A halting method of the tests' own: registered once (one entry in ``METHODS``), it reaches the command
line, its options become flags, and its runs train, save and load like the book's."""

from __future__ import annotations

import torch.nn.functional as F

from pondernet_tutorial.methods.fixed import FixedSteps


class SmoothedSteps(FixedSteps):
    """Always ``max_steps`` steps, the last step's answer trained with label smoothing.

    Args:
        step_function: the network that is applied at every step.
        max_steps: the number of steps every input gets.
        loss_fn: unused (the loss is the smoothed cross-entropy).
        eval_max_steps: the steps at evaluation and inference (default max_steps).
        smoothing: label smoothing of the cross-entropy, in [0, 1).
    """

    def __init__(
        self,
        step_function,
        max_steps: int = 2,
        loss_fn=None,
        eval_max_steps: int | None = None,
        smoothing: float = 0.0,
    ):
        if not 0 <= smoothing < 1:
            raise ValueError(f"smoothing must lie in [0, 1), got {smoothing}.")
        super().__init__(step_function, max_steps, loss_fn, eval_max_steps)
        self.smoothing = smoothing

    def loss(self, out, targets):
        task = F.cross_entropy(out.logits[-1].float(), targets, label_smoothing=self.smoothing)
        return {"loss": task, "task": task, "weights": self.weights(out)}
