"""HRM's halting head (Wang et al. 2025, "Hierarchical Reasoning Model", arXiv 2506.21734v3, §2
"Adaptive computational time (ACT)"): two logits per step, *halt* and *continue*, learned by Q-learning
without discount, over the same step functions as PonderNet and ACT.

At step ``n`` the head gives ``q_n = (q^halt_n, q^cont_n)``, logits of the values ``Q̂_n = σ(q_n)``.
Halting ends the episode with reward ``1[ŷ_n = y]``; continuing earns nothing and moves to step n + 1:

    c_n      = 1[argmax ŷ_n = y]                               Ĝ^halt_n, no gradient
    G_n      = σ(q^halt_{n+1})                  if n = N       Ĝ^cont_n, no gradient
             = σ(max(q^halt_{n+1}, q^cont_{n+1}))  otherwise
    T(x)     = min{ n ≥ k : q^halt_n > q^cont_n }  (or N)     training's halting step
    L        = mean_b Σ_{n≤T} [ ℒ(y, ŷ_n) + w · (BCE(q^halt_n, c_n) + BCE(q^cont_n, G_n)) ]

``k`` is the exploration's minimum: with probability ``exploration`` it is drawn uniformly from
{2, …, N} (once per sample), otherwise it is 1. Inference (:meth:`HRMHalting.infer`) stops each sample
at the first step where ``q^halt_n > q^cont_n``, without exploration, or at ``eval_max_steps``.

Sources. The paper, §2: the targets, the random minimum and the loss with weight 1. HRM's code at
commit ``bd62227`` (sapientinc/HRM): ``models/hrm/hrm_act_v1.py`` L114 and L143–144 (a 2-output head,
zero weights, both biases −5), L260–273 (halting in training only, exploration), L279–281 (the continue
target), ``models/losses.py`` L67, L84, L94, L101 (the halt target is whole-answer exact match, both
losses are BCE on logits, weighed 0.5). Where paper and code differ, this module takes:

* the code's weight 0.5 and biases −5 as defaults (``halting_weight``, ``halting_bias``); the paper's
  weight is ``halting_weight=1``, and the paper gives no initialisation;
* the paper's minimum ``k``, drawn once per sample. The code draws a new ``k`` at every segment, so
  there a sample that would halt is held back one step at a time rather than sent to a random depth;
* the code's target at the last step: ``σ(q^halt_{N+1})``, the halt logit of a step beyond the limit
  (the paper's text says "m ≥ N_max"). No sample takes that step;
* halting at evaluation: HRM's released code never halts early there; it runs every sample to the
  step limit. A maintainer explained why in sapientinc/HRM issue #7 (2025-07-29): batched inference
  with halting needs dynamic scheduling, and running to the limit "does not make the results worse".
  This package's ``infer`` halts as the paper's Fig. 5 describes, each sample at its own step.

Two logits from a step function that emits one. The step functions compute their halting logit with
``halting_head``, an ``nn.Linear(·, 1)``, and return ``halting_head(features).squeeze(1)``. This method
replaces that layer, in the step function it is given, by an ``nn.Linear(·, 2)`` on the same features:
``squeeze(1)`` then leaves ``(B, 2)``, halt and continue. A second head of the method's own would need
the features, which only the step function sees. Other methods keep their own step functions and see
one logit, as before; a step function given to this method is changed for good.

In the full unroll the bootstrap target ``G_n`` reads step n + 1's logits from the same unroll, so no
second forward pass runs. HRM's code runs the step again, without gradient, at every segment. Only the
last step's target needs a step beyond the limit: :meth:`HRMHalting.forward` computes that one step
without gradient, once per batch, and keeps its halting logits.

How training differs from HRM's. HRM takes one optimizer step per segment, and detaches the state
between segments, so no gradient crosses segments; a halted sample's place goes to the next batch's
sample. Here one optimizer step covers a whole batch: every step is unrolled, the steps after ``T(x)``
are masked out, and the gradients flow back through all the steps up to ``T(x)``.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..halting import check_weight, first_halt
from .base import HaltingMethod, Unroll, at_step, per_sample_loss
from .first_exit import exit_at_first

HALT, CONTINUE = 0, 1  # the two columns of the head's logits


def check_probability(value: float, name: str) -> float:
    """Return ``value`` as a float in [0, 1], or raise a ``ValueError`` saying so."""
    if not 0.0 <= float(value) <= 1.0:
        raise ValueError(f"{name} must lie between 0 and 1 (a probability), got {value}.")
    return float(value)


def q_halt_step(q: Tensor, minimum: Tensor | None = None) -> Tensor:
    """``(B,)`` the first step ``n ≥ minimum`` with ``q^halt_n > q^cont_n``, or the last row's step.

    Args:
        q: ``(S, B, 2)`` halt and continue logits of steps 1..S.
        minimum: ``(B,)`` the least step each sample may halt at (exploration); None: 1.
    """
    halts = q[..., HALT] > q[..., CONTINUE]  # halt when Q̂_halt > Q̂_cont
    if minimum is not None:
        steps = torch.arange(1, q.shape[0] + 1, device=q.device)[:, None]
        halts = halts & (steps >= minimum[None])  # and n ≥ k
    return first_halt(halts)


def continue_targets(q_next: Tensor) -> Tensor:
    """``(N, B)`` the targets ``G_n`` of the continue logits of steps 1..N, from ``q_next``, the
    ``(N, B, 2)`` logits of steps 2..N+1 (detached: a target carries no gradient)."""
    q_next = q_next.detach().float()
    best = torch.maximum(q_next[..., HALT], q_next[..., CONTINUE])  # max(q^halt_{n+1}, q^cont_{n+1})
    best[-1] = q_next[-1, :, HALT]  # n = N: q^halt_{N+1}, as HRM's code
    return torch.sigmoid(best)  # G_n = σ(·)


class HRMHalting(HaltingMethod):
    """HRM's halting head over a step function: halt and continue logits, trained by Q-learning.

    Args:
        step_function: the network applied at every step; its ``halting_head`` (``nn.Linear(·, 1)``)
            is replaced by an ``nn.Linear(·, 2)`` on the same features.
        max_steps: ``N``, the most steps in training (20 as the package's other methods; HRM's code: 16).
        halting_weight: weight w ≥ 0 of the two Q losses (HRM's code: 0.5; the paper: 1).
        exploration: probability that a training sample must run at least k ~ U{2..N} steps.
        halting_bias: initial bias of both logits, whose weights then start at zero (HRM's code:
            −5, so neither logit leads and every sample runs N steps at first); None keeps PyTorch's
            initialisation of the new layer.
        loss_fn: per-sample task loss (cross-entropy by default), applied to every step up to T(x).
        eval_max_steps: the most steps at evaluation and inference (default ``max_steps``).
    """

    loss_terms = ("task", "q_halt", "q_continue")

    def __init__(
        self,
        step_function,
        max_steps: int = 20,
        halting_weight: float = 0.5,
        exploration: float = 0.1,
        halting_bias: float | None = -5.0,
        loss_fn=None,
        eval_max_steps: int | None = None,
    ):
        super().__init__(step_function, max_steps, loss_fn, None, eval_max_steps)
        self.halting_weight = check_weight(halting_weight, "halting_weight")
        self.exploration = check_probability(exploration, "exploration")
        if halting_bias is not None and not math.isfinite(float(halting_bias)):
            raise ValueError(f"halting_bias must be a finite number or None, got {halting_bias}.")
        head = getattr(step_function, "halting_head", None)
        if not isinstance(head, nn.Linear) or head.out_features != 1:
            raise ValueError(
                "hrm needs a step function whose halting_head is an nn.Linear(features, 1), which it "
                f"widens to halt and continue logits; {type(step_function).__name__} has none."
            )
        q_head = nn.Linear(head.in_features, 2, device=head.weight.device, dtype=head.weight.dtype)
        if halting_bias is not None:  # HRM's code: zero weights, both biases −5
            nn.init.zeros_(q_head.weight)
            nn.init.constant_(q_head.bias, float(halting_bias))
        step_function.halting_head = q_head  # the step function now returns (B, 2): q^halt, q^cont

    def forward(self, x, steps: int | None = None) -> Unroll:
        """The full unroll: ``logits (S, B, C)`` and ``halting_logits (R, B, 2)``, R = max(S, N + 1).

        The rows after S are computed without gradient: step N + 1's logits are the last step's target.
        """
        steps = steps or (self.max_steps if self.training else self.eval_steps)
        context = self.step_function.encode(x)
        h = self.step_function.initial_state(context)
        logits, q = [], []
        for n in range(1, max(steps, self.max_steps + 1) + 1):
            with torch.set_grad_enabled(torch.is_grad_enabled() and n <= steps):
                y_n, q_n, h = self.step_function.step(context, h)  # (ŷ_n, q_n, h_{n+1}) = s(x, h_n)
            if q_n.shape != (y_n.shape[0], 2):
                raise ValueError(
                    f"hrm expects (batch, 2) halting logits from the step function, got {tuple(q_n.shape)}: "
                    "its step must return halting_head(features).squeeze(1)."
                )
            if n <= steps:
                logits.append(y_n)
            q.append(q_n)
        return Unroll(torch.stack(logits), torch.stack(q))

    def minimum_steps(self, batch: int, device) -> Tensor:
        """``(B,)`` the exploration's minimum k: U{2..N} with probability ``exploration``, else 1.
        Drawn on the device (a CUDA graph replays it with fresh numbers)."""
        k = torch.ones(batch, dtype=torch.long, device=device)
        if self.max_steps < 2 or self.exploration == 0.0:
            return k
        explore = torch.rand(batch, device=device) < self.exploration
        return torch.where(explore, torch.randint(2, self.max_steps + 1, (batch,), device=device), k)

    def loss(self, out: Unroll, targets: Tensor) -> dict[str, Tensor]:
        """The task and Q losses of every step up to training's halting step ``T(x)`` (with exploration
        in training mode only), and ``"weights"``: all mass on ``T(x)``."""
        n = self.max_steps
        y_hat, q = out.logits[:n], out.halting_logits.float()
        q_now, batch = q[:n], targets.shape[0]
        minimum = self.minimum_steps(batch, q.device) if self.training else None
        halt_step = q_halt_step(q_now.detach(), minimum)  # T(x), an integer: no gradient
        steps = torch.arange(1, n + 1, device=q.device)[:, None]
        taken = (steps <= halt_step[None]).float()  # the steps the sample runs: n ≤ T
        correct = (y_hat.detach().argmax(-1) == targets).float()  # c_n = 1[argmax ŷ_n = y]
        bootstrap = continue_targets(q[1 : n + 1])  # G_n
        task = per_sample_loss(self.loss_fn, y_hat.float().reshape(n * batch, -1), targets.repeat(n))
        bce_halt = F.binary_cross_entropy_with_logits(q_now[..., HALT], correct, reduction="none")
        bce_cont = F.binary_cross_entropy_with_logits(q_now[..., CONTINUE], bootstrap, reduction="none")
        task = (taken * task.view(n, batch)).sum(0).mean()  # mean_b Σ_{n≤T} ℒ(y, ŷ_n)
        q_halt = (taken * bce_halt).sum(0).mean()  # mean_b Σ_{n≤T} BCE(q^halt_n, c_n)
        q_continue = (taken * bce_cont).sum(0).mean()  # mean_b Σ_{n≤T} BCE(q^cont_n, G_n)
        weights = (steps == halt_step[None]).float()
        total = task + self.halting_weight * (q_halt + q_continue)  # L = task + w · (halt + continue)
        return {"loss": total, "task": task, "q_halt": q_halt, "q_continue": q_continue, "weights": weights}

    def weights(self, out: Unroll) -> Tensor:
        """``(S, B)``: all mass on the step where inference halts."""
        steps = torch.arange(1, out.logits.shape[0] + 1, device=out.logits.device)[:, None]
        return (steps == self.answer(out)[1][None]).float()

    def answer(self, out: Unroll, generator=None) -> tuple[Tensor, Tensor]:
        """``ŷ_T`` and ``T``, the first step with ``q^halt > q^cont`` among the ``S`` steps of the
        unroll (or S); no exploration and no coin (``generator`` is unused)."""
        halt_step = q_halt_step(out.halting_logits[: out.logits.shape[0]])
        return at_step(out.logits, halt_step), halt_step

    def infer(self, x, generator=None) -> tuple[Tensor, Tensor]:
        """Inference with early exit: a sample leaves after the first step with ``q^halt > q^cont`` (or
        ``eval_max_steps``); returns ``(prediction (B, C), halt_step (B,))``, as :meth:`answer` on a
        full unroll in eval mode."""
        return exit_at_first(self, x, lambda q: q[:, HALT] > q[:, CONTINUE])  # Q̂_halt > Q̂_cont
