"""Adaptive Computation Time (Graves 2016), over the same step functions as PonderNet.

The step function's halting logit gives a *halting unit* ``η_n = sigmoid(z_n)`` per step (Graves writes
``h``; the book keeps ``h_n`` for the hidden state). ACT halts deterministically, at the first step
where the halting units add up to almost one:

    T(x) = min{ n : Σ_{j≤n} η_j ≥ 1 − ε }   (or the last step N, max_steps; eval_max_steps in eval; Graves's N(t), M)
    R    = 1 − Σ_{n<T} η_n                  the remainder, in (ε, 1]
    p_n  = η_n for n < T,  p_T = R,  0 after T          (a distribution over 1..N)
    ŷ    = Σ_n p_n ŷ_n                        the mean-field output
    P    = T + R                              the ponder cost;  L = ℒ(y, ŷ) + τ · mean(P)

ACT averages the steps' outputs instead of sampling one of them, so the loss is differentiable in
the halting units that make up ``p``. ``T`` is an integer, a constant for the gradient: the ponder
cost reaches the halting units only through ``R``, whose gradient with respect to each ``η_n``,
``n < T``, is −1 (so ``∂(τP)/∂η_n = −τ``), and the halting unit of step ``T`` gets none.

At inference (:meth:`ACT.infer`) computation stops at ``T(x)`` per sample. Training unrolls all ``N``
steps (``forward``) and masks everything after ``T(x)``: the steps after ``T`` get ``p_n = 0``, so the
loss and its gradients are those of the early exit, while the shapes stay fixed and the host never
waits for the device to learn ``T``.
"""

from __future__ import annotations

import torch
from torch import Tensor

from ..halting import check_epsilon, check_weight, first_halt
from ..steps.base import SQUEEZE, check_step, select_rows, state_batch_size
from .base import HaltingMethod, Unroll, finite_input, per_sample_loss


def act_halt_step(halting_logits: Tensor, epsilon: float) -> Tensor:
    """``T(x)``, ``(B,)``: the first step ``n`` with ``Σ_{j≤n} η_j ≥ 1 − ε`` (or N), from all N steps'
    ``(N, B)`` logits at once. An integer: no gradient flows through it."""
    if halting_logits.dim() != 2:
        raise ValueError(
            f"ACT's halting logits must have shape (steps, batch), got {tuple(halting_logits.shape)}: {SQUEEZE}."
        )
    cumulative = torch.cumsum(torch.sigmoid(halting_logits.detach().float()), 0)  # Σ_{j≤n} η_j
    return first_halt(cumulative >= 1.0 - epsilon)


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


class ACT(HaltingMethod):
    """Adaptive Computation Time over a step function.

    Args:
        step_function: the network that is applied at every step.
        max_steps: ``N``, the most steps (``T(x) ≤ N``).
        tau: weight τ ≥ 0 of the ponder cost.
        epsilon: ε in (0, 1); a sample halts once its halting units reach ``1 − ε``.
        loss_fn: per-sample task loss (cross-entropy by default), applied to the mean-field output.
        halting_bias: initial bias of the halting layer: a positive one starts training with few steps
            (Graves used +1 in all his experiments), a negative one at the full budget. None keeps
            PyTorch's initialisation (a bias near 0). On one task, Sudoku-Extreme with ε 0.05, Sapunov
            (2026, arXiv 2604.21999v2, abstract) found that biases 0 and +1 halt after about 2 steps at
            initialisation and that most runs then stay stuck at 5–7 steps, and that −3 removed this failure.
        eval_max_steps: the most steps at evaluation and inference (default ``max_steps``).
    """

    loss_terms = ("task", "ponder_cost")
    step_answers = False  # the answer mixes the steps' predictions

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
        self.tau = check_weight(tau, "tau")  # τ ≥ 0
        self.epsilon = check_epsilon(epsilon)

    def weights(self, out: Unroll) -> Tensor:
        """``(N, B)`` p_n: ``η_n`` before ``T(x)``, the remainder at it, 0 after."""
        return act_weights(out.halting_logits, act_halt_step(out.halting_logits, self.epsilon))[0]

    def answer(self, out: Unroll, generator=None) -> tuple[Tensor, Tensor]:
        """The mean-field output ``ŷ = Σ_n p_n ŷ_n`` and ``T(x)`` (no coin: ``generator`` is unused)."""
        halt_step = act_halt_step(out.halting_logits, self.epsilon)
        p, _ = act_weights(out.halting_logits, halt_step)
        return (p[..., None] * out.logits.float()).sum(0), halt_step  # in float32, as infer and loss

    def loss(self, out: Unroll, targets: Tensor) -> dict[str, Tensor]:
        """``ℒ(y, Σ_n p_n ŷ_n) + τ · mean(T + R)`` over training's first N steps (validation's unroll
        may hold more), and ``"weights"``, the ``p_n`` it mixed."""
        n = self.max_steps
        halting_logits = out.halting_logits[:n]
        halt_step = act_halt_step(halting_logits, self.epsilon)  # T(x)
        p, remainder = act_weights(halting_logits, halt_step)
        prediction = (p[..., None] * out.logits[:n].float()).sum(0)  # ŷ = Σ_n p_n ŷ_n
        task = per_sample_loss(self.loss_fn, prediction, targets).mean()  # ℒ(y, ŷ)
        ponder = (halt_step.to(remainder.dtype) + remainder).mean()  # mean P = T + R
        return {"loss": task + self.tau * ponder, "task": task, "ponder_cost": ponder, "weights": p}

    def infer(self, x, generator=None) -> tuple[Tensor, Tensor]:
        """Inference with early exit: each sample stops after its step ``T(x)``; returns the mean-field
        ``prediction (B, C)`` and ``T(x) (B,)``, as :meth:`answer` on a full unroll in eval mode."""
        device = next(self.parameters()).device
        context = self.step_function.encode(finite_input(x, next(self.parameters()).dtype))
        h = self.step_function.initial_state(context)
        batch, last = state_batch_size(h), self.eval_steps
        running = torch.arange(batch, device=device)  # the samples still computed
        halt_step = torch.full((batch,), last, device=device)
        total = torch.zeros(batch, device=device)  # Σ_{j<n} η_j of the running samples
        for n in range(1, last + 1):
            y_n, z_n, h = self.step_function.step(context, h)
            check_step(y_n, z_n)
            if n == 1:
                prediction = y_n.new_zeros(batch, *y_n.shape[1:], dtype=torch.float32)
            eta = torch.sigmoid(z_n.float())  # η_n
            halts = (total + eta >= 1.0 - self.epsilon) | (n == last)  # T(x) = n
            weight = torch.where(halts, 1.0 - total, eta)  # p_n: η_n, or the remainder R at T
            prediction[running] += weight[:, None] * y_n.float()  # ŷ = Σ_n p_n ŷ_n
            halt_step[running[halts]] = n
            total, running, keep = (total + eta)[~halts], running[~halts], ~halts
            if len(running) == 0:
                break
            context, h = select_rows(context, keep), select_rows(h, keep)  # halted samples leave
        return prediction, halt_step
