"""The options of a run, each declared once.

A halting method's and a step function's options are the keyword parameters of its constructor: the
type (the annotation), the default and the help line (the docstring's ``Args:`` entry) are read from the
constructor's source by :func:`constructor_options`, without importing it (it imports PyTorch, and
``python -m pondernet_tutorial --help`` should not wait for that), and the constructor checks each
value's range when the model is built. Registering a class in :data:`~.registry.METHODS` or
:data:`~.registry.STEPS` is all it takes to put its options on the command line and in
:class:`~.config.TrainConfig`, whose own fields are each declared by an :class:`Option`.
"""

from __future__ import annotations

import ast
import functools
import importlib.util
import math
import numbers
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .registry import METHODS, STEPS, import_path

Check = Callable[[Any, str], Any]  # (value, name) -> value, or a ValueError naming the option and the range
FLOAT32_MAX = 3.4028234663852886e38  # torch.finfo(torch.float32).max


@dataclass(frozen=True)
class Option:
    """One setting of a run (a field of :class:`~.config.TrainConfig`), declared once.

    Attributes:
        type: ``int``, ``float``, ``str`` or ``bool``; ``dict`` for the step function's and the method's
            options, ``object`` for a value that only its ``check`` judges (``devices``: a count or a list).
        default: the default (an experiment may override it; ``None``: see ``optional``).
        help: one line for ``--help``.
        choices: the allowed values, if they are a list (or a function that lists them when asked:
            the registered methods, which a user may add to).
        check: the range check ``(value, name) -> value``, applied after the type is checked.
        optional: ``None`` is a value of its own (e.g. ``halting_bias``: PyTorch's initialisation).
        identity: the option changes the trained model (part of the run's identity and folder name);
            False for where and how fast a run trains (device, folders, logger, compilation).
        reproduce: also an option of ``reproduce``, shared by every run it trains.
    """

    type: type = float
    default: Any = None
    help: str = ""
    choices: tuple | Callable[[], tuple] | None = None
    check: Check | None = None
    optional: bool = False
    identity: bool = True
    reproduce: bool = False

    @property
    def allowed(self) -> tuple | None:
        """The allowed values, if they are a list."""
        return self.choices() if callable(self.choices) else self.choices

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
        if self.allowed is not None and value not in self.allowed:
            raise ValueError(f"{name} must be one of {', '.join(map(str, self.allowed))}, got {value!r}.")
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
        value = float(value)  # NaN, ±inf and what overflows float32, the models' numbers, are refused
        if not math.isfinite(value) or abs(value) > FLOAT32_MAX:
            raise ValueError(f"{name} must be a finite number (at most 3.4e38 in size), got {value}.")
        return value
    if kind is str and not isinstance(value, str):
        raise ValueError(f"{name} must be a string, got {value!r}.")
    if kind is dict and not isinstance(value, dict):
        raise ValueError(f"{name} must be a dictionary, got {value!r}.")
    return value


# ------------------------------------------------------------------ generic range checks
def _check(holds: Callable[[Any], bool], must: str) -> Check:
    """The check that ``holds(value)`` (False for NaN), else ``"<name> must <must>, got <value>."``."""

    def check(value, name):
        if not holds(value):
            raise ValueError(f"{name} must {must}, got {value!r}.")
        return value

    return check


def at_least(low: float) -> Check:
    return _check(lambda value: value >= low, f"be >= {low}")


def above(low: float) -> Check:
    return _check(lambda value: value > low, f"be > {low}")


def at_most(high: float, reason: str) -> Check:
    """``reason`` says why the maximum is there (memory, time)."""
    return _check(lambda value: value <= high, f"be <= {high:,} ({reason})")


def in_range(low: float, high: float, reason: str) -> Check:
    """``low <= value <= high``: a declared maximum, with its reason, on a size."""
    lower, upper = at_least(low), at_most(high, reason)
    return lambda value, name: upper(lower(value, name), name)


def between(low: float, high: float, closed: str = "neither") -> Check:
    """``low < value < high``; ``closed`` (``"left"``, ``"right"``, ``"both"``) admits those ends."""
    left, right = closed in ("left", "both"), closed in ("right", "both")
    return _check(
        lambda value: (low <= value if left else low < value) and (value <= high if right else value < high),
        f"lie in {'[' if left else '('}{low}, {high}{']' if right else ')'}",
    )


# ------------------------------------------------------------------ maxima of the sizes
# Every setting that sizes memory or time has a maximum, declared here once with its reason, so that no
# option and no checkpoint can ask for terabytes or for years: each lies far above what the book uses
# (N 100, batch 128, 80 epochs, 0.4 M weights) and far below what fails. A model's widths are bounded
# by its number of weights, counted on PyTorch's meta device before anything is allocated; N's maximum,
# MAX_STEPS, is declared where N is taught (pondernet_tutorial.halting).
MAX_BATCH = 65536  # samples per batch: activations grow with batch x steps x width
BATCH_REASON = "samples per batch; activations grow with batch x steps x width"
MAX_TRAIN_SUBSET = 2**31 - 1  # samples per epoch: the data loaders index them with 32-bit integers
TRAIN_SUBSET_REASON = "samples per epoch, indexed with 32-bit integers"
MAX_EPOCHS = 10000  # training time
EPOCHS_REASON = "training time"
MAX_PARAMETERS = 200_000_000  # a model's weights: 800 MB in float32, 25 times the largest model of the book
PARAMETERS_REASON = "the model's weights: 800 MB in float32"


# ------------------------------------------------------------------ N, with its maximum
def check_steps(value: int, name: str = "max_steps") -> int:
    """N: a whole number from 1 to its maximum, checked where N and its maximum are taught
    (:func:`pondernet_tutorial.halting.check_max_steps`, ``MAX_STEPS``), imported only when a value is
    checked."""
    return import_path("pondernet_tutorial.halting:check_max_steps")(value, name)


# ------------------------------------------------------------------ the constructors' options
REQUIRED = object()  # a constructor's parameter without a default
KINDS = {"int": int, "float": float, "str": str, "bool": bool, "dict": dict}
# What the run machinery passes itself, not an option: the step function a method wraps, the loss, and
# the number of classes, which is the experiment's.
METHOD_ARGUMENTS = ("step_function", "loss_fn")
STEP_ARGUMENTS = ("n_classes",)


@dataclass(frozen=True)
class Parameter:
    """One keyword parameter of a constructor, as its source declares it.

    Attributes:
        default: its default (:data:`REQUIRED` where it has none).
        type: its annotation, ``int``, ``float``, ``str``, ``bool`` or ``dict``; ``object`` where the
            annotation is none of them (any value; the constructor judges it).
        optional: the annotation admits ``None`` (``float | None``).
        help: its line of the docstring's ``Args:``.
    """

    default: Any
    type: type
    optional: bool
    help: str

    def validate(self, name: str, value: Any) -> Any:
        """As :meth:`Option.validate`, the type only: the range is the constructor's to check."""
        if value is None and (self.optional or self.default is None):
            return None
        return of_type(self.type, value, name)


@functools.cache
def module_source(module: str) -> ast.Module:
    """The parsed source of ``module``, found by :func:`importlib.util.find_spec` and not imported."""
    spec = importlib.util.find_spec(module)
    if spec is None or not spec.origin:
        raise ValueError(f"cannot find the module {module!r}.")
    return ast.parse(Path(spec.origin).read_text(encoding="utf-8"))


def _annotation(node: ast.expr | None) -> tuple[type, bool]:
    """The kind and whether ``None`` is admitted, from an annotation such as ``float | None``."""
    if node is None:
        return object, False
    parts = [part.strip() for part in ast.unparse(node).replace("Optional[", "").rstrip("]").split("|")]
    kinds = [part for part in parts if part != "None"]
    kind = KINDS.get(kinds[0], object) if len(kinds) == 1 else object
    return kind, len(kinds) < len(parts)


def _help_lines(docstring: str | None) -> dict[str, str]:
    """Each parameter's description in a Google-style ``Args:`` section, on one line, without markup."""
    import docstring_parser  # the parser jsonargparse uses for the same purpose

    lines = {}
    for param in docstring_parser.parse(docstring or "").params:
        text = re.sub(r":\w+:`~?\.?([^`]+)`", r"\1", " ".join(param.description.split()))
        lines[param.arg_name] = text.replace("``", "").rstrip(".")
    return lines


@functools.cache
def constructor_options(path: str, skip: tuple[str, ...] = ()) -> dict[str, Parameter]:
    """The keyword parameters of the constructor of the class at ``path`` (``"package.module:Class"``),
    less ``skip``, read from the module's source with :mod:`ast`, without importing it. A class without
    an ``__init__`` of its own takes its first base's (a base defined in the same module); the help
    lines come from the class's docstring, else its ``__init__``'s. The defaults must be literals."""
    module, _, name = path.partition(":")
    classes = {node.name: node for node in module_source(module).body if isinstance(node, ast.ClassDef)}
    docstrings = []
    while True:
        if name not in classes:
            raise ValueError(f"{path!r}: no class {name} at the top level of {module}.")
        docstrings.append(ast.get_docstring(classes[name]))
        init = [n for n in classes[name].body if isinstance(n, ast.FunctionDef) and n.name == "__init__"]
        if init:
            break
        bases = [b.id for b in classes[name].bases if isinstance(b, ast.Name)]
        if not bases:
            raise ValueError(f"{path!r}: {name} has no __init__ and no base class in its module.")
        name = bases[0]
    helps = {}
    for docstring in [ast.get_docstring(init[0]), *reversed(docstrings)]:
        helps.update(_help_lines(docstring))
    arguments = init[0].args
    positional = arguments.posonlyargs + arguments.args
    defaults = [None] * (len(positional) - len(arguments.defaults)) + list(arguments.defaults)
    parameters = {}
    for argument, default in [*zip(positional, defaults), *zip(arguments.kwonlyargs, arguments.kw_defaults)]:
        if argument.arg == "self" or argument.arg in skip:
            continue
        kind, optional = _annotation(argument.annotation)
        value = REQUIRED if default is None else ast.literal_eval(default)
        parameters[argument.arg] = Parameter(value, kind, optional, helps.get(argument.arg, ""))
    return parameters


def method_options(method: str) -> dict[str, Parameter]:
    """The options of the halting method registered as ``method`` (``max_steps``, ``lambda_p``, ...)."""
    if method not in METHODS:
        raise ValueError(f"unknown method {method!r}; choose one of {', '.join(METHODS)}.")
    return constructor_options(METHODS[method], METHOD_ARGUMENTS)


def step_options(step: str) -> dict[str, Parameter] | None:
    """The options of the step function registered as ``step``; ``None`` for an import path (its
    constructor checks what it is given)."""
    return constructor_options(STEPS[step], STEP_ARGUMENTS) if step in STEPS else None


def all_method_options() -> dict[str, dict[str, Parameter]]:
    """Every registered method's options, by method, in the order of :data:`~.registry.METHODS`."""
    return {method: method_options(method) for method in METHODS}


def method_option_names() -> list[str]:
    """Every registered method's options, each once (one flag, one column), in the order of the methods."""
    return list(dict.fromkeys(name for options in all_method_options().values() for name in options))
