"""The registry: every experiment of the book, and every step function, halting method and loss, by name.

Everything else (training, evaluation, checkpoints, the command line, the notebooks) looks experiments
up here, so a new experiment is one new :class:`Experiment` in :data:`EXPERIMENTS`.

A step function, a halting method and a task loss are registered by name in :data:`STEPS`,
:data:`METHODS` and :data:`LOSSES`: the names that configurations, run folders and checkpoints use. The
taught code (``steps/``, ``methods/``, ``losses``) knows none of these names.

Components are named by import path (``"package.module:Name"``) and imported only when used, so this
module, the configuration and ``python -m pondernet_tutorial --help`` load without PyTorch. Code that
the user runs may name any component by import path; what a file names (a checkpoint's
hyperparameters) is looked up among the registered components only (:func:`check_registered`).
"""

from __future__ import annotations

import copy
import functools
import importlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Experiment:
    """One experiment: a task, its data, its default step function and its training defaults.

    Attributes:
        name: the name used by the command line, the run folders and :func:`load_pretrained`.
        description: one line for ``--help``.
        datamodule: import path of the ``LightningDataModule``.
        data_options: keyword arguments of the data module (the training rotation, parity's ranges).
        step: name of the default step function in :data:`STEPS`.
        step_options: keyword arguments of the default step function (besides ``n_classes``).
        n_classes: number of classes.
        defaults: training settings that differ from :class:`~pondernet_tutorial.runs.config.TrainConfig`'s;
            ``"method.option"`` sets a default for one method only (``"act.halting_bias"``).
        quick: the settings of quick mode (CI only, never shipped).
        evaluation: keyword arguments that give the data module its evaluation sets.
        group_by: the columns that identify a group in the evaluation tables.
    """

    name: str
    description: str
    datamodule: str
    data_options: dict = field(default_factory=dict)
    step: str = ""
    step_options: dict = field(default_factory=dict)
    n_classes: int = 2
    defaults: dict = field(default_factory=dict)
    quick: dict = field(default_factory=dict)
    evaluation: dict = field(default_factory=dict)
    group_by: tuple = ("set",)

    def __post_init__(self):
        # each experiment owns its dictionaries: those given by a shared template (_MNIST) are copied
        for name in ("data_options", "step_options", "defaults", "quick", "evaluation"):
            object.__setattr__(self, name, copy.deepcopy(getattr(self, name)))

    @property
    def task(self) -> str:
        """The task's name: the part before the first ``-`` (``mnist``, ``parity``)."""
        return self.name.split("-")[0]


_MNIST = dict(
    datamodule="pondernet_tutorial.data.modules:MNISTDataModule",
    step="mnist_mlp",
    step_options={"hidden_size": 64, "embedding_size": 64, "dropout": 0.5},
    n_classes=10,
    defaults={"compile": True},
    quick={"epochs": 1, "train_subset": 2000, "limit": 500},
    evaluation={"sweep": "full"},
    group_by=("set", "mode", "degrees"),
)
PARITY_ELEMENTS = 16  # labml's set-up, as the book's first parity runs use it (labml's own code: 8)
_PARITY_BASE = dict(
    datamodule="pondernet_tutorial.data.modules:ParityDataModule",
    n_classes=2,
    quick={"epochs": 2, "train_subset": 2560, "limit": 50},
    group_by=("set", "k"),
)
# labml's training set-up: gradients clipped at 1, Adam 3e-4 (its GRU of 64 units: parity_experiments).
_LABML_DEFAULTS = {
    "lr": 3e-4,
    "grad_clip": 1.0,
    "epochs": 80,
    "lr_schedule": "constant",
    "early_stopping_patience": 20,
    "stop_at_val_acc": 0.999,
    "compile": True,
}
# The paper's set-up (Banino et al. 2021, §2.3, §3.1, appendix B.1): a simple RNN of 128 tanh units,
# Adam 3e-4, batch 128, N = 20, β = 0.01, λ_p = 0.1 (its figure 2c), N in training by the ε rule with
# ε = 0.05, at evaluation a constant N or none (§2.3; here a budget of PAPER_EVAL_STEPS); ACT as Graves set it up
# (ε = 0.01, halting bias +1). What the papers do not state is this package's choice: no gradient
# clipping, the training budget, the remaining mass on the step where the ε rule stops.
PAPER_EVAL_STEPS = 100
_HALTING = ("pondernet", "act", "trm", "hrm")  # the methods that halt (fixed evaluates its N steps)
_PAPER_DEFAULTS = {
    **_LABML_DEFAULTS,
    "grad_clip": 0.0,
    "lambda_p": 0.1,
    "beta": 0.01,
    "train_epsilon": 0.05,
    **{f"{method}.eval_max_steps": PAPER_EVAL_STEPS for method in _HALTING},
    "act.halting_bias": 1.0,  # Graves (2016, §3): "the initial halting unit bias b_h ... was 1"
}


def parity_experiments(name: str, n_elements: int, setup: str, settings=("interpolation", "extrapolation")):
    """The parity experiments of one set-up (``"labml"`` or ``"paper"``) and vector length: interpolation
    (1 to n non-zero entries in training and test) and extrapolation (trained on 1 to n/2, tested on
    n/2 + 1 to n)."""
    step = {"labml": ("parity_gru", 64, _LABML_DEFAULTS), "paper": ("parity_rnn", 128, _PAPER_DEFAULTS)}
    step_name, hidden, defaults = step[setup]
    who = {"labml": "labml's GRU", "paper": "the paper's tanh RNN"}[setup]
    half = n_elements // 2
    options = {
        "interpolation": (
            f"{n_elements}-element vectors, 1 to {n_elements} non-zeros in training and test",
            {"train_k": (1, n_elements)},
        ),
        "extrapolation": (
            f"{n_elements}-element vectors, trained on 1 to {half} non-zeros, tested on {half + 1} to {n_elements}",
            {"train_k": (1, half), "test_k": (half + 1, n_elements)},
        ),
    }
    return [
        Experiment(
            f"{name}-{setting}",
            f"parity ({who}) of {options[setting][0]}",
            data_options={"n_elements": n_elements, **options[setting][1]},
            step=step_name,
            step_options={"n_elements": n_elements, "hidden_size": hidden},
            defaults=dict(defaults),
            **_PARITY_BASE,
        )
        for setting in settings
    ]


# Pointer chasing: walks through 1 to 8 slots in training, 9 to 16 beyond it, among 32 slots.
POINTER_SLOTS, POINTER_TRAIN_K, POINTER_BEYOND_K = 32, (1, 8), (9, 16)
_POINTER = dict(
    datamodule="pondernet_tutorial.data.modules:PointerDataModule",
    step="pointer_attention",
    step_options={"n_slots": POINTER_SLOTS},  # 64 GRU units, keys of 32: the step function's defaults
    n_classes=POINTER_SLOTS,
    defaults={
        "lr": 1e-3,
        "grad_clip": 1.0,
        "epochs": 5,
        "lr_schedule": "constant",
        "max_steps": 10,
        "lambda_p": 0.5,
        "tau": 1e-2,
        "compile": True,
        # walks beyond the training range need more steps than training's budget
        **{f"{method}.eval_max_steps": 20 for method in _HALTING},
        # accuracy reaches 1.0 within an epoch or two, while halting still settles: keep the epoch of
        # the lowest validation loss, not the first perfect one
        "select_by": "val/loss",
    },
    quick={"epochs": 1, "train_subset": 1280, "limit": 20},
    group_by=("set", "k"),
)

EXPERIMENTS: dict[str, Experiment] = {
    e.name: e
    for e in [
        Experiment(
            "mnist-interpolation",
            "MNIST, trained and tested on unrotated digits",
            data_options={"train_rotation": 0.0},
            **_MNIST,
        ),
        Experiment(
            "mnist-extrapolation",
            "MNIST, trained on digits rotated uniformly within ±22.5°, tested on every angle",
            data_options={"train_rotation": 22.5},
            **_MNIST,
        ),
        *parity_experiments("parity", PARITY_ELEMENTS, "labml"),
        *parity_experiments("parity-paper16", 16, "paper"),
        *parity_experiments("parity-paper32", 32, "paper"),
        # the paper's sizes (for a GPU): 64 elements for interpolation, 96 for extrapolation
        *parity_experiments("parity-paper64", 64, "paper", ("interpolation",)),
        *parity_experiments("parity-paper96", 96, "paper", ("extrapolation",)),
        Experiment(
            "pointer-extrapolation",
            f"follow the arrows from slot 0 to the end of its chain among {POINTER_SLOTS} slots: walks "
            f"through {POINTER_TRAIN_K[0]} to {POINTER_TRAIN_K[1]} slots in training and in the set test, "
            f"{POINTER_BEYOND_K[0]} to {POINTER_BEYOND_K[1]} in the set beyond",
            data_options={"n_slots": POINTER_SLOTS, "train_k": POINTER_TRAIN_K, "beyond_k": POINTER_BEYOND_K},
            **_POINTER,
        ),
    ]
}


def get_experiment(name: str) -> Experiment:
    """The experiment registered as ``name``, or a ``ValueError`` that lists the names."""
    if name not in EXPERIMENTS:
        from ..untrusted import shown  # a name from a file may be megabytes long

        raise ValueError(f"unknown experiment {shown(repr(name))}; choose one of {', '.join(EXPERIMENTS)}.")
    return EXPERIMENTS[name]


# ---------------------------------------------------------------------------------------------------
# Components by name: step functions, halting methods, loss functions (import paths, resolved when
# used: listing the names imports no PyTorch).

STEPS: dict[str, str] = {
    "mnist_mlp": "pondernet_tutorial.steps.mnist:MNISTStep",
    "mnist_refine": "pondernet_tutorial.steps.mnist:MNISTRefineStep",
    "mnist_cnn": "pondernet_tutorial.steps.mnist:MNISTPlainStep",
    "parity_gru": "pondernet_tutorial.steps.parity:ParityStep",
    "parity_rnn": "pondernet_tutorial.steps.parity:ParityRNNStep",
    "pointer_attention": "pondernet_tutorial.steps.pointer:PointerStep",
}
METHODS: dict[str, str] = {
    "pondernet": "pondernet_tutorial.methods.pondernet:PonderNet",
    "act": "pondernet_tutorial.methods.act:ACT",
    "fixed": "pondernet_tutorial.methods.fixed:FixedSteps",
    "hrm": "pondernet_tutorial.methods.hrm:HRMHalting",
    "trm": "pondernet_tutorial.methods.trm:TRMHalting",
}
# The options a method's run folders always name (pondernet-lambda_p=0.2-beta=0.01); a method not
# listed here names the options that differ from its defaults, as every method does.
NAMED_IN_FOLDER: dict[str, tuple[str, ...]] = {
    "pondernet": ("lambda_p", "beta"),
    "act": ("tau",),
    "fixed": ("max_steps",),
}
# The options that other options' values leave without effect: a run leaves them out of its identity,
# folder name and model hyperparameters there, so that runs that train alike share a folder. A uniform
# prior has no λ_p: λ_p then sets only the frozen control's λ_n.
UNUSED_WHEN: dict[str, dict[str, dict]] = {
    "pondernet": {"lambda_p": {"prior": "uniform", "learn_halting": True}},
}
LOSSES = {"cross_entropy": "pondernet_tutorial.methods.base:per_sample_cross_entropy"}


def import_path(path: str) -> Any:
    """The object at ``"package.module:Name"`` (``Name`` may be dotted)."""
    module_name, _, qualname = path.partition(":")
    if not module_name or not qualname:
        raise ValueError(f"expected an import path 'package.module:Name', got {path!r}.")
    try:
        obj = importlib.import_module(module_name)
        for part in qualname.split("."):
            obj = getattr(obj, part)
    except (ImportError, AttributeError) as error:
        raise ValueError(f"cannot import {path!r}: {error}") from error
    return obj


def resolve_component(spec, registry: dict[str, str], kind: str) -> Callable:
    """A component from its description: a registered name, an import path, a
    ``{"partial": path, "keywords": {...}}`` dictionary, or the callable itself.

    This imports whatever an import path names: call it only with descriptions from code the user
    runs, or checked with :func:`check_registered` first (what a file names).
    """
    if callable(spec):
        return spec
    if isinstance(spec, dict) and "partial" in spec:
        return functools.partial(
            resolve_component(spec["partial"], registry, kind), **spec.get("keywords", {})
        )
    if isinstance(spec, str):
        if spec in registry:
            return import_path(registry[spec])
        if ":" in spec:
            return import_path(spec)
        raise ValueError(
            f"unknown {kind} {spec!r}; choose one of {', '.join(registry)} or give 'module:Name'."
        )
    raise TypeError(f"a {kind} is a name, an import path or a callable, got {type(spec).__name__}.")


class UnregisteredComponentError(ValueError):
    """A file names a component that is not registered, or gives it options that it does not take."""


def is_plain(value) -> bool:
    """True for JSON-like data: ``None``, booleans, numbers, strings, and lists, tuples and dictionaries
    (with string keys) of them."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return True
    if isinstance(value, (list, tuple)):
        return all(is_plain(v) for v in value)
    if isinstance(value, dict):
        return all(isinstance(k, str) and is_plain(v) for k, v in value.items())
    return False


def keyword_names(obj, skip=()) -> set[str]:
    """The parameters of a class's constructor (or a function) that can be given by keyword, less
    ``skip``; a ``**kwargs`` catch-all adds none."""
    import inspect

    signature = inspect.signature(obj.__init__ if isinstance(obj, type) else obj)
    kinds = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    return {p.name for p in signature.parameters.values() if p.kind in kinds} - {"self", *skip}


def check_registered(spec, registry: dict[str, str], kind: str, options: dict | None = None, skip=()) -> None:
    """Check a component that a *file* names (a checkpoint's hyperparameters), importing nothing but
    registered components: a name in ``registry`` or ``{"partial": <registered name>, "keywords": {...}}``,
    whose options (``options``, the keywords; ``skip``: what the caller passes) are plain data that the
    component declares. Anything else raises :class:`UnregisteredComponentError`."""
    from ..untrusted import shown  # a file's names, quoted short and without escapes

    keywords = {}
    if isinstance(spec, dict) and set(spec) <= {"partial", "keywords"} and "partial" in spec:
        keywords = spec.get("keywords") or {}
        if not isinstance(keywords, dict):
            raise UnregisteredComponentError(
                f"the {kind} {shown(repr(spec))} has keywords that are not a dictionary"
            )
        spec = spec["partial"]
    if not isinstance(spec, str) or spec not in registry:
        raise UnregisteredComponentError(
            f"the {kind} {shown(repr(spec))} is not registered (registered: {', '.join(registry)})"
        )
    component = import_path(registry[spec])
    given = {**keywords, **(options or {})}
    odd = sorted(k for k, v in given.items() if not is_plain(v))
    if odd:
        raise UnregisteredComponentError(
            f"the options {shown(', '.join(map(repr, odd)), 200)} of the {kind} {spec!r} are not plain data "
            f"({type(given[odd[0]]).__name__})"
        )
    unknown = sorted(set(given) - keyword_names(component, skip))
    if unknown:
        raise UnregisteredComponentError(
            f"the {kind} {spec!r} takes no option {shown(', '.join(map(repr, unknown)), 200)}"
        )


def describe_component(obj, registry: dict[str, str], kind: str):
    """The plain-data description of a component that :func:`resolve_component` turns back into it:
    its registered name, its import path, or a partial's path and keywords. Lambdas and local
    functions have none: they can neither be saved in a checkpoint nor sent to other processes."""
    if isinstance(obj, str):
        resolve_component(obj, registry, kind)  # fail early on a bad name
        return obj
    if isinstance(obj, dict) and "partial" in obj:
        return obj
    if isinstance(obj, functools.partial):
        if obj.args:
            raise ValueError(f"a {kind} given as functools.partial must bind keywords only, not positions.")
        return {"partial": describe_component(obj.func, registry, kind), "keywords": dict(obj.keywords)}
    path = f"{getattr(obj, '__module__', '')}:{getattr(obj, '__qualname__', '')}"
    for name, registered in registry.items():
        if registered == path:
            return name
    if "<" in path or path.startswith(":") or path.endswith(":"):
        raise ValueError(
            f"the {kind} {obj!r} cannot be saved by name: use a function or class defined at the top "
            "level of a module (or a functools.partial of one), not a lambda or a local function."
        )
    return path


def method_class(name: str):
    """The halting method registered as ``name``."""
    if name not in METHODS:
        raise ValueError(f"unknown method {name!r}; choose one of {', '.join(METHODS)}.")
    return resolve_component(name, METHODS, "method")
