"""Options declared once: type, default, help, choices and range check, in one :class:`Option`.

An option of a run is declared in one place: a field of
:class:`~pondernet_tutorial.runs.config.TrainConfig` (``setting(...)``), an entry of a halting method in
:data:`pondernet_tutorial.methods.METHOD_OPTIONS`, or an entry of a step function in
:data:`pondernet_tutorial.steps.STEP_OPTIONS`. The command line takes its flags, help, types and
choices from those declarations, ``TrainConfig.check`` validates with them, and the classes call the
same range checks (below) in their constructors, so each range is written once.

A range check is a function ``check(value, name) -> value`` that returns the value (as a ``float`` or
an ``int``) or raises a ``ValueError`` that names the option, the allowed range and what was given.
This module imports no PyTorch.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

Check = Callable[[Any, str], Any]


@dataclass(frozen=True)
class Option:
    """One option, declared once.

    Attributes:
        type: ``int``, ``float``, ``str`` or ``bool``; ``dict`` for the step function's options, ``object``
            for a value that only its ``check`` judges (``devices``: a count or a list).
        default: the default (an experiment may override it; ``None``: see ``optional``).
        help: one line for ``--help``.
        choices: the allowed values, if they are a list.
        check: the range check ``(value, name) -> value``, applied after the type is checked.
        optional: ``None`` is a value of its own (e.g. ``halting_bias``: PyTorch's initialisation).
        identity: the option changes the trained model (part of the run's identity and folder name);
            False for where and how fast a run trains (device, folders, logger, compilation).
        reproduce: also an option of ``reproduce``, shared by every run it trains.
        omitted_at_default: left out of a run's identity while it holds its declared default: an option
            added after runs were shipped, whose recorded identities (without it) stay valid.
    """

    type: type = float
    default: Any = None
    help: str = ""
    choices: tuple | None = None
    check: Check | None = None
    optional: bool = False
    identity: bool = True
    reproduce: bool = False
    omitted_at_default: bool = False

    def validate(self, name: str, value: Any) -> Any:
        """``value`` checked (type, range, choices) and normalised (an integral float becomes an int, an
        int a float where a float is declared), or a ``ValueError`` that names the option."""
        if value is None:
            if self.optional:
                return None
            raise ValueError(f"{name} must be given, got None.")
        value = of_type(self.type, value, name)
        if self.check is not None:
            value = self.check(value, name)
        if self.choices is not None and value not in self.choices:
            raise ValueError(f"{name} must be one of {', '.join(map(str, self.choices))}, got {value!r}.")
        return value


def of_type(kind: type, value: Any, name: str) -> Any:
    """``value`` as ``kind``: integers must be whole, floats finite, booleans ``True``/``False``."""
    if kind is bool:
        if not isinstance(value, bool):
            raise ValueError(f"{name} must be true or false, got {value!r}.")
        return value
    if kind is int:
        if isinstance(value, numbers.Integral) and not isinstance(value, bool):
            return int(value)
        if isinstance(value, numbers.Real) and not isinstance(value, bool) and float(value).is_integer():
            return int(value)  # 2.0 -> 2
        raise ValueError(f"{name} must be an integer, got {value!r}.")
    if kind is float:
        if not isinstance(value, numbers.Real) or isinstance(value, bool):
            raise ValueError(f"{name} must be a number, got {value!r}.")
        return check_finite(value, name)
    if kind is str and not isinstance(value, str):
        raise ValueError(f"{name} must be a string, got {value!r}.")
    if kind is dict and not isinstance(value, dict):
        raise ValueError(f"{name} must be a dictionary, got {value!r}.")
    return value


# ------------------------------------------------------------------ generic range checks
FLOAT32_MAX = 3.4028234663852886e38  # torch.finfo(torch.float32).max: the models' numbers are float32


def check_finite(value: float, name: str = "value") -> float:
    """A finite float that float32 holds: NaN, ±inf and values that overflow to ±inf in the model
    (|x| > 3.4e38) are refused, never trained on."""
    value = float(value)
    if not math.isfinite(value) or abs(value) > FLOAT32_MAX:
        raise ValueError(f"{name} must be a finite number (at most 3.4e38 in size), got {value}.")
    return value


def at_least(low: float) -> Check:
    """The check ``value >= low``."""

    def check(value, name):
        if not value >= low:  # False for NaN
            raise ValueError(f"{name} must be >= {low}, got {value!r}.")
        return value

    return check


def at_most(high: float, reason: str) -> Check:
    """The check ``value <= high``; ``reason`` says why the maximum is there (memory, time)."""

    def check(value, name):
        if not value <= high:
            raise ValueError(f"{name} must be <= {high:,} ({reason}), got {value!r}.")
        return value

    return check


def in_range(low: float, high: float, reason: str) -> Check:
    """The check ``low <= value <= high``: a declared maximum, with its reason, on a size."""
    lower, upper = at_least(low), at_most(high, reason)

    def check(value, name):
        return upper(lower(value, name), name)

    return check


# ------------------------------------------------------------------ maxima of the sizes
# Every option that sizes memory or time has a maximum, declared here once with its reason, so that no
# option and no checkpoint can ask for terabytes or for years: each lies far above what the book uses
# (hidden 256, embedding 64, N 100, batch 128, 96 elements, 80 epochs) and far below what fails.
MAX_WIDTH = 4096  # hidden, embedding and key sizes: a 4096-wide GRU holds 100 M weights (400 MB)
WIDTH_REASON = "a layer's width; wider layers hold more weights than fit in memory"
MAX_STEPS = 1000  # N, at training and evaluation: every step keeps its activations for the backward pass
STEPS_REASON = "the most pondering steps; each step keeps its activations in memory"
MAX_BATCH = 65536  # samples per batch: activations grow with batch x steps x width
BATCH_REASON = "samples per batch; activations grow with batch x steps x width"
MAX_ELEMENTS = (
    4096  # parity's vector length, pointer chasing's slots: inputs and the first layer grow with it
)
ELEMENTS_REASON = "the input's length; the inputs and the first layer grow with it"
MAX_EPOCHS = 10000  # training time
EPOCHS_REASON = "training time"
MAX_PARAMETERS = 200_000_000  # a model's weights: 800 MB in float32, 25 times the largest model of the book
PARAMETERS_REASON = "the model's weights: 800 MB in float32"


def above(low: float) -> Check:
    """The check ``value > low``."""

    def check(value, name):
        if not value > low:
            raise ValueError(f"{name} must be > {low}, got {value!r}.")
        return value

    return check


def between(low: float, high: float, closed: str = "neither") -> Check:
    """The check ``low < value < high``; ``closed``: ``"left"``, ``"right"``, ``"both"`` or ``"neither"``
    says which ends are allowed."""
    left, right = closed in ("left", "both"), closed in ("right", "both")
    interval = f"{'[' if left else '('}{low}, {high}{']' if right else ')'}"

    def check(value, name):
        if not ((low <= value) if left else (low < value)) or not (
            (value <= high) if right else (value < high)
        ):
            raise ValueError(f"{name} must lie in {interval}, got {value!r}.")
        return value

    return check


# ------------------------------------------------------------------ PonderNet's and ACT's ranges
def check_lambda_p(lambda_p: float, name: str = "lambda_p") -> float:
    """Return ``lambda_p`` as a float or raise a ``ValueError`` that says what is allowed.

    ``λ_p = 1`` is refused: that prior puts all its mass on step 1, ``p_G(n) = 0`` for ``n > 1``, and
    ``KL(p ‖ p_G)`` is infinite for every halting distribution with any mass beyond step 1 (every one a
    sigmoid can produce). A network that always stops after one step is the fixed-step baseline
    (``method="fixed"``, ``max_steps=1``).
    """
    lambda_p = float(lambda_p)
    if not 0.0 < lambda_p < 1.0:
        raise ValueError(
            f"{name} must lie strictly between 0 and 1, got {lambda_p}. It is the prior's per-step "
            "halting probability: the geometric prior has mean 1/lambda_p steps (0.2 gives 5 steps); "
            "for exactly one step use the fixed-step method (--method fixed --max-steps 1)."
        )
    return lambda_p


def check_max_steps(max_steps: int, name: str = "max_steps") -> int:
    """Return ``max_steps`` as an int or raise a ``ValueError`` that says what is allowed."""
    if (
        isinstance(max_steps, bool)
        or not isinstance(max_steps, numbers.Real)
        or not float(max_steps).is_integer()
        or max_steps < 1
    ):
        raise ValueError(f"{name} must be an integer >= 1, got {max_steps!r}.")
    if max_steps > MAX_STEPS:
        raise ValueError(f"{name} must be <= {MAX_STEPS:,} ({STEPS_REASON}), got {max_steps!r}.")
    return int(max_steps)


def check_beta(beta: float, name: str = "beta") -> float:
    """Return ``beta`` as a float or raise a ``ValueError``: the KL weight must be finite and >= 0."""
    if not 0 <= float(beta) < math.inf:
        raise ValueError(
            f"{name} must be >= 0 and finite, got {beta}: it weighs the KL regulariser (0 turns it off)."
        )
    return float(beta)


KL_DIRECTIONS = ("p_prior", "prior_p")  # KL(p ‖ p_G) (the paper's), KL(p_G ‖ p)


def check_kl_direction(direction: str, name: str = "kl_direction") -> str:
    """Return the KL direction's name, or raise a ``ValueError`` that names the two."""
    if direction not in KL_DIRECTIONS:
        raise ValueError(
            f"{name} must be 'p_prior' (the paper's KL(p || p_G)) or 'prior_p' (KL(p_G || p)), "
            f"got {direction!r}."
        )
    return direction


def check_epsilon(epsilon: float, name: str = "epsilon") -> float:
    """ε must lie in (0, 1): ACT's halting threshold is 1 − ε."""
    epsilon = float(epsilon)
    if not 0.0 < epsilon < 1.0:
        raise ValueError(
            f"{name} must lie strictly between 0 and 1 (ACT halts at Σh ≥ 1 − ε), got {epsilon}."
        )
    return epsilon


def check_tau(tau: float, name: str = "tau") -> float:
    """τ must be finite and ≥ 0: it weighs the ponder cost."""
    if not 0 <= float(tau) < math.inf:
        raise ValueError(
            f"{name} must be >= 0 and finite, got {tau}: it weighs ACT's ponder cost (0 turns it off)."
        )
    return float(tau)
