"""Adaptive Computation Time (Graves 2016), over the same step functions as PonderNet.

The step function's halting logit gives a *halting unit* ``h_n = sigmoid(z_n)`` per step. ACT halts
deterministically, at the first step where the halting units add up to almost one:

    N(x) = min{ n : Σ_{j≤n} h_j ≥ 1 − ε }   (or the last step, M = max_steps)
    R    = 1 − Σ_{n<N} h_n                  the remainder, in (ε, 1]
    p_n  = h_n for n < N,  p_N = R,  0 after N          (a distribution over 1..N)
    ŷ    = Σ_n p_n ŷ_n                        the mean-field output
    ρ    = N + R                              the ponder cost;  L = ℒ(y, ŷ) + τ · mean(ρ)

ACT averages the steps' outputs instead of sampling one of them, so the loss is differentiable in
the halting units that make up ``p``. ``N`` is an integer, a constant for the gradient: the ponder
cost reaches the halting units only through ``R``, whose gradient with respect to each ``h_n``,
``n < N``, is −1 (so ``∂(τρ)/∂h_n = −τ``), and the halting unit of step ``N`` gets none.

At inference (:meth:`ACT.forward`) computation stops at ``N(x)`` per sample. Training
(:meth:`ACT.fit_forward`) unrolls all ``M`` steps and masks everything after ``N(x)``: the steps after
``N`` get ``p_n = 0``, so the loss and its gradients are those of the early exit, while the shapes stay
fixed and the host never waits for the device to learn ``N``.
"""

from __future__ import annotations

import torch
from torch import Tensor

from ..losses import per_sample_loss
from ..options import check_epsilon, check_tau  # the ranges of ε and τ, declared once there
from .base import HaltingRule, PonderingMethod, PonderOutput, halting_steps, unroll


class ACTHalting(HaltingRule):
    """ACT's rule: a sample halts after the first step ``n`` with ``Σ_{j≤n} h_j ≥ 1 − ε``."""

    def __init__(self, epsilon: float = 0.01):
        self.epsilon = check_epsilon(epsilon)

    def start(self, batch, max_steps, device):
        self.cumulative = torch.zeros(batch, device=device)  # Σ_{j≤n} h_j

    def halts(self, n, z, active):
        self.cumulative[active] += torch.sigmoid(z.float())  # + h_n
        return self.cumulative[active] >= 1.0 - self.epsilon

    def decisions(self, halting_logits):
        cumulative = torch.cumsum(torch.sigmoid(halting_logits[:-1].float()), 0)  # Σ_{j≤n} h_j
        return cumulative >= 1.0 - self.epsilon


def act_weights(halting_logits: Tensor, halt_step: Tensor) -> tuple[Tensor, Tensor]:
    """ACT's step weights and remainder from the halting logits and ``N(x)``.

    Args:
        halting_logits: ``(S, B)`` logits ``z_n``, ``h_n = sigmoid(z_n)`` (entries after ``N`` unused).
        halt_step: ``(B,)`` ``N(x)`` in 1..S (an integer: no gradient flows through it).

    Returns:
        ``p (S, B)`` with ``p_n = h_n`` for ``n < N``, ``p_N = R`` and 0 after, and ``R (B,)``.
    """
    h = torch.sigmoid(halting_logits.float())  # h_n
    steps = torch.arange(1, h.shape[0] + 1, device=h.device)[:, None]  # (S, 1)
    before = (steps < halt_step[None]).to(h.dtype)  # n < N: a constant mask
    at = (steps == halt_step[None]).to(h.dtype)  # n = N
    h_before = h * before
    remainder = 1.0 - h_before.sum(0)  # R = 1 − Σ_{n<N} h_n
    return h_before + at * remainder[None], remainder  # p_n


class ACT(PonderingMethod):
    """Adaptive Computation Time over a step function.

    Args:
        step_function: the network that is applied at every step.
        max_steps: ``M``, the most steps (``N(x) ≤ M``).
        tau: weight τ ≥ 0 of the ponder cost.
        epsilon: ε in (0, 1); a sample halts once its halting units reach ``1 − ε``.
        loss_fn: per-sample task loss (cross-entropy by default), applied to the mean-field output.
        halting_bias: initial bias of the halting layer (Graves used +1 in all his experiments); None
            keeps PyTorch's initialisation (a bias near 0).
        eval_max_steps: the most steps at evaluation and inference (default ``max_steps``).
    """

    loss_terms = ("task", "ponder_cost")

    def __init__(
        self,
        step_function,
        max_steps: int = 20,
        tau: float = 1e-3,
        epsilon: float = 0.01,
        loss_fn=None,
        halting_bias: float | None = None,
        eval_max_steps: int | None = None,
    ):
        super().__init__(step_function, max_steps, loss_fn, halting_bias, eval_max_steps)
        self.tau = check_tau(tau)
        self.epsilon = check_epsilon(epsilon)

    def forward(self, x) -> PonderOutput:
        """Inference: each sample stops at its own ``N(x)``; halted samples leave the computation."""
        x = self.inference_input(x)
        logits, halting_logits, halt_step = unroll(
            self.step_function, x, self.eval_steps, ACTHalting(self.epsilon)
        )
        return self._output(logits, halting_logits, halt_step)

    def fit_forward(self, x, steps: int | None = None) -> PonderOutput:
        """Training: all ``M`` steps (or ``steps``) for every sample, ``N(x)`` found with tensor
        operations and every step after it masked (``p_n = 0``); the same loss and gradients as
        :meth:`forward`."""
        logits, halting_logits, _ = unroll(self.step_function, x, steps or self.max_steps)
        halt_step = halting_steps(ACTHalting(self.epsilon), halting_logits)  # N(x), (B,)
        return self._output(logits, halting_logits, halt_step)

    def evaluation_forward(self, x) -> PonderOutput:
        """As :meth:`fit_forward`, over the evaluation's budget (``N(x) ≤ eval_max_steps``)."""
        return self.fit_forward(x, self.eval_steps)

    def _output(self, logits: Tensor, halting_logits: Tensor, halt_step: Tensor) -> PonderOutput:
        p, remainder = act_weights(halting_logits, halt_step)
        prediction = (p[..., None].to(logits.dtype) * logits).sum(0)  # ŷ = Σ_n p_n ŷ_n
        return PonderOutput(
            logits,
            halting_logits,
            halt_step,
            steps_run=len(logits),
            p=p,
            prediction=prediction,
            ponder_cost=halt_step.to(remainder.dtype) + remainder,  # ρ = N + R
        )

    def loss(self, out: PonderOutput, targets: Tensor) -> dict[str, Tensor]:
        task = per_sample_loss(self.loss_fn, out.prediction.float(), targets).mean()  # ℒ(y, Σ p_n ŷ_n)
        ponder = out.ponder_cost.mean()  # mean ρ
        return {"loss": task + self.tau * ponder, "task": task, "ponder_cost": ponder}
