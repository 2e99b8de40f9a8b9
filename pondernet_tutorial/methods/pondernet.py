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

import math

import torch
import torch.nn.functional as F
from torch import Tensor

from ..halting import check_epsilon, geometric_prior, halting_uniforms, log_halting_distribution
from ..losses import PonderLoss
from .base import HaltingRule, PonderingMethod, PonderOutput, first_halt, halting_steps, unroll


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

    def decisions(self, halting_logits):
        lam = torch.sigmoid(halting_logits.float())  # λ_n, (S, B)
        return self.uniforms.T[: len(lam)] < lam  # u_{b,n} < λ_n: the coin of step n says halt


class ThresholdHalting(HaltingRule):
    """Deterministic halting: once ``Σ_{j≤n} p_j = 1 − Π_{j≤n}(1 − λ_j)`` reaches ``threshold``."""

    def __init__(self, threshold: float = 0.5):
        if not 0.0 < threshold <= 1.0:
            raise ValueError(f"threshold must lie in (0, 1], got {threshold}.")
        self.threshold = threshold

    def decisions(self, halting_logits):
        log_survival = torch.cumsum(F.logsigmoid(-halting_logits.float()), 0)  # Σ_{j≤n} log(1 − λ_j)
        return -torch.expm1(log_survival) >= self.threshold - 1e-6  # Σ_{j≤n} p_j ≥ threshold


class FrozenHalting(HaltingRule):
    """Another rule applied to a constant λ logit instead of the step function's: the control whose
    ``λ_n`` is frozen at ``λ_p``."""

    def __init__(self, rule: HaltingRule, logit: float):
        self.rule, self.logit = rule, logit

    def start(self, batch, max_steps, device):
        self.rule.start(batch, max_steps, device)

    def decisions(self, halting_logits):
        return self.rule.decisions(torch.full_like(halting_logits, self.logit))


def truncate_at_epsilon(lambda_logits: Tensor, epsilon: float) -> Tensor:
    """The paper's rule for N in training: each sample's halting distribution ends at the first step
    ``N_ε`` with ``Σ_{j≤N_ε} p_j > 1 − ε``, where it halts for sure (``λ_{N_ε} = 1``: the mass left goes
    to that step, ``p_n = 0`` after it).

    Args:
        lambda_logits: ``(N, B)`` λ logits of the N steps unrolled.

    Returns:
        ``(N, B)`` logits whose :func:`~pondernet_tutorial.halting.log_halting_distribution` is the
        truncated distribution. ``N_ε`` is an integer, a constant for the gradient (as ACT's ``N``); the
        logit at ``N_ε`` is a large constant, so ``log p_n`` stays finite after it (``p_n`` = 0).
    """
    z = lambda_logits.float()
    cdf = torch.cumsum(log_halting_distribution(z.detach()).exp(), 0)  # Σ_{j≤n} p_j
    n_epsilon = first_halt(cdf[:-1] > 1.0 - epsilon)  # N_ε(x), (B,); N where never exceeded
    steps = torch.arange(1, z.shape[0] + 1, device=z.device)[:, None]
    return torch.where(steps == n_epsilon[None], torch.full_like(z, _CERTAIN), z)  # λ_{N_ε} = 1


_CERTAIN = 1e4  # a logit whose sigmoid is 1 in float32: log σ = 0, log(1 − σ) = −1e4 (p after it: 0)


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
        train_epsilon: the paper's rule for N in training (:func:`truncate_at_epsilon`); None: every
            sample's distribution spans all ``max_steps`` steps.
        learn_halting: False freezes ``λ_n`` at ``λ_p`` (the step function's halting logits are ignored):
            the control that trains on PonderNet's expected loss without learned halting.
        eval_max_steps: the most steps at evaluation and inference (default ``max_steps``); there
            ``λ`` is 1 at the last of them, and no ε truncation applies.
    """

    loss_terms = ("reconstruction", "regularization")
    step_answers = True
    random_halting = True  # inference flips Bernoulli(λ_n) coins

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
        train_epsilon: float | None = None,
        learn_halting: bool = True,
        eval_max_steps: int | None = None,
    ):
        super().__init__(step_function, max_steps, loss_fn, halting_bias, eval_max_steps)
        self.threshold = ThresholdHalting(threshold).threshold  # checked there
        self.criterion = PonderLoss(lambda_p, max_steps, beta, kl_direction, renormalize_prior, self.loss_fn)
        self.train_epsilon = None if train_epsilon is None else check_epsilon(train_epsilon, "train_epsilon")
        if self.train_epsilon is not None and self.criterion.regularization.direction == "prior_p":
            raise ValueError(
                "train_epsilon truncates p (p_n = 0 after N_ε), and KL(p_G || p) is then infinite: use "
                "kl_direction p_prior (the paper's) with train_epsilon."
            )
        self.learn_halting = bool(learn_halting)
        self.frozen_logit = None if self.learn_halting else math.log(lambda_p / (1.0 - lambda_p))  # logit λ_p

    def lambda_logits(self, halting_logits: Tensor) -> Tensor:
        """The logits of ``λ_n``: the step function's, or ``logit(λ_p)`` at every step when frozen."""
        if self.frozen_logit is None:
            return halting_logits
        return torch.full_like(halting_logits, self.frozen_logit)

    def training_log_p(self, halting_logits: Tensor) -> Tensor:
        """``(N, B)`` log of the halting distribution that training uses, from the logits of its N steps:
        ``λ_N = 1``, and the paper's ε rule where ``train_epsilon`` is set."""
        z = self.lambda_logits(halting_logits.float())
        if self.train_epsilon is not None:
            z = truncate_at_epsilon(z, self.train_epsilon)
        return log_halting_distribution(z)

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
        rule = rules[halting]()
        if rule is not None and self.frozen_logit is not None:
            rule = FrozenHalting(rule, self.frozen_logit)
        return rule

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
        if rule is None:  # every step of the evaluation's budget
            out = self.evaluation_forward(x)
            if sample:
                out.halt_step = self.inference_halt_step(out, generator)
            return out
        logits, z, halt_step = unroll(self.step_function, x, self.eval_steps, rule)
        return PonderOutput(logits, self.lambda_logits(z), halt_step, steps_run=len(logits))

    def fit_forward(self, x) -> PonderOutput:
        """Training: all N steps for every sample, with the training distribution ``log p_n`` (what the
        losses need); no coin is flipped."""
        logits, z, _ = unroll(self.step_function, x, self.max_steps)
        return PonderOutput(
            logits, self.lambda_logits(z), steps_run=len(logits), log_p=self.training_log_p(z)
        )

    def evaluation_forward(self, x) -> PonderOutput:
        """Evaluation: all ``eval_max_steps`` steps, with the distribution that inference samples from
        (``λ = 1`` at the last step, no ε truncation)."""
        if self.eval_steps == self.max_steps and self.train_epsilon is None:
            return self.fit_forward(x)
        logits, z, _ = unroll(self.step_function, x, self.eval_steps)
        z = self.lambda_logits(z)
        return PonderOutput(logits, z, steps_run=len(logits), log_p=log_halting_distribution(z.float()))

    def predict(self, x, generator=None) -> PonderOutput:
        return self.forward(x, halting="sample", generator=generator)  # coin flips, early exit

    def loss(self, out: PonderOutput, targets: Tensor) -> dict[str, Tensor]:
        """``L_Rec + β · KL`` over the training distribution of the first N steps (also for an output of
        :meth:`evaluation_forward`, which may hold more steps)."""
        n = self.max_steps
        log_p = out.log_p if out.steps_run == n and self.train_epsilon is None else None
        if log_p is None:
            log_p = self.training_log_p(out.halting_logits[:n])
        return self.criterion(out.logits[:n], log_p, targets)  # L_Rec + β · KL

    def halting_prior(self, n_steps: int | None = None) -> Tensor:
        """The distribution the KL term pulls towards: the geometric prior renormalised over 1..n_steps
        (default N), ``p_G / Z``, which minimises both ``KL(p ‖ p_G)`` and ``KL(p_G ‖ p)``."""
        lambda_p = self.criterion.regularization.lambda_p
        return geometric_prior(lambda_p, n_steps or self.max_steps, renormalize=True)

    def inference_halt_step(self, out: PonderOutput, generator=None) -> Tensor:
        return sample_halting_step(out.halting_logits, generator)  # (the logits are λ's, frozen or not)
