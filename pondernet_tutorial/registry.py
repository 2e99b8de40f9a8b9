"""The experiment registry: every experiment of the book, by name, in one place.

An :class:`Experiment` names its data module, its default step function, the number of classes, the
data options (MNIST's training rotation, parity's lengths), the training defaults that differ from
:class:`~pondernet_tutorial.config.TrainConfig`'s, its quick (CI) settings and how its evaluation
tables are grouped. Everything else (training, evaluation, checkpoints, the command line, the
notebooks) looks experiments up here, so a new experiment is one new entry in :data:`EXPERIMENTS`.

Components are named by import path (``"package.module:Name"``) and imported only when used, so this
module, the configuration and ``python -m pondernet_tutorial --help`` load without PyTorch.
"""

from __future__ import annotations

import functools
import importlib
from dataclasses import dataclass, field
from typing import Any, Callable

MNIST_DATA = "pondernet_tutorial.data.mnist:MNISTDataModule"
PARITY_DATA = "pondernet_tutorial.data.parity:ParityDataModule"
POINTER_DATA = "pondernet_tutorial.data.pointer:PointerDataModule"


@dataclass(frozen=True)
class Experiment:
    """One experiment: a task, its data, its default step function and its training defaults.

    Attributes:
        name: the name used by the command line, the run folders and :func:`load_pretrained`.
        description: one line for ``--help``.
        datamodule: import path of the ``LightningDataModule``.
        data_options: keyword arguments of the data module (the training rotation, parity's ranges).
        step: name of the default step function in :data:`pondernet_tutorial.steps.STEPS`.
        step_options: keyword arguments of the default step function (besides ``n_classes``).
        n_classes: number of classes.
        defaults: training settings that differ from :class:`~pondernet_tutorial.config.TrainConfig`'s.
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

    @property
    def task(self) -> str:
        """The task's name: the part before the first ``-`` (``mnist``, ``parity``)."""
        return self.name.split("-")[0]


_MNIST = dict(
    datamodule=MNIST_DATA,
    step="mnist_mlp",
    step_options={"hidden_size": 64, "embedding_size": 64, "dropout": 0.5},
    n_classes=10,
    defaults={"compile": True},
    quick={"epochs": 1, "train_subset": 2000, "limit": 500},
    evaluation={"sweep": "full"},
    group_by=("set", "mode", "degrees"),
)
PARITY_ELEMENTS = 16
_PARITY = dict(
    datamodule=PARITY_DATA,
    step="parity_gru",
    step_options={"n_elements": PARITY_ELEMENTS, "hidden_size": 64},
    n_classes=2,
    defaults={
        "lr": 3e-4,
        "grad_clip": 1.0,
        "epochs": 80,
        "lr_schedule": "constant",
        "early_stopping_patience": 20,
        "stop_at_val_acc": 0.999,
        "compile": True,
    },
    quick={"epochs": 2, "train_subset": 2560, "limit": 50},
    group_by=("set", "k"),
)
# Pointer chasing: walks through 1 to 8 slots in training, 9 to 16 beyond it, among 32 slots.
POINTER_SLOTS, POINTER_TRAIN_K, POINTER_BEYOND_K = 32, (1, 8), (9, 16)
_POINTER = dict(
    datamodule=POINTER_DATA,
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
        Experiment(
            "parity-interpolation",
            f"parity of {PARITY_ELEMENTS}-element vectors, 1 to {PARITY_ELEMENTS} non-zeros in training and test",
            data_options={"n_elements": PARITY_ELEMENTS, "train_k": (1, PARITY_ELEMENTS)},
            **_PARITY,
        ),
        Experiment(
            "parity-extrapolation",
            f"parity of {PARITY_ELEMENTS}-element vectors, trained on 1 to {PARITY_ELEMENTS // 2} non-zeros, "
            f"tested on {PARITY_ELEMENTS // 2 + 1} to {PARITY_ELEMENTS}",
            data_options={
                "n_elements": PARITY_ELEMENTS,
                "train_k": (1, PARITY_ELEMENTS // 2),
                "test_k": (PARITY_ELEMENTS // 2 + 1, PARITY_ELEMENTS),
            },
            **_PARITY,
        ),
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
        raise ValueError(f"unknown experiment {name!r}; choose one of {', '.join(EXPERIMENTS)}.")
    return EXPERIMENTS[name]


# ---------------------------------------------------------------------------------------------------
# Components by name: step functions, halting methods, loss functions.

LOSSES = {"cross_entropy": "pondernet_tutorial.losses:per_sample_cross_entropy"}


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
    ``{"partial": path, "keywords": {...}}`` dictionary, or the callable itself."""
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
