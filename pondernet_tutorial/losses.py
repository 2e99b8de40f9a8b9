"""PonderNet's two losses, vectorised over steps.

    L = L_Rec + β · L_Reg
    L_Rec = Σ_n p_n · ℒ(y, ŷ_n)              (expected loss over the halting step)
    L_Reg = KL(p_n ‖ p_G(λ_p))                (halting distribution against a geometric prior)

Both are averaged over the batch. Neither has a Python loop over steps: all N steps are one tensor
operation, and everything is computed from ``log p`` so that no probability underflows to ``log 0``.
"""

from __future__ import annotations

from typing import Callable

import torch.nn.functional as F
from torch import Tensor, nn

from .halting import check_lambda_p, check_max_steps, log_geometric_prior

KL_DIRECTIONS = ("forward", "reverse")


def check_beta(beta: float) -> float:
    """Return ``beta`` as a float or raise a ``ValueError``: the KL weight must be >= 0."""
    if not beta >= 0:
        raise ValueError(f"beta must be >= 0, got {beta}.")
    return float(beta)


class ReconstructionLoss(nn.Module):
    """Expected per-sample loss over the halting step, ``mean_b Σ_n p_{n,b} · ℒ(y_b, ŷ_{n,b})``.

    Args:
        loss_fn: per-sample loss ``(logits (M, C), targets (M,)) -> (M,)``; must not reduce.
            Defaults to cross-entropy with ``reduction="none"``. The popular implementations call
            ``nn.CrossEntropyLoss()`` whose default *mean* reduction averages the batch before the
            weighting by ``p_n``, so each sample's loss is no longer weighted by its own ``p_n``.
    """

    def __init__(self, loss_fn: Callable[[Tensor, Tensor], Tensor] | None = None):
        super().__init__()
        self.loss_fn = loss_fn or (lambda logits, y: F.cross_entropy(logits, y, reduction="none"))

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
        per_sample = self.loss_fn(flat, targets.repeat(n_steps)).view(n_steps, batch)  # ℒ(y, ŷ_n)
        return (log_p.exp() * per_sample).sum(0).mean()  # mean_b Σ_n p_n ℒ(y, ŷ_n)


class RegularizationLoss(nn.Module):
    """KL divergence between the halting distribution and a truncated geometric prior.

    Args:
        lambda_p: the prior's per-step halting probability, in (0, 1].
        max_steps: N, the number of steps the distribution covers.
        direction: ``"forward"`` computes the paper's ``KL(p ‖ p_G) = Σ_n p_n (log p_n − log p_G,n)``.
            ``"reverse"`` computes ``KL(p_G ‖ p) = Σ_n p_G,n (log p_G,n − log p_n)``, which is what
            ``nn.KLDivLoss()(p.log(), p_g)`` in the popular implementations computes.
        renormalize_prior: make the truncated prior sum to 1 (default: the plain geometric pmf).
    """

    def __init__(
        self,
        lambda_p: float,
        max_steps: int,
        direction: str = "forward",
        renormalize_prior: bool = False,
    ):
        super().__init__()
        if direction not in KL_DIRECTIONS:
            raise ValueError(f"direction must be one of {KL_DIRECTIONS}, got {direction!r}.")
        self.lambda_p = check_lambda_p(lambda_p)
        self.max_steps = check_max_steps(max_steps)
        self.direction = direction
        self.renormalize_prior = renormalize_prior
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
        log_q = self.log_prior.to(log_p.dtype)
        if self.direction == "forward":
            kl = log_p.exp() * (log_p - log_q)  # p_n (log p_n − log p_G,n); 0 where p_n underflows
        else:
            kl = log_q.exp() * (log_q - log_p)  # p_G,n (log p_G,n − log p_n); finite: log p > −inf
        return kl.sum(0).mean()


class PonderLoss(nn.Module):
    """``L = L_Rec + β · L_Reg``; returns the three terms.

    Args:
        lambda_p, max_steps, direction, renormalize_prior: see :class:`RegularizationLoss`.
        beta: weight β ≥ 0 of the regularisation.
    """

    def __init__(
        self,
        lambda_p: float,
        max_steps: int,
        beta: float = 0.01,
        direction: str = "forward",
        renormalize_prior: bool = False,
    ):
        super().__init__()
        self.beta = check_beta(beta)
        self.reconstruction = ReconstructionLoss()
        self.regularization = RegularizationLoss(lambda_p, max_steps, direction, renormalize_prior)

    def forward(self, logits: Tensor, log_p: Tensor, targets: Tensor) -> dict[str, Tensor]:
        """Return ``{"loss", "reconstruction", "regularization"}`` (scalars) for logits ``(N, B, C)``,
        ``log_p (N, B)`` and targets ``(B,)``."""
        # The losses are computed in float32 even under mixed precision.
        rec = self.reconstruction(logits.float(), log_p.float(), targets)
        reg = self.regularization(log_p.float())
        return {"loss": rec + self.beta * reg, "reconstruction": rec, "regularization": reg}
