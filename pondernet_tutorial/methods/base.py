"""What every halting method shares: the unroll with early exit, halting rules, and the output.

A *halting method* turns a :class:`~pondernet_tutorial.steps.base.StepFunction` into a network that
decides, per sample, how many steps to take, and says how that decision is trained. All methods run
the step function through one loop, :func:`unroll`:

* without a halting rule it runs all ``N`` steps for every sample: what every method does in training
  (PonderNet needs every step's prediction; ACT and the fixed-step baseline mask the steps after each
  sample's halt), so a training step has fixed shapes and never waits for the device;
* with a :class:`HaltingRule` it asks the rule after each step which of the samples still running halt
  now. A halted sample is dropped from the computation (its rows leave the context and the state), and
  the loop ends as soon as every sample has halted, so the cost follows each sample's own number of
  steps. This is inference; PonderNet's coin flips and threshold and ACT's cumulative halting are such
  rules.

A rule is written once, as :meth:`HaltingRule.decisions`: from the halting logits of the steps so far,
with tensor operations only. The early-exit loop asks it about the latest step;
:func:`halting_steps` applies it to a full unroll at once, so the two take the same halting steps
with the same coins, and the full unroll needs no Python loop over steps and no boolean index (no
shape that depends on the data, nothing that makes the host wait for the device).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor, nn

from ..halting import check_max_steps
from ..losses import per_sample_cross_entropy
from ..steps.base import StepFunction, select_rows, state_batch_size


class HaltingRule:
    """Decides which samples halt after each step, from the halting logits of the steps so far.

    :meth:`start` is called once per forward pass (a rule draws its coins there); :meth:`decisions`
    answers for every step given, so the early-exit :func:`unroll` and a full unroll
    (:func:`halting_steps`) ask the same function.
    """

    def start(self, batch: int, max_steps: int, device: torch.device) -> None:
        """Called once before the first step of a forward pass."""

    def decisions(self, halting_logits: Tensor) -> Tensor:
        """``(S, B)`` booleans: would sample ``b``, still running after step ``n``, halt there?

        Args:
            halting_logits: ``(S, B)`` halting logits of steps 1..S (detached; rows of samples that
                have already halted hold 0 and their answers are not read).

        Row ``n − 1`` depends on the logits of steps 1..n only.
        """
        raise NotImplementedError


def first_halt(decisions: Tensor) -> Tensor:
    """``(B,)`` long: the first step ``n`` whose decision is True, ``N`` if none is (``decisions``:
    ``(N−1, B)``). Tensor operations only: no loop, no boolean index."""
    halts = torch.cat([decisions, decisions.new_ones((1, decisions.shape[1]))])  # everyone halts at N
    return halts.to(torch.uint8).argmax(0) + 1  # argmax returns the first of equal maxima


def halting_steps(rule: HaltingRule, halting_logits: Tensor) -> Tensor:
    """Apply a halting rule to the logits of a full unroll, all steps at once.

    Args:
        halting_logits: ``(N, B)`` halting logits of all N steps.

    Returns:
        ``(B,)`` long tensor of halting steps in 1..N: what :func:`unroll` with the same rule (and the
        same seed) returns.
    """
    n_steps, batch = halting_logits.shape
    rule.start(batch, n_steps, halting_logits.device)
    return first_halt(rule.decisions(halting_logits.detach())[:-1])  # every sample halts at step N


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

    batch, device = state_batch_size(h), _first_tensor(h).device
    rule.start(batch, max_steps, device)
    active = torch.arange(batch, device=device)  # the samples still running
    halt_step = torch.full((batch,), max_steps, dtype=torch.long, device=device)
    for n in range(1, max_steps + 1):
        y_n, z_n, h = step_function.step(context, h)
        if len(active) == batch:
            logits.append(y_n)
            halting_logits.append(z_n)
        else:  # only the running samples were computed: scatter their rows into full-batch tensors
            logits.append(y_n.new_zeros((batch, *y_n.shape[1:])).index_copy(0, active, y_n))
            halting_logits.append(z_n.new_zeros(batch).index_copy(0, active, z_n))
        if n == max_steps:
            break  # every sample left halts at the last step
        halts = rule.decisions(torch.stack(halting_logits).detach())[-1, active]  # the rule at step n
        halt_step[active[halts]] = n
        keep = ~halts
        active = active[keep]
        if active.numel() == 0:
            break  # every sample has halted: the remaining steps are never computed
        if not keep.all():  # drop the samples that just halted from the computation
            context, h = select_rows(context, keep), select_rows(h, keep)
    return torch.stack(logits), torch.stack(halting_logits), halt_step


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

    def expected_correct(self, targets: Tensor) -> Tensor:
        """``(B,)`` the probability that the answer is right, without drawing a halting step.

        Where the answer is one step's prediction, chosen by the halting step ``n ~ p``, it is
        ``Σ_n p_n · 1[argmax ŷ_n = y]``: the expectation of the sampled answer's correctness. Where the
        method combines the steps (ACT's mean-field output) or always answers at step ``k``, it is the
        answer's correctness.
        """
        if self.prediction is not None:
            return (self.prediction.argmax(-1) == targets).to(torch.float32)
        if self.p is None:
            raise ValueError("the expected accuracy needs the halting distribution: use a full unroll.")
        hits = (self.logits.argmax(-1) == targets[None]).to(self.p.dtype)  # 1[argmax ŷ_n = y], (S, B)
        return (self.p * hits).sum(0)  # Σ_n p_n 1[ŷ_n = y]

    def mean_halt_step(self) -> Tensor:
        """``(B,)`` the halting step where one was taken (sampled, ``N(x)``, ``k``), else its
        expectation ``Σ_n n p_n``: what training logs without flipping a coin."""
        return self.halt_step.float() if self.halt_step is not None else self.expected_steps

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

    Subclasses implement :meth:`forward` (inference, the interface for users: early exit where the
    method halts early), :meth:`fit_forward` (what training, validation and the evaluation unroll:
    every step for every sample, fixed shapes, no wait for the device) and :meth:`loss`.

    Args:
        step_function: the network applied at every step.
        max_steps: the most steps ever computed.
        loss_fn: per-sample task loss ``(logits (M, C), targets (M,)) -> (M,)``; cross-entropy by default.
        halting_bias: if given, the initial bias of the step function's ``halting_head``.
        eval_max_steps: the most steps at evaluation and inference (default ``max_steps``), for the
            methods that halt by themselves.
    """

    loss_terms: tuple[str, ...] = ()  # the named terms of :meth:`loss` besides "loss"
    step_answers: bool = False  # each step's prediction ŷ_n is a possible answer (the per-step tables)
    capturable: bool = True  # fit_forward and loss have fixed shapes and never wait for the device
    random_halting: bool = False  # inference_halt_step draws coins: the halting step is random

    def __init__(
        self,
        step_function: StepFunction,
        max_steps: int,
        loss_fn=None,
        halting_bias=None,
        eval_max_steps: int | None = None,
    ):
        super().__init__()
        if not all(callable(getattr(step_function, name, None)) for name in ("initial_state", "step")):
            raise TypeError(
                f"step_function must be a StepFunction (with initial_state and step), "
                f"got {type(step_function).__name__}."
            )
        self.step_function = step_function
        self.max_steps = check_max_steps(max_steps)
        self.eval_steps = self.max_steps if eval_max_steps is None else check_max_steps(eval_max_steps)
        self.loss_fn = loss_fn or per_sample_cross_entropy
        if halting_bias is not None:
            init_halting_bias(step_function, halting_bias)

    def fit_forward(self, x) -> PonderOutput:
        """The full unroll that training, validation and the evaluation run: all ``max_steps`` steps
        for every sample, with each method's halting applied by masking, not by leaving the loop."""
        raise NotImplementedError

    def evaluation_forward(self, x) -> PonderOutput:
        """The full unroll that validation and the evaluation tables run: as :meth:`fit_forward`, over
        the evaluation's step budget (``eval_max_steps``) and without training's truncation."""
        return self.fit_forward(x)

    def inference_input(self, x):
        """Check and convert an input given to :meth:`forward`: every floating tensor must be finite,
        and is cast to the parameters' dtype (float64 and half inputs are accepted)."""
        dtype = next(self.parameters()).dtype

        def convert(t):
            if not isinstance(t, Tensor) or not t.is_floating_point():
                return t  # the step function says what it expects
            if not bool(torch.isfinite(t).all()):
                raise ValueError(
                    f"the input holds NaN or infinite values ({int((~torch.isfinite(t)).sum())} of "
                    f"{t.numel()}): pass finite numbers."
                )
            return t.to(dtype)

        if isinstance(x, (tuple, list)) and all(isinstance(t, Tensor) for t in x):
            return type(x)(convert(t) for t in x)
        return convert(x)

    def predict(self, x, generator: torch.Generator | None = None) -> PonderOutput:
        """Inference as the method defines it, with early exit where the method halts early."""
        return self(x)

    def loss(self, out: PonderOutput, targets: Tensor) -> dict[str, Tensor]:
        """``{"loss": ..., **terms}``, scalars averaged over the batch."""
        raise NotImplementedError

    def halting_prior(self, n_steps: int | None = None) -> Tensor | None:
        """``(n_steps,)`` the halting distribution the method's regulariser pulls towards, if it has one
        (PonderNet), over ``n_steps`` steps (default ``max_steps``); the evaluation measures each
        sample's distance to it."""
        return None

    def inference_halt_step(self, out: PonderOutput, generator: torch.Generator | None = None) -> Tensor:
        """The halting steps that inference would take for the batch behind ``out`` (from
        :meth:`evaluation_forward`), drawn with ``generator`` where halting is random."""
        return out.halt_step
