"""PonderNet (Banino et al. 2021): unroll any step function and halt on a Bernoulli coin.

Training unrolls all ``N = max_steps`` steps (``forward``) and trains every step's prediction at once:

    p_n   = λ_n ∏_{j<n} (1 − λ_j),  λ_N = 1           (log_halting_distribution, in log space)
    L_Rec = Σ_n p_n ℒ(y, ŷ_n)                          (ReconstructionLoss)
    L_Reg = KL(p ‖ π),  π = p_G(λ_p) or 1/N             (RegularizationLoss)
    L     = L_Rec + β · L_Reg                           (PonderLoss), averaged over the batch,

while inference (``infer``) flips the coin ``Bernoulli(λ_n)`` after each step: a sample that halts
leaves the computation, and the loop stops once every sample has halted.

Everything is computed from ``log p`` (``λ_n = sigmoid(z_n)``, ``log σ(z) = logsigmoid(z)``,
``log(1 − σ(z)) = logsigmoid(−z)``, both finite for every finite ``z``), so no probability underflows to
``log 0``, and no loss has a Python loop over steps.

The prior ``π`` is the paper's geometric ``p_G(λ_p)`` or, with ``prior="uniform"``, ``π_n = 1/N``, the
prior of LoopLM/Ouro (Zhu et al. 2025, arXiv 2510.25741, §3.3). Then ``KL(p ‖ π) = −H(p) + log N``, so
``β · L_Reg`` is their entropy bonus ``−β H(p)`` (their Eq. 4) up to the constant ``β log N``: it pulls
``p`` towards spreading over the steps, not towards halting early. Only the prior is theirs: inference
still flips PonderNet's coins, where Ouro exits at the first step whose CDF reaches a threshold ``q``
(§3.2), and their second stage, which trains the gate alone (§3.4), is not here.

The KL direction has a name that says which distribution comes first: ``"p_prior"`` is the paper's
``KL(p ‖ p_G)`` and ``"prior_p"`` is ``KL(p_G ‖ p)``, what
``nn.KLDivLoss(reduction="batchmean")(p.log(), p_g)`` computes in the popular implementations. (In
machine learning "forward KL" usually means ``KL(target ‖ model)``, which would be the second one, so
this package avoids "forward" and "reverse".)
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..halting import (
    check_epsilon,
    check_lambda_p,
    check_max_steps,
    check_prior,
    check_weight,
    geometric_prior,
    halting_uniforms,
    log_geometric_prior,
    log_uniform_prior,
    sample_halting_step,
)
from ..steps.base import SQUEEZE, check_step, select_rows, state_batch_size
from .base import HaltingMethod, Unroll, at_step, finite_input, per_sample_cross_entropy, per_sample_loss

KL_DIRECTIONS = ("p_prior", "prior_p")  # KL(p ‖ p_G) (the paper's), KL(p_G ‖ p)


def check_kl_direction(direction: str, name: str = "kl_direction") -> str:
    """Return the KL direction's name, or raise a ``ValueError`` that names the two."""
    if direction not in KL_DIRECTIONS:
        raise ValueError(
            f"{name} must be 'p_prior' (the paper's KL(p || p_G)) or 'prior_p' (KL(p_G || p)), "
            f"got {direction!r}."
        )
    return direction


def log_halting_distribution(lambda_logits: Tensor) -> Tensor:
    """Log of the unconditional halting distribution ``log p_n`` from the λ logits ``z_n``.

    ``λ_n`` is the *conditional* probability of halting at step ``n`` given no halt before; ``p_n`` the
    *unconditional* one. A product of many numbers in (0, 1) underflows quickly: hence sums of logs.

    Args:
        lambda_logits: ``(N, B)`` logits ``z_n`` of λ_n for steps n = 1..N. The last row is ignored:
            λ_N = 1 by definition, so all mass left at the last step halts there.

    Returns:
        ``(N, B)`` tensor of ``log p_n``; ``p.exp().sum(0) == 1`` for every sample.
    """
    if lambda_logits.dim() != 2:
        raise ValueError(
            f"lambda_logits must have shape (max_steps, batch), got {tuple(lambda_logits.shape)}: {SQUEEZE}."
        )
    log_lambda = F.logsigmoid(lambda_logits)  # log λ_n
    log_not_lambda = F.logsigmoid(-lambda_logits)  # log (1 − λ_n)
    # λ_N = 1 at the last step: log λ_N = 0.
    log_lambda = torch.cat([log_lambda[:-1], torch.zeros_like(log_lambda[-1:])], dim=0)
    # Σ_{j<n} log(1 − λ_j): an exclusive cumulative sum (0 for n = 1).
    log_survival = torch.cat([torch.zeros_like(log_not_lambda[:1]), torch.cumsum(log_not_lambda[:-1], dim=0)])
    return log_lambda + log_survival  # log p_n = log λ_n + Σ_{j<n} log(1 − λ_j)


def truncate_at_epsilon(lambda_logits: Tensor, epsilon: float) -> Tensor:
    """The paper's rule for N in training: each sample's distribution ends at the first step ``N_ε`` with
    ``Σ_{j≤N_ε} p_j > 1 − ε``, where ``λ = 1`` (the mass left goes there; ``p_n = 0`` after it).

    ``N_ε`` is an integer, a constant for the gradient (as ACT's ``T``). Returns ``(N, B)`` logits whose
    :func:`log_halting_distribution` is the truncated distribution.
    """
    z = lambda_logits.float()
    cdf = torch.cumsum(log_halting_distribution(z.detach()).exp(), 0)  # Σ_{j≤n} p_j, non-decreasing
    n_epsilon = ((cdf <= 1.0 - epsilon).sum(0) + 1).clamp(max=z.shape[0])  # N_ε(x), (B,), at most N
    steps = torch.arange(1, z.shape[0] + 1, device=z.device)[:, None]
    return torch.where(steps == n_epsilon[None], torch.full_like(z, 1e4), z)  # σ(1e4) = 1: λ_{N_ε} = 1


class ReconstructionLoss(nn.Module):
    """Expected per-sample loss over the halting step, ``mean_b Σ_n p_{n,b} · ℒ(y_b, ŷ_{n,b})``.

    Args:
        loss_fn: per-sample loss ``(logits (M, C), targets (M,)) -> (M,)``; must not reduce.
            Defaults to :func:`~.base.per_sample_cross_entropy`. The article's code wraps
            ``nn.CrossEntropyLoss()``, whose default *mean* reduction averages over the batch before
            the weighting by ``p_n``, so each sample's loss is no longer weighted by its own ``p_n``.
    """

    def __init__(self, loss_fn: Callable[[Tensor, Tensor], Tensor] | None = None):
        super().__init__()
        self.loss_fn = loss_fn or per_sample_cross_entropy

    def forward(self, logits: Tensor, log_p: Tensor, targets: Tensor) -> Tensor:
        """
        Args:
            logits: ``(N, B, C)`` predictions of every step.
            log_p: ``(N, B)`` log halting distribution.
            targets: ``(B,)`` class indices.

        Returns:
            scalar loss.
        """
        n_steps, batch = log_p.shape
        if logits.shape[:2] != (n_steps, batch) or targets.shape != (batch,):
            raise ValueError(
                "expected logits (N, B, C), log_p (N, B) and targets (B,); got "
                f"{tuple(logits.shape)}, {tuple(log_p.shape)} and {tuple(targets.shape)}."
            )
        flat = logits.reshape(n_steps * batch, -1)
        per_sample = per_sample_loss(self.loss_fn, flat, targets.repeat(n_steps)).view(
            n_steps, batch
        )  # ℒ(y, ŷ_n)
        return (log_p.exp() * per_sample).sum(0).mean()  # mean_b Σ_n p_n ℒ(y, ŷ_n)


class RegularizationLoss(nn.Module):
    """KL divergence between the halting distribution and a prior: a truncated geometric or a uniform one.

    Args:
        lambda_p: the geometric prior's per-step halting probability, in (0, 1).
        max_steps: N, the number of steps the distribution covers.
        direction: ``"p_prior"`` computes the paper's ``KL(p ‖ p_G) = Σ_n p_n (log p_n − log p_G,n)``.
            ``"prior_p"`` computes ``KL(p_G ‖ p) = Σ_n p_G,n (log p_G,n − log p_n)``, which is what
            ``kl_div(p.log(), p_g)`` in the article's, labml's and mildlyoverfitted's code computes.
        renormalize_prior: make the truncated prior sum to 1 (default: the plain geometric pmf, as in
            the popular implementations; it misses the mass ``(1 − λ_p)^N`` beyond N, so
            ``KL(p_G ‖ p)`` can then be negative).
        prior: ``"geometric"``, ``p_G(λ_p)``, or ``"uniform"``, ``1/N`` (which ignores ``lambda_p``).
    """

    def __init__(
        self,
        lambda_p: float,
        max_steps: int,
        direction: str = "p_prior",
        renormalize_prior: bool = False,
        prior: str = "geometric",
    ):
        super().__init__()
        self.direction = check_kl_direction(direction)
        self.lambda_p = check_lambda_p(lambda_p)
        self.max_steps = check_max_steps(max_steps)
        self.renormalize_prior = renormalize_prior
        self.prior = check_prior(prior)
        if prior == "uniform" and renormalize_prior:
            raise ValueError("renormalize_prior renormalises the geometric prior: the uniform one sums to 1.")
        if prior == "uniform":
            log_prior = log_uniform_prior(max_steps)
        else:
            log_prior = log_geometric_prior(lambda_p, max_steps, renormalize_prior)
        self.register_buffer("log_prior", log_prior[:, None], persistent=False)  # (N, 1)

    def forward(self, log_p: Tensor) -> Tensor:
        """
        Args:
            log_p: ``(N, B)`` log halting distribution, ``N == max_steps``.

        Returns:
            scalar KL divergence, averaged over the batch.
        """
        if log_p.dim() != 2 or log_p.shape[0] != self.max_steps:
            raise ValueError(
                f"log_p must have shape (max_steps={self.max_steps}, batch), got {tuple(log_p.shape)}."
            )
        log_q = self.log_prior.to(log_p.dtype)  # log π_n
        if self.direction == "p_prior":
            log_p = log_p.clamp(min=torch.finfo(log_p.dtype).min)  # 0 · log 0 = 0 (an infinite z_n)
            kl = log_p.exp() * (log_p - log_q)  # p_n (log p_n − log π_n); 0 where p_n underflows
        else:
            kl = log_q.exp() * (log_q - log_p)  # π_n (log π_n − log p_n); infinite where p_n = 0
        return kl.sum(0).mean()


class PonderLoss(nn.Module):
    """``L = L_Rec + β · L_Reg``; returns the three terms.

    Args:
        lambda_p, max_steps, direction, renormalize_prior, prior: see :class:`RegularizationLoss`.
        beta: weight β ≥ 0 of the regularisation.
        loss_fn: the per-sample task loss of :class:`ReconstructionLoss`.
    """

    def __init__(
        self,
        lambda_p: float,
        max_steps: int,
        beta: float = 0.01,
        direction: str = "p_prior",
        renormalize_prior: bool = False,
        loss_fn: Callable[[Tensor, Tensor], Tensor] | None = None,
        prior: str = "geometric",
    ):
        super().__init__()
        self.beta = check_weight(beta, "beta")  # β ≥ 0
        self.reconstruction = ReconstructionLoss(loss_fn)
        self.regularization = RegularizationLoss(lambda_p, max_steps, direction, renormalize_prior, prior)

    def forward(self, logits: Tensor, log_p: Tensor, targets: Tensor) -> dict[str, Tensor]:
        """Return ``{"loss", "reconstruction", "regularization"}`` (scalars) for logits ``(N, B, C)``,
        ``log_p (N, B)`` and targets ``(B,)``."""
        # The losses are computed in float32 even under mixed precision.
        rec = self.reconstruction(logits.float(), log_p.float(), targets)
        reg = self.regularization(log_p.float())
        return {"loss": rec + self.beta * reg, "reconstruction": rec, "regularization": reg}


class PonderNet(HaltingMethod):
    """Wraps a step function into PonderNet.

    Args:
        step_function: the network that is applied at every step.
        max_steps: ``N``, the steps unrolled in training (``λ_N = 1``).
        lambda_p: λ_p of the geometric prior, in (0, 1); its mean is 1/λ_p steps.
        beta: β ≥ 0, the weight of the KL term.
        kl_direction: ``p_prior``, the paper's KL(p ‖ p_G), or ``prior_p``, KL(p_G ‖ p) as in the
            article's, labml's and mildlyoverfitted's code.
        renormalize_prior: renormalise the truncated geometric prior to sum to 1.
        prior: ``geometric``, the paper's p_G(λ_p), or ``uniform``, 1/N as in LoopLM/Ouro. The uniform
            prior has no λ_p: λ_p then sets only the frozen control's λ_n (``learn_halting`` False).
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
        prior: str = "geometric",
        loss_fn=None,
        halting_bias: float | None = None,
        train_epsilon: float | None = None,
        learn_halting: bool = True,
        eval_max_steps: int | None = None,
    ):
        super().__init__(step_function, max_steps, loss_fn, halting_bias, eval_max_steps)
        self.criterion = PonderLoss(
            lambda_p, max_steps, beta, kl_direction, renormalize_prior, self.loss_fn, prior
        )
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
        """``L_Rec + β · KL`` over training's first N steps (validation's unroll may hold more), and
        ``"weights"``, the ``p_n`` it weighed the steps with (training's :meth:`weights`)."""
        n = self.max_steps
        log_p = self.log_p(out.halting_logits[:n])  # log p_n, once per step of training
        return {**self.criterion(out.logits[:n], log_p, targets), "weights": log_p.exp()}

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
            check_step(y_n, z_n)
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
        """The prior over 1..n_steps (default N), the geometric one renormalised: the minimiser of the KL
        term, what the evaluation's distance to the prior is measured against."""
        regularization, n_steps = self.criterion.regularization, n_steps or self.max_steps
        if regularization.prior == "uniform":
            return log_uniform_prior(n_steps).exp()
        return geometric_prior(regularization.lambda_p, n_steps, renormalize=True)
