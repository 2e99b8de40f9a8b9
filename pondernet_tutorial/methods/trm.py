"""The halting head of the Tiny Recursive Model (Jolicoeur-Martineau 2025), over any step function.

TRM reads its step function's halting logit ``q_n = z_n`` as "is the answer of this step right?". It
trains that logit by binary cross-entropy towards the answer's correctness, and trains every step's
answer by the task loss until the sample halts. There is no continue loss and no prior:

    c_n  = 1[argmax ŷ_n = y]                          the answer of step n is right (a constant target)
    T(x) = min{ n : q_n > 0 }, or N                   halt once σ(q_n) > 1/2
    L    = mean_b Σ_{n ≤ T} [ ℒ(y, ŷ_n) + w · BCE(q_n, c_n) ]

In training, TRM's code also explores. At every step, with probability ``p``, it draws a minimum
``k ~ U{2..N}`` afresh, and the sample may halt at step ``n`` only if ``n ≥ k``:

    m_n  = k_n with probability p, else 0             (drawn for each sample and step; training only)
    T(x) = min{ n : q_n > 0 and n ≥ m_n }, or N

Sources: the paper (arXiv 2510.04871v1), §4.6 and its Figure 3; the official code at commit ``8120f2b``
(SamsungSAILMontreal/TinyRecursiveModels): ``models/recursive_reasoning/trm.py`` L131 and L156–160 (the
Q head: weights 0, biases −5), L267–287 (halting and exploration, in training only), and
``models/losses.py`` L70–71 (the target: every token of the answer right, without gradient), L88 (the
BCE) and L102 (the halting loss weighed 0.5); ``pretrain.py`` L305 (the sum over the batch divided by
its size); ``config/arch/trm.yaml`` sets N = 16 and p = 0.1.

Where the paper and the code differ, this file follows the code. The
halting weight ``w`` is 0.5 in the code and 1 in Figure 3: it is an option, 0.5 by default.
Exploration and the −5 bias are in the code only; here the head's weights keep PyTorch's
initialisation. The code halts nobody early at evaluation: every sample runs ``N`` steps.

The training here is not TRM's. TRM takes one optimizer step per supervision step and detaches the
state between steps, while a halted sample's slot takes the next sample. Here one batch unrolls all
``N`` steps (``forward``), the gradient flows through every step, and the terms after ``T(x)`` are
masked out. The sum over ``n ≤ T`` is the sum of the losses that TRM's code takes one update at a
time; each sample's task loss is one number here, where TRM averages a sequence's tokens.

At inference (:meth:`TRMHalting.infer`) a sample stops at its first ``q_n > 0``. TRM's released code reads the
answer at step ``N`` instead. That reading is ``model(x).logits[-1]`` in eval mode, over
``eval_max_steps`` steps.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from ..halting import check_weight, first_halt
from .base import HaltingMethod, Unroll, at_step, per_sample_loss
from .first_exit import exit_at_first


def trm_halt_step(halting_logits: Tensor, minimum: Tensor | None = None) -> Tensor:
    """``T(x)``, ``(B,)``: the first step ``n`` with ``q_n > 0`` and ``n ≥ m_n`` (or the last step).

    Args:
        halting_logits: ``(N, B)`` halting logits ``q_n``.
        minimum: ``(N, B)`` exploration minima ``m_n`` (0: none); None at evaluation and inference.
    """
    halts = halting_logits.detach().float() > 0  # σ(q_n) > 1/2
    if minimum is not None:
        steps = torch.arange(1, halts.shape[0] + 1, device=halts.device)[:, None]
        halts = halts & (steps >= minimum)  # n ≥ m_n
    return first_halt(halts)  # an integer: no gradient flows through it


class TRMHalting(HaltingMethod):
    """TRM's halting head: one logit per step, trained towards "this step's answer is right".

    Args:
        step_function: the network that is applied at every step.
        max_steps: ``N``, the most steps (TRM's code: 16 supervision steps).
        halting_weight: weight ``w`` ≥ 0 of the halting loss (TRM's code 0.5, the paper's Figure 3: 1).
        exploration: probability ``p`` in [0, 1] that a step draws a minimum ``k ~ U{2..N}`` before
            which the sample may not halt (training only; TRM's code: 0.1).
        loss_fn: per-sample task loss (cross-entropy by default), applied to every step's answer.
        halting_bias: initial bias of the halting layer (TRM's code: −5, σ(−5) ≈ 0.007, no sample
            halts at first); None keeps PyTorch's initialisation, and a step function without a
            halting layer (mnist_cnn) needs None.
        eval_max_steps: the most steps at evaluation and inference (default ``max_steps``).
    """

    loss_terms = ("task", "halting")

    def __init__(
        self,
        step_function,
        max_steps: int = 20,
        halting_weight: float = 0.5,
        exploration: float = 0.1,
        loss_fn=None,
        halting_bias: float | None = -5.0,
        eval_max_steps: int | None = None,
    ):
        super().__init__(step_function, max_steps, loss_fn, halting_bias, eval_max_steps)
        self.halting_weight = check_weight(halting_weight, "halting_weight")  # w ≥ 0
        if not 0.0 <= float(exploration) <= 1.0:
            raise ValueError(f"exploration must lie in [0, 1] (a probability), got {exploration}.")
        self.exploration = float(exploration)

    def exploration_minimum(self, halting_logits: Tensor) -> Tensor | None:
        """``(N, B)`` minima ``m_n``: ``k ~ U{2..N}`` with probability ``p``, else 0, drawn on the
        logits' device for every sample and step; None where there is nothing to draw."""
        n_steps = halting_logits.shape[0]
        if self.exploration == 0.0 or n_steps < 2:
            return None
        device = halting_logits.device
        explore = torch.rand(halting_logits.shape, device=device) < self.exploration  # with probability p
        k = torch.randint(2, n_steps + 1, halting_logits.shape, device=device)  # k ~ U{2..N}
        return torch.where(explore, k, torch.zeros_like(k))  # m_n

    def loss(self, out: Unroll, targets: Tensor) -> dict[str, Tensor]:
        """``mean_b Σ_{n ≤ T} [ℒ(y, ŷ_n) + w · BCE(q_n, c_n)]`` over training's first N steps, and
        ``"weights"``, all mass on ``T(x)`` (with exploration in training mode)."""
        n = self.max_steps
        logits, q = out.logits[:n].float(), out.halting_logits[:n].float()
        batch = q.shape[1]
        minimum = self.exploration_minimum(q) if self.training else None
        halt_step = trm_halt_step(q, minimum)  # T(x)
        steps = torch.arange(1, n + 1, device=q.device)[:, None]
        until_halt = (steps <= halt_step[None]).to(q.dtype)  # n ≤ T: a constant mask
        task = per_sample_loss(self.loss_fn, logits.reshape(n * batch, -1), targets.repeat(n)).view(n, batch)
        correct = (logits.argmax(-1) == targets).to(q.dtype)  # c_n = 1[argmax ŷ_n = y], no gradient
        halting = F.binary_cross_entropy_with_logits(q, correct, reduction="none")  # BCE(q_n, c_n)
        task = (until_halt * task).sum(0).mean()  # mean_b Σ_{n≤T} ℒ(y, ŷ_n)
        halting = (until_halt * halting).sum(0).mean()  # mean_b Σ_{n≤T} BCE(q_n, c_n)
        weights = (steps == halt_step[None]).to(q.dtype)
        return {
            "loss": task + self.halting_weight * halting,
            "task": task,
            "halting": halting,
            "weights": weights,
        }

    def weights(self, out: Unroll) -> Tensor:
        """``(N, B)``: all mass on the halting step of inference, the first ``q_n > 0`` (no exploration)."""
        halt_step = trm_halt_step(out.halting_logits)
        steps = torch.arange(1, out.halting_logits.shape[0] + 1, device=halt_step.device)[:, None]
        return (steps == halt_step[None]).float()

    def answer(self, out: Unroll, generator=None) -> tuple[Tensor, Tensor]:
        """``ŷ_T`` and ``T(x)``, the first step with ``q_n > 0`` (no coin: ``generator`` is unused)."""
        halt_step = trm_halt_step(out.halting_logits)
        return at_step(out.logits, halt_step), halt_step

    def infer(self, x, generator=None) -> tuple[Tensor, Tensor]:
        """Inference with early exit: each sample stops at its first ``q_n > 0`` (or at
        ``eval_max_steps``); returns ``prediction (B, C)`` and ``T(x) (B,)``, as :meth:`answer` on a
        full unroll in eval mode."""
        return exit_at_first(self, x, lambda q: q.float() > 0)  # σ(q_n) > 1/2
