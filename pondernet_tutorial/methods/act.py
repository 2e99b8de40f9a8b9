"""Adaptive Computation Time (Graves 2016), over the same step functions as PonderNet.

The step function's halting logit gives a *halting unit* ``η_n = sigmoid(z_n)`` per step (Graves writes
``h``; the book keeps ``h_n`` for the hidden state). ACT halts deterministically, at the first step
where the halting units add up to almost one:

    T(x) = min{ n : Σ_{j≤n} η_j ≥ 1 − ε }   (or the last step, N = max_steps; Graves's N(t) and M)
    R    = 1 − Σ_{n<T} η_n                  the remainder, in (ε, 1]
    p_n  = η_n for n < T,  p_T = R,  0 after T          (a distribution over 1..N)
    ŷ    = Σ_n p_n ŷ_n                        the mean-field output
    P    = T + R                              the ponder cost;  L = ℒ(y, ŷ) + τ · mean(P)

ACT averages the steps' outputs instead of sampling one of them, so the loss is differentiable in
the halting units that make up ``p``. ``T`` is an integer, a constant for the gradient: the ponder
cost reaches the halting units only through ``R``, whose gradient with respect to each ``η_n``,
``n < T``, is −1 (so ``∂(τP)/∂η_n = −τ``), and the halting unit of step ``T`` gets none.

At inference (:meth:`ACT.forward`) computation stops at ``T(x)`` per sample. Training
(:meth:`ACT.fit_forward`) unrolls all ``N`` steps and masks everything after ``T(x)``: the steps after
``T`` get ``p_n = 0``, so the loss and its gradients are those of the early exit, while the shapes stay
fixed and the host never waits for the device to learn ``T``.
"""

from __future__ import annotations

import torch
from torch import Tensor

from ..halting import check_epsilon
from ..losses import check_tau, per_sample_loss  # check_tau: defined here at the methods rewrite
from .base import HaltingRule, PonderingMethod, PonderOutput, halting_steps, unroll


class ACTHalting(HaltingRule):
    """ACT's rule: a sample halts after the first step ``n`` with ``Σ_{j≤n} η_j ≥ 1 − ε``."""

    def __init__(self, epsilon: float = 0.01):
        self.epsilon = check_epsilon(epsilon)

    def decisions(self, halting_logits):
        cumulative = torch.cumsum(torch.sigmoid(halting_logits.float()), 0)  # Σ_{j≤n} η_j
        return cumulative >= 1.0 - self.epsilon


def act_weights(halting_logits: Tensor, halt_step: Tensor) -> tuple[Tensor, Tensor]:
    """ACT's step weights and remainder from the halting logits and ``T(x)``.

    Args:
        halting_logits: ``(S, B)`` logits ``z_n``, ``η_n = sigmoid(z_n)`` (entries after ``T`` unused).
        halt_step: ``(B,)`` ``T(x)`` in 1..S (an integer: no gradient flows through it).

    Returns:
        ``p (S, B)`` with ``p_n = η_n`` for ``n < T``, ``p_T = R`` and 0 after, and ``R (B,)``.
    """
    eta = torch.sigmoid(halting_logits.float())  # η_n
    steps = torch.arange(1, eta.shape[0] + 1, device=eta.device)[:, None]  # (S, 1)
    before = (steps < halt_step[None]).to(eta.dtype)  # n < T: a constant mask
    at = (steps == halt_step[None]).to(eta.dtype)  # n = T
    eta_before = eta * before
    remainder = 1.0 - eta_before.sum(0)  # R = 1 − Σ_{n<T} η_n
    return eta_before + at * remainder[None], remainder  # p_n


class ACT(PonderingMethod):
    """Adaptive Computation Time over a step function.

    Args:
        step_function: the network that is applied at every step.
        max_steps: ``N``, the most steps (``T(x) ≤ N``).
        tau: weight τ ≥ 0 of the ponder cost.
        epsilon: ε in (0, 1); a sample halts once its halting units reach ``1 − ε``.
        loss_fn: per-sample task loss (cross-entropy by default), applied to the mean-field output.
        halting_bias: initial bias of the halting layer: a positive one starts training with few steps
            (Graves used +1 in all his experiments), a negative one at the full budget. None keeps
            PyTorch's initialisation (a bias near 0).
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
        """Inference: each sample stops at its own ``T(x)``; halted samples leave the computation."""
        x = self.inference_input(x)
        logits, halting_logits, halt_step = unroll(
            self.step_function, x, self.eval_steps, ACTHalting(self.epsilon)
        )
        return self._output(logits, halting_logits, halt_step)

    def fit_forward(self, x, steps: int | None = None) -> PonderOutput:
        """Training: all ``N`` steps (or ``steps``) for every sample, ``T(x)`` found with tensor
        operations and every step after it masked (``p_n = 0``); the same loss and gradients as
        :meth:`forward`."""
        logits, halting_logits, _ = unroll(self.step_function, x, steps or self.max_steps)
        halt_step = halting_steps(ACTHalting(self.epsilon), halting_logits)  # T(x), (B,)
        return self._output(logits, halting_logits, halt_step)

    def evaluation_forward(self, x) -> PonderOutput:
        """As :meth:`fit_forward`, over the evaluation's budget (``T(x) ≤ eval_max_steps``)."""
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
            ponder_cost=halt_step.to(remainder.dtype) + remainder,  # P = T + R
        )

    def loss(self, out: PonderOutput, targets: Tensor) -> dict[str, Tensor]:
        task = per_sample_loss(self.loss_fn, out.prediction.float(), targets).mean()  # ℒ(y, Σ p_n ŷ_n)
        ponder = out.ponder_cost.mean()  # mean P
        return {"loss": task + self.tau * ponder, "task": task, "ponder_cost": ponder}
