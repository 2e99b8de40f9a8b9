"""Options declared once for the command line: type, help, choices and range check, in one :class:`Option`.

An option of a run is declared in one place: a field of
:class:`~pondernet_tutorial.runs.config.TrainConfig` (``setting(...)``), an entry of a halting method in
:data:`METHOD_OPTIONS`, or an entry of a step function in :data:`STEP_OPTIONS`. The command line takes its
flags, help, types and choices from those declarations, and ``TrainConfig.check`` validates with them.

What the taught code declares is not repeated here. A step function's or a halting method's default is
its constructor's (read from its source by :func:`constructor_defaults`, without importing it), and the
domain of an equation's parameter is checked where the equation is taught (λ_p, N, β and τ in
:mod:`~pondernet_tutorial.halting`, the KL direction in :mod:`~pondernet_tutorial.methods.pondernet`): an
option names that check by import path, imported only when a value is checked, so that this module and
``python -m pondernet_tutorial --help`` load no PyTorch. What belongs to the runs is declared here: the
maxima of every size (:data:`MAX_WIDTH`, ...), the help lines, and which options a run folder's name shows
(:data:`NAMED_IN_FOLDER`).

A range check is a function ``check(value, name) -> value`` that returns the value (as a ``float`` or
an ``int``) or raises a ``ValueError`` that names the option, the allowed range and what was given.
"""

from __future__ import annotations

import ast
import functools
import importlib.util
import math
import numbers
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from .registry import METHODS, STEPS, import_path

Check = Callable[[Any, str], Any]


@dataclass(frozen=True)
class Option:
    """One option, declared once.

    Attributes:
        type: ``int``, ``float``, ``str`` or ``bool``; ``dict`` for the step function's options, ``object``
            for a value that only its ``check`` judges (``devices``: a count or a list).
        default: the default (an experiment may override it; ``None``: see ``optional``); a step
            function's or a method's option takes its constructor's (:func:`with_defaults`).
        help: one line for ``--help``.
        choices: the allowed values, if they are a list.
        check: the range check ``(value, name) -> value``, applied after the type is checked, or its
            import path ``"package.module:function"`` (imported when a value is checked).
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
    check: Check | str | None = None
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
            check = import_path(self.check) if isinstance(self.check, str) else self.check
            value = check(value, name)
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
# N's maximum, MAX_STEPS, is declared where N is taught (pondernet_tutorial.halting): see check_steps.
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


# ------------------------------------------------------------------ N, with its maximum
def check_steps(value: int, name: str = "max_steps") -> int:
    """N: a whole number from 1 to its maximum, checked where N and its maximum are taught
    (:func:`pondernet_tutorial.halting.check_max_steps`, ``MAX_STEPS``), imported only when a value is
    checked."""
    return import_path("pondernet_tutorial.halting:check_max_steps")(value, name)


# ------------------------------------------------------------------ defaults from the constructors
REQUIRED = object()  # a constructor's parameter without a default


@functools.cache
def module_source(module: str) -> ast.Module:
    """The parsed source of ``module``, found by :func:`importlib.util.find_spec` and not imported."""
    spec = importlib.util.find_spec(module)
    if spec is None or not spec.origin:
        raise ValueError(f"cannot find the module {module!r}.")
    return ast.parse(Path(spec.origin).read_text(encoding="utf-8"))


def literal(path: str) -> Any:
    """The value of the literal assigned at the top level of a module to ``path``'s name
    (``"package.module:NAME"``), read from its source without importing it."""
    module, _, name = path.partition(":")
    for node in module_source(module).body:
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == name for t in node.targets
        ):
            return ast.literal_eval(node.value)
    raise ValueError(f"{path!r}: no literal assigned to {name} at the top level of {module}.")


@functools.cache
def constructor_parameters(path: str) -> dict[str, Any]:
    """The keyword parameters of the constructor of the class at ``path`` (``"package.module:Class"``),
    each with its default (:data:`REQUIRED` where it has none), read from the module's source with
    :mod:`ast`, without importing it (the module imports PyTorch). A class without an ``__init__`` of its
    own takes its first base's (a base defined in the same module). The defaults must be literals."""
    module, _, name = path.partition(":")
    tree = module_source(module)
    classes = {node.name: node for node in tree.body if isinstance(node, ast.ClassDef)}
    while True:
        if name not in classes:
            raise ValueError(f"{path!r}: no class {name} at the top level of {module}.")
        init = [n for n in classes[name].body if isinstance(n, ast.FunctionDef) and n.name == "__init__"]
        if init:
            break
        bases = [b.id for b in classes[name].bases if isinstance(b, ast.Name)]
        if not bases:
            raise ValueError(f"{path!r}: {name} has no __init__ and no base class in its module.")
        name = bases[0]
    arguments = init[0].args
    positional = arguments.posonlyargs + arguments.args
    defaults = [REQUIRED] * (len(positional) - len(arguments.defaults)) + list(arguments.defaults)
    kw_defaults = [REQUIRED if d is None else d for d in arguments.kw_defaults]
    parameters = {}
    for argument, default in [*zip(positional, defaults), *zip(arguments.kwonlyargs, kw_defaults)]:
        parameters[argument.arg] = default if default is REQUIRED else ast.literal_eval(default)
    parameters.pop("self", None)
    return parameters


def with_defaults(path: str, options: dict[str, Option]) -> dict[str, Option]:
    """``options`` with the defaults of the constructor at ``path`` (``None`` where it has none): each
    default is declared once, in the constructor's signature."""
    parameters = constructor_parameters(path)
    unknown = sorted(set(options) - set(parameters))
    if unknown:
        raise TypeError(
            f"{path} takes no option {', '.join(unknown)}: its parameters are {', '.join(parameters)}."
        )
    return {
        name: replace(option, default=None if parameters[name] is REQUIRED else parameters[name])
        for name, option in options.items()
    }


# ------------------------------------------------------------------ the step functions' options
_HIDDEN_SIZE = Option(
    int,
    help="units of the hidden state and of the layers before the heads",
    check=in_range(1, MAX_WIDTH, WIDTH_REASON),
)
_EMBEDDING_SIZE = Option(int, help="size of the CNN's embedding", check=in_range(1, MAX_WIDTH, WIDTH_REASON))
_DROPOUT = Option(
    float, help="Dropout2d probability in the CNN, in [0, 1)", check=between(0, 1, closed="left")
)
_PARITY = {
    "n_elements": Option(
        int,
        help="length of the input vectors (the experiment's)",
        check=in_range(1, MAX_ELEMENTS, ELEMENTS_REASON),
    ),
    "hidden_size": _HIDDEN_SIZE,
}
# The keyword options of each step function's constructor (besides n_classes), which
# ``--step-option KEY=VALUE`` and TrainConfig check before anything is trained; their defaults are the
# constructor's, or the experiment's step_options for its default step function. An option named like
# one of the experiment's data options (parity's n_elements) must equal it.
STEP_OPTIONS: dict[str, dict[str, Option]] = {
    step: with_defaults(STEPS[step], options)
    for step, options in {
        "mnist_mlp": {"hidden_size": _HIDDEN_SIZE, "embedding_size": _EMBEDDING_SIZE, "dropout": _DROPOUT},
        "mnist_refine": {"hidden_size": _HIDDEN_SIZE, "dropout": _DROPOUT},
        "mnist_cnn": {"embedding_size": _EMBEDDING_SIZE, "dropout": _DROPOUT},
        "parity_gru": _PARITY,
        "parity_rnn": _PARITY,
        "pointer_attention": {
            "n_slots": Option(
                int,
                help="slots per sample (the experiment's)",
                check=in_range(2, MAX_ELEMENTS, ELEMENTS_REASON),
            ),
            "hidden_size": _HIDDEN_SIZE,
            "key_size": Option(
                int,
                help="size of the slots' keys, values and the query",
                check=in_range(1, MAX_WIDTH, WIDTH_REASON),
            ),
            "exit_feature": Option(
                bool,
                help="give every slot the bit 'this slot is an exit'; false: a step must tell from the arrow it read",
            ),
        },
    }.items()
}

# ------------------------------------------------------------------ the halting methods' options
_HALTING_BIAS = Option(
    float,
    help="initial bias of the halting layer (none: PyTorch's initialisation)",
    check=check_finite,
    optional=True,
)
_EVAL_MAX_STEPS = Option(
    int,
    help="the most steps at evaluation and inference (none: max_steps); more than max_steps lets an input use "
    "more steps than any input did in training, as the paper's evaluation without a limit does",
    check=check_steps,
    optional=True,
    omitted_at_default=True,
)
# The options of each method's constructor besides max_steps, keyword by keyword: each becomes a field of
# TrainConfig and a flag of the command line, and two methods may share a name with different defaults
# (--epsilon is then each method's own).
METHOD_OPTIONS: dict[str, dict[str, Option]] = {
    method: with_defaults(METHODS[method], options)
    for method, options in {
        "pondernet": {
            "lambda_p": Option(
                float,
                help="λ_p of the geometric prior, in (0, 1); its mean is 1/λ_p steps",
                check="pondernet_tutorial.halting:check_lambda_p",
            ),
            "beta": Option(
                float,
                help="β, weight of the KL regularisation, >= 0",
                check="pondernet_tutorial.halting:check_weight",
            ),
            "kl_direction": Option(
                str,
                help="p_prior = the paper's KL(p || p_G); prior_p = KL(p_G || p) as in the article's, labml's and "
                "mildlyoverfitted's code",
                choices=literal("pondernet_tutorial.methods.pondernet:KL_DIRECTIONS"),
                check="pondernet_tutorial.methods.pondernet:check_kl_direction",
            ),
            "renormalize_prior": Option(bool, help="renormalise the truncated geometric prior to sum to 1"),
            "halting_bias": _HALTING_BIAS,
            "train_epsilon": Option(
                float,
                help="the paper's rule for N in training: each sample's halting distribution ends at the first "
                "step n with Σ_{j≤n} p_j > 1 − ε (the paper: 0.05; the rest of the mass on that step); none: "
                "all max_steps steps",
                check="pondernet_tutorial.halting:check_epsilon",
                optional=True,
                omitted_at_default=True,
            ),
            "learn_halting": Option(
                bool,
                help="learn λ_n; false freezes λ_n at λ_p (the control: PonderNet's expected loss without "
                "learned halting)",
                omitted_at_default=True,
            ),
            "eval_max_steps": _EVAL_MAX_STEPS,
        },
        "act": {
            "tau": Option(
                float,
                help="τ, weight of the ponder cost, >= 0",
                check="pondernet_tutorial.halting:check_weight",
            ),
            "epsilon": Option(
                float,
                help="ε, a sample halts once its halting units sum to 1 − ε",
                check="pondernet_tutorial.halting:check_epsilon",
            ),
            "halting_bias": _HALTING_BIAS,
            "eval_max_steps": _EVAL_MAX_STEPS,
        },
        "fixed": {
            "eval_max_steps": replace(
                _EVAL_MAX_STEPS,
                help="the steps at evaluation and inference (none: max_steps, the k it was trained with); the "
                "answer is the last one's",
            )
        },
    }.items()
}
# The options each method's run folders always name.
NAMED_IN_FOLDER: dict[str, tuple[str, ...]] = {
    "pondernet": ("lambda_p", "beta"),
    "act": ("tau",),
    "fixed": ("max_steps",),
}
