"""PonderNet: unroll any step function and halt on a Bernoulli coin.

A *step function* maps the input and a hidden state to a prediction, a halting logit and the next
state, ``(x, h_n) -> (ŷ_n, z_n, h_{n+1})`` with ``λ_n = sigmoid(z_n)``. :class:`PonderNet` turns any
such module into PonderNet:

* in training (``halting="full"``) it unrolls all ``N = max_steps`` steps and returns every
  prediction with the halting distribution ``log p_n``, which the losses need;
* at inference (``halting="sample"``) it flips the coin ``Bernoulli(λ_n)`` after each step; a sample
  that halts is dropped from the computation, and the loop stops as soon as every sample in the
  batch has halted, so the cost follows each sample's own number of steps;
* ``halting="threshold"`` halts deterministically where the cumulative ``Σ p`` first reaches a
  threshold (0.5: the median), also stopping early.

The input does not change between steps, so the step function may split off an ``encode`` that runs
once per forward pass (for MNIST: the CNN); its result, the *context*, is what each step sees. The
context and the hidden state are tensors whose first axis is the batch.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor, nn

from .halting import (
    check_max_steps,
    expected_steps,
    log_halting_distribution,
    sample_halt,
    sample_halting_step,
)

HALTING_MODES = ("full", "sample", "threshold")


class StepFunction(nn.Module):
    """Base class of a step function ``(x, h_n) -> (ŷ_n, z_n, h_{n+1})``.

    Subclasses implement :meth:`step` and :meth:`initial_state`, and may override :meth:`encode`
    for work that depends on the input alone (done once, not at every step).
    """

    def encode(self, x: Tensor) -> Tensor:
        """Per-input work done once per forward pass; identity by default."""
        return x

    def initial_state(self, context: Tensor) -> Tensor:
        """``h_1`` for a batch, ``(B, H)``."""
        raise NotImplementedError

    def step(self, context: Tensor, h: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """One step: returns ``(ŷ_n (B, C), z_n (B,), h_{n+1} (B, H))``."""
        raise NotImplementedError


@dataclass
class PonderOutput:
    """What :class:`PonderNet` returns.

    Attributes:
        logits: ``(S, B, C)`` predictions of the ``S`` steps that ran (``S == N`` in full mode). In
            the early-exit modes a sample is no longer computed after its halting step: its later
            entries hold 0.
        lambda_logits: ``(S, B)`` halting logits ``z_n``, ``λ_n = sigmoid(z_n)`` (0 after a halt).
        log_p: ``(N, B)`` log halting distribution; only in full mode (else None).
        halt_step: ``(B,)`` halting step in 1..S; sampled or by threshold (None in full mode unless
            sampling was asked for).
        steps_run: ``S``, how many steps the network actually computed.
    """

    logits: Tensor
    lambda_logits: Tensor
    log_p: Tensor | None = None
    halt_step: Tensor | None = None
    steps_run: int = 0

    @property
    def expected_steps(self) -> Tensor:
        """``(B,)`` expected steps ``Σ_n n · p_n`` (needs the full unroll)."""
        if self.log_p is None:
            raise ValueError("expected steps need the full halting distribution: use halting='full'.")
        return expected_steps(self.log_p)

    @property
    def prediction_logits(self) -> Tensor:
        """``(B, C)`` logits at each sample's halting step."""
        if self.halt_step is None:
            raise ValueError("no halting step: call PonderNet with halting='sample' or 'threshold'.")
        index = (self.halt_step - 1).view(1, -1, 1).expand(1, -1, self.logits.shape[-1])
        return self.logits.gather(0, index).squeeze(0)


class PonderNet(nn.Module):
    """Wraps a :class:`StepFunction` into PonderNet.

    Args:
        step_function: the network that is applied at every step.
        max_steps: ``N``, the most steps ever unrolled (λ_N = 1).
        threshold: cumulative probability at which ``halting="threshold"`` halts.
    """

    def __init__(self, step_function: StepFunction, max_steps: int = 20, threshold: float = 0.5):
        super().__init__()
        self.step_function = step_function
        self.max_steps = check_max_steps(max_steps)
        if not 0.0 < threshold <= 1.0:
            raise ValueError(f"threshold must lie in (0, 1], got {threshold}.")
        self.threshold = threshold

    def forward(
        self,
        x: Tensor,
        halting: str | None = None,
        generator: torch.Generator | None = None,
        sample: bool = False,
    ) -> PonderOutput:
        """Run PonderNet on a batch.

        Args:
            x: the batch, in the form the step function expects (``(B, 1, 28, 28)`` for MNIST).
            halting: ``"full"``, ``"sample"`` or ``"threshold"``; default ``"full"`` in training mode
                and ``"sample"`` in eval mode.
            generator: CPU generator for the halting coins (reproducible sampling).
            sample: in full mode, also sample a halting step from the full unroll (same coins as the
                early-exit mode).
        """
        if halting is None:
            halting = "full" if self.training else "sample"
        if halting not in HALTING_MODES:
            raise ValueError(f"halting must be one of {HALTING_MODES}, got {halting!r}.")

        context = self.step_function.encode(x)  # once per forward pass, not once per step
        h = self.step_function.initial_state(context)
        logits, lambda_logits = [], []
        batch = h.shape[0]
        running = torch.ones(batch, dtype=torch.bool, device=h.device)
        halt_step = torch.full((batch,), self.max_steps, dtype=torch.long, device=h.device)
        log_survival = torch.zeros(batch, device=h.device)  # Σ_{j≤n} log(1 − λ_j), for "threshold"
        active = torch.arange(batch, device=h.device)  # the samples still computing
        for n in range(1, self.max_steps + 1):
            y_n, z_n, h = self.step_function.step(context, h)
            if halting == "full":
                logits.append(y_n)
                lambda_logits.append(z_n)
                continue
            # Halted samples are no longer computed: scatter the active rows into full-batch tensors.
            logits.append(y_n.new_zeros((batch, *y_n.shape[1:])).index_copy(0, active, y_n))
            lambda_logits.append(z_n.new_zeros(batch).index_copy(0, active, z_n))
            if n == self.max_steps:
                break  # λ_N = 1: whoever is left halts here
            if halting == "sample":
                halts = sample_halt(lambda_logits[-1], generator) & running  # halt ~ Bernoulli(λ_n)
            else:  # halt once Σ_{j≤n} p_j = 1 − Π_{j≤n}(1 − λ_j) reaches the threshold
                log_survival[active] += nn.functional.logsigmoid(-z_n.float())
                halts = (-torch.expm1(log_survival) >= self.threshold - 1e-6) & running
            halt_step[halts] = n
            running &= ~halts
            if not running.any():
                break  # every sample has halted: the remaining steps are never computed
            keep = running[active]  # drop the samples that just halted from the computation
            active, context, h = active[keep], context[keep], h[keep]

        logits_t = torch.stack(logits)  # (S, B, C)
        lambda_t = torch.stack(lambda_logits)  # (S, B)
        out = PonderOutput(logits=logits_t, lambda_logits=lambda_t, steps_run=len(logits))
        if halting == "full":
            out.log_p = log_halting_distribution(lambda_t.float())
            if sample:
                out.halt_step = sample_halting_step(lambda_t, generator)
        else:
            out.halt_step = halt_step
        return out
