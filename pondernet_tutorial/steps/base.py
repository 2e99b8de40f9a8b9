"""The step-function interface: what every network that ponders implements.

A *step function* maps the input and a hidden state to a prediction, a halting logit and the next
state,

    (x, h_n) -> (ŷ_n, z_n, h_{n+1}),        λ_n = sigmoid(z_n)  (PonderNet),  η_n = sigmoid(z_n)  (ACT).

The input does not change between steps, so a step function may split off an :meth:`encode` that runs
once per forward pass (for MNIST: the CNN); its result, the *context*, is what each step sees. The
context and the hidden state are a tensor or a tuple of tensors (an LSTM's ``(h, c)``), each with the
batch on its first axis: the halting methods drop halted samples from them with :func:`select_rows`.
"""

from __future__ import annotations

import numbers
from collections.abc import Callable
from typing import Union

from torch import Tensor, nn

State = Union[Tensor, tuple]  # a tensor, or a (possibly nested) tuple of tensors, batch first


def check_sizes(**sizes: int) -> None:
    """Each size (a layer's width, an input's length) a whole number >= 1, or a ``ValueError`` that
    names it; the number of weights bounds them from above (the run machinery counts them)."""
    for name, size in sizes.items():
        if isinstance(size, bool) or not isinstance(size, numbers.Integral) or size < 1:
            raise ValueError(f"{name} must be >= 1, got {size!r}.")


def map_state(fn: Callable[[Tensor], Tensor], state: State) -> State:
    """Apply ``fn`` to every tensor of a state, keeping its tuple structure."""
    if isinstance(state, Tensor):
        return fn(state)
    if isinstance(state, (tuple, list)):
        return type(state)(map_state(fn, part) for part in state)
    raise TypeError(f"a state is a tensor or a tuple of tensors, got {type(state).__name__}.")


def select_rows(state: State, index: Tensor) -> State:
    """The rows ``index`` (a boolean mask or indices over the batch) of every tensor of a state."""
    return map_state(lambda t: t[index], state)


def state_batch_size(state: State) -> int:
    """The batch size of a state: the first axis of its first tensor."""
    while not isinstance(state, Tensor):
        if not isinstance(state, (tuple, list)) or not state:
            raise TypeError("a state is a tensor or a non-empty tuple of tensors.")
        state = state[0]
    return state.shape[0]


class StepFunction(nn.Module):
    """Base class of a step function ``(x, h_n) -> (ŷ_n, z_n, h_{n+1})``.

    Subclasses implement :meth:`initial_state` and :meth:`step`, and may override :meth:`encode` for
    work that depends on the input alone (done once, not at every step). A subclass that names its
    halting layer ``halting_head`` (an ``nn.Linear`` computing ``z_n``) lets a halting method set that
    layer's initial bias (ACT's ``halting_bias``).
    """

    def encode(self, x: Tensor) -> State:
        """Per-input work done once per forward pass; identity by default."""
        return x

    def initial_state(self, context: State) -> State:
        """``h_1`` for a batch."""
        raise NotImplementedError(f"{type(self).__name__} must define initial_state(self, context): h_1.")

    def step(self, context: State, h: State) -> tuple[Tensor, Tensor, State]:
        """One step: returns ``(ŷ_n (B, C), z_n (B,), h_{n+1})``."""
        raise NotImplementedError(
            f"{type(self).__name__} must define step(self, context, h): (ŷ_n, z_n, h_next)."
        )


def halting_head(step_function: StepFunction) -> nn.Linear:
    """The step function's halting layer, whose bias a method sets (ACT's ``halting_bias``)."""
    head = getattr(step_function, "halting_head", None)
    if not isinstance(head, nn.Linear) or head.bias is None:
        raise ValueError(
            f"halting_bias needs a halting_head (nn.Linear, with a bias) in {type(step_function).__name__}."
        )
    return head


SQUEEZE = "a step returns z_n of shape (batch,): halting_head(h).squeeze(1)"


def check_step(y_n: Tensor, z_n: Tensor) -> None:
    """A step's prediction ``ŷ_n (B, C)`` and halting logit ``z_n (B,)``, as a method reads them: a
    ``(B, 1)`` logit (``.squeeze(1)`` forgotten) would broadcast into wrong shapes further on."""
    if not isinstance(y_n, Tensor) or not isinstance(z_n, Tensor) or y_n.dim() != 2:
        what = ", ".join(
            f"{tuple(v.shape)}" if isinstance(v, Tensor) else type(v).__name__ for v in (y_n, z_n)
        )
        raise ValueError(
            f"a step returns (ŷ_n, z_n, h_next): the prediction (batch, classes) and the halting logit "
            f"(batch,) as tensors, got {what}."
        )
    if z_n.dim() == 1 and y_n.shape[1:] == z_n.shape != y_n.shape[:1]:  # (classes, batch): the batch is z_n's
        raise ValueError(
            f"the prediction ŷ_n must have shape (batch, classes), ({len(z_n)}, ...) here, got {tuple(y_n.shape)}: "
            "transpose it."
        )
    if z_n.shape != y_n.shape[:1]:
        raise ValueError(
            f"the halting logit z_n must have shape {tuple(y_n.shape[:1])}, got {tuple(z_n.shape)}: {SQUEEZE}."
        )
