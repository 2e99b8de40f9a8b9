"""What every halting method shares: the unroll with early exit, halting rules, and the output.

A *halting method* turns a :class:`~pondernet_tutorial.steps.base.StepFunction` into a network that
decides, per sample, how many steps to take, and says how that decision is trained. All methods run
the step function through one loop, :func:`unroll`:

* without a halting rule it runs all ``N`` steps for every sample (PonderNet in training, the
  fixed-step baselines);
* with a :class:`HaltingRule` it asks the rule after each step which of the samples still running halt
  now. A halted sample is dropped from the computation (its rows leave the context and the state), and
  the loop ends as soon as every sample has halted, so the cost follows each sample's own number of
  steps. PonderNet's coin flips and threshold and ACT's cumulative halting are such rules.

:func:`halting_steps` applies a rule to the halting logits of a full unroll. It runs the very same
book-keeping as the early-exit loop, so a seeded rule gives the same halting steps either way.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor, nn

from ..halting import check_max_steps
from ..losses import per_sample_cross_entropy
from ..steps.base import StepFunction, select_rows, state_batch_size


class HaltingRule:
    """Decides after each step which of the samples still running halt now.

    A rule may keep per-sample state over the whole batch (the coins, a running sum); ``active`` gives
    the batch indices of the samples still running, in the order of the rows of ``z``.
    """

    def start(self, batch: int, max_steps: int, device: torch.device) -> None:
        """Called once before the first step of a forward pass."""

    def halts(self, n: int, z: Tensor, active: Tensor) -> Tensor:
        """``(A,)`` booleans, True where a running sample halts after step ``n``.

        Args:
            n: the step just computed, 1..N−1 (every sample left halts at step N).
            z: ``(A,)`` halting logits of the running samples at step ``n`` (detached).
            active: ``(A,)`` their indices in the batch.
        """
        raise NotImplementedError


class _HaltTracker:
    """Which samples are still running and when each halted; shared by :func:`unroll` and
    :func:`halting_steps` so that both take exactly the same decisions."""

    def __init__(self, rule: HaltingRule, batch: int, max_steps: int, device: torch.device):
        rule.start(batch, max_steps, device)
        self.rule = rule
        self.active = torch.arange(batch, device=device)  # the samples still running
        self.halt_step = torch.full((batch,), max_steps, dtype=torch.long, device=device)

    def after_step(self, n: int, z: Tensor) -> Tensor:
        """Record the halts after step ``n`` (``z``: ``(A,)`` logits of the running samples) and
        return the mask, over the running samples, of those that go on."""
        halts = self.rule.halts(n, z.detach(), self.active)
        self.halt_step[self.active[halts]] = n
        keep = ~halts
        self.active = self.active[keep]
        return keep


def halting_steps(rule: HaltingRule, halting_logits: Tensor) -> Tensor:
    """Apply a halting rule to the logits of a full unroll, step by step.

    Args:
        halting_logits: ``(N, B)`` halting logits of all N steps.

    Returns:
        ``(B,)`` long tensor of halting steps in 1..N: what :func:`unroll` with the same rule (and the
        same seed) returns.
    """
    n_steps, batch = halting_logits.shape
    tracker = _HaltTracker(rule, batch, n_steps, halting_logits.device)
    for n in range(1, n_steps):  # no decision after the last step: everyone left halts there
        tracker.after_step(n, halting_logits[n - 1, tracker.active])
        if tracker.active.numel() == 0:
            break
    return tracker.halt_step


def _first_tensor(state) -> Tensor:
    while not isinstance(state, Tensor):
        state = state[0]
    return state


def unroll(
    step_function: StepFunction, x, max_steps: int, rule: HaltingRule | None = None
) -> tuple[Tensor, Tensor, Tensor | None]:
    """Run a step function for up to ``max_steps`` steps.

    Args:
        x: the input batch, in the form the step function expects.
        rule: ``None`` runs all steps for every sample; a :class:`HaltingRule` stops each sample where
            the rule says, drops it from the computation, and ends the loop once all have halted.

    Returns:
        ``(logits (S, B, C), halting_logits (S, B), halt_step (B,) or None)`` for the ``S`` steps that
        ran (``S == max_steps`` without a rule). After its halting step a sample's entries hold 0.
    """
    context = step_function.encode(x)  # once per forward pass, not once per step
    h = step_function.initial_state(context)
    logits, halting_logits = [], []
    if rule is None:  # the full unroll: every sample runs all N steps
        for _ in range(max_steps):
            y_n, z_n, h = step_function.step(context, h)
            logits.append(y_n)
            halting_logits.append(z_n)
        return torch.stack(logits), torch.stack(halting_logits), None

    batch = state_batch_size(h)
    tracker = _HaltTracker(rule, batch, max_steps, _first_tensor(h).device)
    for n in range(1, max_steps + 1):
        y_n, z_n, h = step_function.step(context, h)
        if len(tracker.active) == batch:
            logits.append(y_n)
            halting_logits.append(z_n)
        else:  # only the running samples were computed: scatter their rows into full-batch tensors
            active = tracker.active
            logits.append(y_n.new_zeros((batch, *y_n.shape[1:])).index_copy(0, active, y_n))
            halting_logits.append(z_n.new_zeros(batch).index_copy(0, active, z_n))
        if n == max_steps:
            break  # every sample left halts at the last step
        keep = tracker.after_step(n, z_n)
        if tracker.active.numel() == 0:
            break  # every sample has halted: the remaining steps are never computed
        if not keep.all():  # drop the samples that just halted from the computation
            context, h = select_rows(context, keep), select_rows(h, keep)
    return torch.stack(logits), torch.stack(halting_logits), tracker.halt_step


@dataclass
class PonderOutput:
    """What a halting method returns.

    Attributes:
        logits: ``(S, B, C)`` predictions ``ŷ_n`` of the ``S`` steps that ran. In the early-exit modes a
            sample is no longer computed after its halting step: its later entries hold 0.
        halting_logits: ``(S, B)`` halting logits ``z_n`` (PonderNet's ``λ_n = sigmoid(z_n)``, ACT's
            halting units ``h_n = sigmoid(z_n)``); 0 after a halt.
        halt_step: ``(B,)`` the step at which each sample halts (sampled, by threshold, ACT's ``N(x)``
            or the fixed ``k``); None after a full unroll unless a halting step was asked for.
        steps_run: ``S``, how many steps the network actually computed for the batch.
        log_p: ``(N, B)`` PonderNet's log halting distribution (full unroll only).
        p: ``(S, B)`` the weights of the steps: PonderNet's ``p_n``, ACT's ``h_n`` and remainder.
        prediction: ``(B, C)`` the method's answer where it is not the halting step's prediction (ACT's
            mean-field output ``Σ_n p_n ŷ_n``).
        ponder_cost: ``(B,)`` ACT's ponder cost ``ρ = N + R``.
    """

    logits: Tensor
    halting_logits: Tensor
    halt_step: Tensor | None = None
    steps_run: int = 0
    log_p: Tensor | None = None
    p: Tensor | None = None
    prediction: Tensor | None = None
    ponder_cost: Tensor | None = None

    def __post_init__(self):
        if self.p is None and self.log_p is not None:
            self.p = self.log_p.exp()

    @property
    def expected_steps(self) -> Tensor:
        """``(B,)`` expected steps ``Σ_n n · p_n`` under the method's step weights."""
        if self.p is None:
            raise ValueError("expected steps need the full halting distribution: use halting='full'.")
        steps = torch.arange(1, self.p.shape[0] + 1, device=self.p.device, dtype=self.p.dtype)
        return (self.p * steps[:, None]).sum(0)

    @property
    def prediction_logits(self) -> Tensor:
        """``(B, C)`` the answer: ``prediction`` if the method combines steps, else ``ŷ`` at ``halt_step``."""
        if self.prediction is not None:
            return self.prediction
        if self.halt_step is None:
            raise ValueError("no halting step: call PonderNet with halting='sample' or 'threshold'.")
        index = (self.halt_step - 1).view(1, -1, 1).expand(1, -1, self.logits.shape[-1])
        return self.logits.gather(0, index).squeeze(0)


def init_halting_bias(step_function: StepFunction, bias: float) -> None:
    """Set the initial bias of the step function's halting layer (``step_function.halting_head``)."""
    head = getattr(step_function, "halting_head", None)
    if not isinstance(head, nn.Linear) or head.bias is None:
        raise ValueError(
            f"halting_bias needs a step function whose halting layer is an nn.Linear with a bias named "
            f"'halting_head'; {type(step_function).__name__} has none."
        )
    with torch.no_grad():
        head.bias.fill_(float(bias))


class PonderingMethod(nn.Module):
    """Base class of a halting method: a step function, how to unroll it, and how to train halting.

    Subclasses implement :meth:`forward` (inference), :meth:`fit_forward` (what training and
    validation unroll) and :meth:`loss`.

    Args:
        step_function: the network applied at every step.
        max_steps: the most steps ever computed.
        loss_fn: per-sample task loss ``(logits (M, C), targets (M,)) -> (M,)``; cross-entropy by default.
        halting_bias: if given, the initial bias of the step function's ``halting_head``.
    """

    loss_terms: tuple[str, ...] = ()  # the named terms of :meth:`loss` besides "loss"
    unrolls_all_steps: bool = False  # fit_forward runs every step for every sample (no early exit)

    def __init__(self, step_function: StepFunction, max_steps: int, loss_fn=None, halting_bias=None):
        super().__init__()
        if not all(callable(getattr(step_function, name, None)) for name in ("initial_state", "step")):
            raise TypeError(
                f"step_function must be a StepFunction (with initial_state and step), "
                f"got {type(step_function).__name__}."
            )
        self.step_function = step_function
        self.max_steps = check_max_steps(max_steps)
        self.loss_fn = loss_fn or per_sample_cross_entropy
        if halting_bias is not None:
            init_halting_bias(step_function, halting_bias)

    def fit_forward(self, x) -> PonderOutput:
        """The unroll that training and validation need (for PonderNet: all N steps)."""
        raise NotImplementedError

    def predict(self, x, generator: torch.Generator | None = None) -> PonderOutput:
        """Inference as the method defines it, with early exit where the method halts early."""
        return self(x)

    def loss(self, out: PonderOutput, targets: Tensor) -> dict[str, Tensor]:
        """``{"loss": ..., **terms}``, scalars averaged over the batch."""
        raise NotImplementedError

    def halting_prior(self) -> Tensor | None:
        """``(N,)`` the halting distribution the method's regulariser pulls towards, if it has one
        (PonderNet); the evaluation measures each sample's distance to it."""
        return None

    def inference_halt_step(self, out: PonderOutput, generator: torch.Generator | None = None) -> Tensor:
        """The halting steps that inference would take for the batch behind ``out`` (from
        :meth:`fit_forward`), drawn with ``generator`` where halting is random."""
        return out.halt_step
