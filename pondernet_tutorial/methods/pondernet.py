"""PonderNet (Banino et al. 2021): unroll any step function and halt on a Bernoulli coin.

* In training (``halting="full"``) it unrolls all ``N = max_steps`` steps and returns every
  prediction with the halting distribution ``log p_n``, which the losses need:
  ``L = Σ_n p_n ℒ(y, ŷ_n) + β · KL(p ‖ p_G(λ_p))`` (:class:`~pondernet_tutorial.losses.PonderLoss`).
* At inference (``halting="sample"``) it flips the coin ``Bernoulli(λ_n)`` after each step
  (:class:`BernoulliHalting`); a sample that halts is dropped from the computation, and the loop stops
  as soon as every sample in the batch has halted.
* ``halting="threshold"`` (this package's addition, not the paper's) halts deterministically where the
  cumulative ``Σ p`` first reaches a threshold (0.5: the median), also stopping early.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from ..halting import geometric_prior, halting_uniforms, log_halting_distribution
from ..losses import PonderLoss
from .base import HaltingRule, PonderingMethod, PonderOutput, halting_steps, unroll


def coins_on(uniforms: Tensor, device: torch.device) -> Tensor:
    """Move CPU coins to the model's device without making the host wait (pinned, non-blocking)."""
    if device.type == "cuda":
        return uniforms.pin_memory().to(device, non_blocking=True)
    return uniforms.to(device)


class BernoulliHalting(HaltingRule):
    """PonderNet at inference: after step ``n`` a sample halts with probability ``λ_n``.

    The coins are :func:`~pondernet_tutorial.halting.halting_uniforms`: one uniform number per sample
    and step, drawn from ``generator`` at the start of a batch, so the early-exit forward pass, the
    halting step drawn from a full unroll and the evaluation tables all flip the same coins.
    """

    def __init__(self, generator: torch.Generator | None = None):
        self.generator = generator

    def start(self, batch, max_steps, device):
        self.uniforms = coins_on(halting_uniforms(batch, max_steps, self.generator), device)  # (B, N)

    def halts(self, n, z, active):
        return self.uniforms[active, n - 1] < torch.sigmoid(z.float())  # halt ~ Bernoulli(λ_n)

    def decisions(self, halting_logits):
        lam = torch.sigmoid(halting_logits[:-1].float())  # λ_n, (N−1, B)
        return self.uniforms.T[:-1] < lam  # u_{b,n} < λ_n: the coin of step n says halt


class ThresholdHalting(HaltingRule):
    """Deterministic halting: once ``Σ_{j≤n} p_j = 1 − Π_{j≤n}(1 − λ_j)`` reaches ``threshold``."""

    def __init__(self, threshold: float = 0.5):
        if not 0.0 < threshold <= 1.0:
            raise ValueError(f"threshold must lie in (0, 1], got {threshold}.")
        self.threshold = threshold

    def start(self, batch, max_steps, device):
        self.log_survival = torch.zeros(batch, device=device)  # Σ_{j≤n} log(1 − λ_j)

    def halts(self, n, z, active):
        self.log_survival[active] += F.logsigmoid(-z.float())
        return -torch.expm1(self.log_survival[active]) >= self.threshold - 1e-6

    def decisions(self, halting_logits):
        log_survival = torch.cumsum(F.logsigmoid(-halting_logits[:-1].float()), 0)  # Σ_{j≤n} log(1 − λ_j)
        return -torch.expm1(log_survival) >= self.threshold - 1e-6  # Σ_{j≤n} p_j ≥ threshold


def sample_halting_step(lambda_logits: Tensor, generator: torch.Generator | None = None) -> Tensor:
    """Sample the halting steps from a full unroll's ``(N, B)`` λ logits, with the coins of
    :class:`BernoulliHalting`: the same steps the early-exit forward pass takes with the same seed."""
    return halting_steps(BernoulliHalting(generator), lambda_logits)


class PonderNet(PonderingMethod):
    """Wraps a step function into PonderNet.

    Args:
        step_function: the network that is applied at every step.
        max_steps: ``N``, the most steps ever unrolled (λ_N = 1).
        lambda_p, beta, kl_direction, renormalize_prior: the loss, see
            :class:`~pondernet_tutorial.losses.PonderLoss`.
        threshold: cumulative probability at which ``halting="threshold"`` halts.
        loss_fn: per-sample task loss (cross-entropy by default).
        halting_bias: initial bias of the step function's halting layer (None: PyTorch's default).
    """

    loss_terms = ("reconstruction", "regularization")
    step_answers = True

    def __init__(
        self,
        step_function,
        max_steps: int = 20,
        lambda_p: float = 0.2,
        beta: float = 0.01,
        kl_direction: str = "p_prior",
        renormalize_prior: bool = False,
        threshold: float = 0.5,
        loss_fn=None,
        halting_bias: float | None = None,
    ):
        super().__init__(step_function, max_steps, loss_fn, halting_bias)
        self.threshold = ThresholdHalting(threshold).threshold  # checked there
        self.criterion = PonderLoss(lambda_p, max_steps, beta, kl_direction, renormalize_prior, self.loss_fn)

    def halting_rule(self, halting: str | HaltingRule, generator=None) -> HaltingRule | None:
        """The rule behind a ``halting`` name: ``"full"`` (none), ``"sample"`` or ``"threshold"``."""
        if isinstance(halting, HaltingRule):
            return halting
        rules = {
            "full": lambda: None,
            "sample": lambda: BernoulliHalting(generator),
            "threshold": lambda: ThresholdHalting(self.threshold),
        }
        if halting not in rules:
            raise ValueError(f"halting must be one of {tuple(rules)} or a HaltingRule, got {halting!r}.")
        return rules[halting]()

    def forward(
        self,
        x,
        halting: str | HaltingRule | None = None,
        generator: torch.Generator | None = None,
        sample: bool = False,
    ) -> PonderOutput:
        """Run PonderNet on a batch (the interface for users; training runs :meth:`fit_forward`).

        Args:
            x: the batch, in the form the step function expects (``(B, 1, 28, 28)`` for MNIST); finite
                floats (float64 and half are cast to the model's dtype).
            halting: ``"full"``, ``"sample"``, ``"threshold"`` or a :class:`HaltingRule`; default
                ``"full"`` in training mode and ``"sample"`` in eval mode.
            generator: CPU generator for the halting coins (reproducible sampling).
            sample: in full mode, also draw the halting steps from the full unroll (the same coins as
                the early-exit mode).
        """
        if halting is None:
            halting = "full" if self.training else "sample"
        rule = self.halting_rule(halting, generator)
        x = self.inference_input(x)
        if rule is None:
            out = self.fit_forward(x)
            if sample:
                out.halt_step = sample_halting_step(out.halting_logits, generator)
            return out
        logits, lambda_logits, halt_step = unroll(self.step_function, x, self.max_steps, rule)
        return PonderOutput(logits, lambda_logits, halt_step, steps_run=len(logits))

    def fit_forward(self, x) -> PonderOutput:
        """All N steps for every sample, with ``log p_n`` (what the losses need); no coin is flipped."""
        logits, lambda_logits, _ = unroll(self.step_function, x, self.max_steps)
        log_p = log_halting_distribution(lambda_logits.float())  # log p_n, (N, B)
        return PonderOutput(logits, lambda_logits, steps_run=len(logits), log_p=log_p)

    def predict(self, x, generator=None) -> PonderOutput:
        return self.forward(x, halting="sample", generator=generator)  # coin flips, early exit

    def loss(self, out: PonderOutput, targets: Tensor) -> dict[str, Tensor]:
        return self.criterion(out.logits, out.log_p, targets)  # L_Rec + β · KL

    def halting_prior(self) -> Tensor:
        """The distribution the KL term pulls towards: the geometric prior renormalised over 1..N,
        ``p_G / Z``, which minimises both ``KL(p ‖ p_G)`` and ``KL(p_G ‖ p)``."""
        return geometric_prior(self.criterion.regularization.lambda_p, self.max_steps, renormalize=True)

    def inference_halt_step(self, out: PonderOutput, generator=None) -> Tensor:
        return sample_halting_step(out.halting_logits, generator)
