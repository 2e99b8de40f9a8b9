"""PonderNet's two losses, vectorised over steps, and the per-sample task loss every method uses.

    L = L_Rec + β · L_Reg
    L_Rec = Σ_n p_n · ℒ(y, ŷ_n)              (expected loss over the halting step)
    L_Reg = KL(p_n ‖ p_G(λ_p))                (halting distribution against a geometric prior)

Both are averaged over the batch. Neither has a Python loop over steps: all N steps are one tensor
operation, and everything is computed from ``log p`` so that no probability underflows to ``log 0``.

The KL direction has a name that says which distribution comes first: ``"p_prior"`` is the paper's
``KL(p ‖ p_G)`` and ``"prior_p"`` is ``KL(p_G ‖ p)``, what
``nn.KLDivLoss(reduction="batchmean")(p.log(), p_g)`` computes in the popular implementations. (In
machine learning "forward KL" usually means ``KL(target ‖ model)``, which would be the second one, so
this package avoids "forward" and "reverse".)
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch.nn.functional as F
from torch import Tensor, nn

from .halting import check_lambda_p, check_max_steps, log_geometric_prior

KL_DIRECTIONS = ("p_prior", "prior_p")  # KL(p ‖ p_G) (the paper's), KL(p_G ‖ p)


def check_kl_direction(direction: str, name: str = "kl_direction") -> str:
    """Return the KL direction's name, or raise a ``ValueError`` that names the two."""
    if direction not in KL_DIRECTIONS:
        raise ValueError(
            f"{name} must be 'p_prior' (the paper's KL(p || p_G)) or 'prior_p' (KL(p_G || p)), "
            f"got {direction!r}."
        )
    return direction


def check_beta(beta: float, name: str = "beta") -> float:
    """Return ``beta`` as a float or raise a ``ValueError``: the KL weight must be finite and >= 0."""
    if not 0 <= float(beta) < math.inf:
        raise ValueError(
            f"{name} must be >= 0 and finite, got {beta}: it weighs the KL regulariser (0 turns it off)."
        )
    return float(beta)


def per_sample_cross_entropy(logits: Tensor, targets: Tensor) -> Tensor:
    """Cross-entropy of every sample, not reduced: ``(M, C), (M,) -> (M,)``."""
    return F.cross_entropy(logits, targets, reduction="none")


def per_sample_loss(loss_fn: Callable[[Tensor, Tensor], Tensor], logits: Tensor, targets: Tensor) -> Tensor:
    """``loss_fn(logits, targets)``, checked to give one loss per sample (no reduction)."""
    losses = loss_fn(logits, targets)
    if losses.shape != targets.shape[:1]:
        raise ValueError(
            f"loss_fn must return one loss per sample (shape {tuple(targets.shape[:1])}), got shape "
            f"{tuple(losses.shape)}: use reduction='none'."
        )
    return losses


class ReconstructionLoss(nn.Module):
    """Expected per-sample loss over the halting step, ``mean_b Σ_n p_{n,b} · ℒ(y_b, ŷ_{n,b})``.

    Args:
        loss_fn: per-sample loss ``(logits (M, C), targets (M,)) -> (M,)``; must not reduce.
            Defaults to :func:`per_sample_cross_entropy`. The article's code wraps
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
    """KL divergence between the halting distribution and a truncated geometric prior.

    Args:
        lambda_p: the prior's per-step halting probability, in (0, 1).
        max_steps: N, the number of steps the distribution covers.
        direction: ``"p_prior"`` computes the paper's ``KL(p ‖ p_G) = Σ_n p_n (log p_n − log p_G,n)``.
            ``"prior_p"`` computes ``KL(p_G ‖ p) = Σ_n p_G,n (log p_G,n − log p_n)``, which is what
            ``kl_div(p.log(), p_g)`` in the article's, labml's and mildlyoverfitted's code computes.
        renormalize_prior: make the truncated prior sum to 1 (default: the plain geometric pmf, as in
            the popular implementations; it misses the mass ``(1 − λ_p)^N`` beyond N, so
            ``KL(p_G ‖ p)`` can then be negative).
    """

    def __init__(
        self,
        lambda_p: float,
        max_steps: int,
        direction: str = "p_prior",
        renormalize_prior: bool = False,
    ):
        super().__init__()
        self.direction = check_kl_direction(direction)
        self.lambda_p = check_lambda_p(lambda_p)
        self.max_steps = check_max_steps(max_steps)
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
        if self.direction == "p_prior":
            kl = log_p.exp() * (log_p - log_q)  # p_n (log p_n − log p_G,n); 0 where p_n underflows
        else:
            kl = log_q.exp() * (log_q - log_p)  # p_G,n (log p_G,n − log p_n); finite: log p > −inf
        return kl.sum(0).mean()


class PonderLoss(nn.Module):
    """``L = L_Rec + β · L_Reg``; returns the three terms.

    Args:
        lambda_p, max_steps, direction, renormalize_prior: see :class:`RegularizationLoss`.
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
    ):
        super().__init__()
        self.beta = check_beta(beta)
        self.reconstruction = ReconstructionLoss(loss_fn)
        self.regularization = RegularizationLoss(lambda_p, max_steps, direction, renormalize_prior)

    def forward(self, logits: Tensor, log_p: Tensor, targets: Tensor) -> dict[str, Tensor]:
        """Return ``{"loss", "reconstruction", "regularization"}`` (scalars) for logits ``(N, B, C)``,
        ``log_p (N, B)`` and targets ``(B,)``."""
        # The losses are computed in float32 even under mixed precision.
        rec = self.reconstruction(logits.float(), log_p.float(), targets)
        reg = self.regularization(log_p.float())
        return {"loss": rec + self.beta * reg, "reconstruction": rec, "regularization": reg}
