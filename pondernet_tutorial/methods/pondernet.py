"""PonderNet (Banino et al. 2021): unroll any step function and halt on a Bernoulli coin.

Training unrolls all ``N = max_steps`` steps (``forward``) and trains every step's prediction at once,

    p_n = λ_n ∏_{j<n} (1 − λ_j),   L = Σ_n p_n ℒ(y, ŷ_n) + β · KL(p ‖ p_G(λ_p))      (PonderLoss),

while inference (``infer``) flips the coin ``Bernoulli(λ_n)`` after each step: a sample that halts
leaves the computation, and the loop stops once every sample has halted.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from ..halting import (
    check_epsilon,
    first_halt,
    geometric_prior,
    halting_uniforms,
    log_halting_distribution,
    sample_halting_step,
)
from ..losses import PonderLoss
from ..steps.base import select_rows, state_batch_size
from .base import HaltingMethod, Unroll, at_step, finite_input


def truncate_at_epsilon(lambda_logits: Tensor, epsilon: float) -> Tensor:
    """The paper's rule for N in training: each sample's distribution ends at the first step ``N_ε`` with
    ``Σ_{j≤N_ε} p_j > 1 − ε``, where ``λ = 1`` (the mass left goes there; ``p_n = 0`` after it).

    ``N_ε`` is an integer, a constant for the gradient (as ACT's ``T``). Returns ``(N, B)`` logits whose
    :func:`~pondernet_tutorial.halting.log_halting_distribution` is the truncated distribution.
    """
    z = lambda_logits.float()
    cdf = torch.cumsum(log_halting_distribution(z.detach()).exp(), 0)  # Σ_{j≤n} p_j
    n_epsilon = first_halt(cdf > 1.0 - epsilon)  # N_ε(x), (B,)
    steps = torch.arange(1, z.shape[0] + 1, device=z.device)[:, None]
    return torch.where(steps == n_epsilon[None], torch.full_like(z, 1e4), z)  # σ(1e4) = 1: λ_{N_ε} = 1


class PonderNet(HaltingMethod):
    """Wraps a step function into PonderNet.

    Args:
        step_function: the network that is applied at every step.
        max_steps: ``N``, the steps unrolled in training (``λ_N = 1``).
        lambda_p, beta, kl_direction, renormalize_prior: the loss (:class:`~pondernet_tutorial.losses.PonderLoss`).
        loss_fn: per-sample task loss (cross-entropy by default).
        halting_bias: initial bias of the step function's halting layer (None: PyTorch's default).
        train_epsilon: the paper's rule for N in training (:func:`truncate_at_epsilon`); None: every
            sample's distribution spans all ``max_steps`` steps.
        learn_halting: False freezes ``λ_n`` at ``λ_p`` (the step function's halting logits are ignored):
            the control that trains on PonderNet's expected loss without learned halting.
        eval_max_steps: the most steps at evaluation and inference (default ``max_steps``).
    """

    loss_terms = ("reconstruction", "regularization")
    random_halting = True  # inference flips Bernoulli(λ_n) coins

    def __init__(
        self,
        step_function,
        max_steps: int = 20,
        lambda_p: float = 0.2,
        beta: float = 0.01,
        kl_direction: str = "p_prior",
        renormalize_prior: bool = False,
        loss_fn=None,
        halting_bias: float | None = None,
        train_epsilon: float | None = None,
        learn_halting: bool = True,
        eval_max_steps: int | None = None,
    ):
        super().__init__(step_function, max_steps, loss_fn, halting_bias, eval_max_steps)
        self.criterion = PonderLoss(lambda_p, max_steps, beta, kl_direction, renormalize_prior, self.loss_fn)
        self.train_epsilon = None if train_epsilon is None else check_epsilon(train_epsilon, "train_epsilon")
        if self.train_epsilon is not None and kl_direction == "prior_p":
            raise ValueError(
                "train_epsilon truncates p (p_n = 0 after N_ε), and KL(p_G || p) is then infinite: use "
                "kl_direction p_prior (the paper's) with train_epsilon."
            )
        self.frozen_logit = None if learn_halting else math.log(lambda_p / (1.0 - lambda_p))  # logit λ_p

    def lambda_logits(self, z: Tensor) -> Tensor:
        """The logits of ``λ_n``: the step function's, or ``logit(λ_p)`` at every step when frozen."""
        return z if self.frozen_logit is None else torch.full_like(z, self.frozen_logit)

    def forward(self, x, steps: int | None = None) -> Unroll:
        out = super().forward(x, steps)
        return Unroll(out.logits, self.lambda_logits(out.halting_logits))

    def log_p(self, lambda_logits: Tensor, truncate: bool = True) -> Tensor:
        """``(N, B)`` log p_n, ``λ = 1`` at the last step given; ``truncate``: the ε rule of training."""
        z = lambda_logits.float()
        if truncate and self.train_epsilon is not None:
            z = truncate_at_epsilon(z, self.train_epsilon)
        return log_halting_distribution(z)  # log p_n = log λ_n + Σ_{j<n} log(1 − λ_j)

    def loss(self, out: Unroll, targets: Tensor) -> dict[str, Tensor]:
        """``L_Rec + β · KL`` over training's first N steps (validation's unroll may hold more)."""
        n = self.max_steps
        return self.criterion(out.logits[:n], self.log_p(out.halting_logits[:n]), targets)

    def weights(self, out: Unroll) -> Tensor:
        """``(N, B)`` p_n; in eval mode over every step unrolled, without training's ε rule."""
        return self.log_p(out.halting_logits, truncate=self.training).exp()

    def answer(self, out: Unroll, generator: torch.Generator | None = None) -> tuple[Tensor, Tensor]:
        """The prediction at the halting step that the coins of ``generator`` draw, and that step."""
        halt_step = sample_halting_step(out.halting_logits, generator)
        return at_step(out.logits, halt_step), halt_step

    def infer(self, x, generator: torch.Generator | None = None) -> tuple[Tensor, Tensor]:
        """Inference with early exit: after step ``n`` a sample halts where its coin ``u_n < λ_n``.

        Returns ``(prediction (B, C), halt_step (B,))``: with the same seed, the same as :meth:`answer` on
        a full unroll in eval mode, without computing any sample's steps after its halt.
        """
        device = next(self.parameters()).device
        context = self.step_function.encode(finite_input(x, next(self.parameters()).dtype))
        h = self.step_function.initial_state(context)
        batch, last = state_batch_size(h), self.eval_steps
        coins = halting_uniforms(batch, last, generator).to(device)  # u_{b,n}, as sample_halting_step's
        running = torch.arange(batch, device=device)  # the samples still computed
        halt_step = torch.full((batch,), last, device=device)
        for n in range(1, last + 1):
            y_n, z_n, h = self.step_function.step(context, h)
            if n == 1:
                prediction = y_n.new_zeros(batch, *y_n.shape[1:])
            halts = coins[running, n - 1] < torch.sigmoid(self.lambda_logits(z_n).float())  # Bernoulli(λ_n)
            if n == last:
                halts = torch.ones_like(halts)  # λ_N = 1
            prediction[running[halts]] = y_n[halts]
            halt_step[running[halts]] = n
            running, keep = running[~halts], ~halts
            if len(running) == 0:
                break  # every sample has halted: the remaining steps are never computed
            context, h = select_rows(context, keep), select_rows(h, keep)  # halted samples leave
        return prediction, halt_step

    def halting_prior(self, n_steps: int | None = None) -> Tensor:
        """The geometric prior renormalised over 1..n_steps (default N): what the evaluation compares with."""
        lambda_p = self.criterion.regularization.lambda_p
        return geometric_prior(lambda_p, n_steps or self.max_steps, renormalize=True)
