"""A run's configuration, the folder it is saved in, and the check that a saved run fits a request.

:class:`TrainConfig` holds everything a run depends on. A field left at ``None`` takes the experiment's
default (:mod:`~.registry`), else the global one below, so
``TrainConfig(experiment="parity-extrapolation", method="act")`` is the book's ACT run on parity.

Its *identity* (:meth:`TrainConfig.identity`) is the part that changes the trained model: not where the
data lives, which device or logger is used, or whether the step is compiled. The run folder
``<output_dir>/<experiment>/<variant>/seed<k>`` is named after the identity (the method, its key
options, and every other field that differs from the experiment's defaults), so two configurations
never share a folder, and a saved run is reused only when its recorded identity equals the requested
one (:func:`check_same_identity`).

Every field is declared once (:func:`setting`: type, default, help, choices, range check); the halting
method's and the step function's options are their constructors' keyword parameters
(:func:`~.options.constructor_options`), held in ``method_options`` and ``step_options``. The command
line is built from these declarations. This module imports no PyTorch (checking a strategy other than ``auto``
looks it up in Lightning, and more CPU devices than cores under ``auto`` asks PyTorch for a GPU).
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from dataclasses import dataclass, field, fields
from pathlib import Path

from ..untrusted import shown
from .files import plain
from .options import (
    BATCH_REASON,
    EPOCHS_REASON,
    MAX_BATCH,
    MAX_EPOCHS,
    MAX_TRAIN_SUBSET,
    TRAIN_SUBSET_REASON,
    Option,
    Parameter,
    above,
    all_method_options,
    at_least,
    between,
    in_range,
    method_options,
    step_options,
)
from .registry import EXPERIMENTS, METHODS, NAMED_IN_FOLDER, STEPS, UNUSED_WHEN, get_experiment

PRETRAINED_DIR = Path(__file__).parents[1] / "pretrained"  # the shipped runs
WEIGHTS = "model.safetensors"  # a run's model file: its weights, and its hyperparameters in the header


def shipped_runs() -> dict[str, dict[str, list[int]]]:
    """The shipped runs with weights, without importing PyTorch: ``{experiment: {variant: [seeds]}}``."""
    runs: dict[str, dict[str, list[int]]] = {}
    for model in sorted(PRETRAINED_DIR.glob(f"*/*/seed*/{WEIGHTS}")):
        seed = model.parent.name.removeprefix("seed")
        if seed.isascii() and seed.isdigit() and seed == str(int(seed)):  # not "seed²", "seed01"
            variants = runs.setdefault(model.parent.parent.parent.name, {})
            variants.setdefault(model.parent.parent.name, []).append(int(seed))
    return {e: runs[e] for e in EXPERIMENTS if e in runs}


def listed_shipped(experiment: str, method: str, most: int = 8) -> str:
    """The shipped runs of ``experiment`` by ``method`` with their seeds, in one line (the first
    ``most``; "none" where there is none): what a request for a run that is not shipped is told."""
    mine = {v: seeds for v, seeds in shipped_runs().get(experiment, {}).items() if v.split("-")[0] == method}
    listed = "; ".join(f"{v} (seeds {', '.join(map(str, seeds))})" for v, seeds in list(mine.items())[:most])
    return (listed or "none") + (f" and {len(mine) - most} more (see `list`)" if len(mine) > most else "")


LOGGERS = ("csv", "tensorboard", "wandb")
PRECISIONS = ("32-true", "32", "bf16-mixed", "16-mixed", "64-true", "bf16-true", "16-true")
ACCELERATORS = ("auto", "cpu", "gpu", "cuda", "mps", "tpu")  # Lightning's names


class ConfigMismatchError(ValueError):
    """A saved run or table was made with another configuration than the one requested."""


def setting(kind: type, default, help: str, **declaration):
    """A field of :class:`TrainConfig` declared once: an :class:`~.options.Option`
    (type, global default, help, choices, range check, ...) in the field's metadata. The field itself
    defaults to ``None``: the experiment's default, else ``default``."""
    option = Option(kind, default, help, **declaration)
    if kind is dict:
        return field(default_factory=dict, metadata={"option": option})
    return field(default=None, metadata={"option": option})


def check_step(step: str, name: str = "step") -> str:
    """A registered step function (:data:`~.registry.STEPS`) or an import path
    ``module:Class`` (imported only when the run is built)."""
    module, _, qualname = step.partition(":")
    if step not in STEPS and not (module and qualname):
        raise ValueError(
            f"{name} must be one of {', '.join(STEPS)} or an import path module:Class, got {step!r}."
        )
    return step


def check_devices(devices, name: str = "devices"):
    """``auto``, a count >= 1, or a list of device indices such as ``0,1``; a count as an ``int`` and a
    list as a list of ints."""
    if isinstance(devices, str) and devices.strip() != "auto":
        text = devices.strip()
        if text.lstrip("-").isdigit():
            devices = int(text)
        elif "," in text and all(part.strip().isdigit() for part in text.split(",") if part.strip()):
            devices = [int(part) for part in text.split(",") if part.strip()]
    if devices == "auto" or (isinstance(devices, int) and not isinstance(devices, bool) and devices >= 1):
        return devices
    if isinstance(devices, (list, tuple)) and devices and all(isinstance(d, int) and d >= 0 for d in devices):
        return list(devices)
    raise ValueError(f"{name} must be auto, a count >= 1 or a list of indices such as 0,1, got {devices!r}.")


def check_strategy(strategy: str, name: str = "strategy") -> str:
    """``auto`` or a strategy in Lightning's registry (``ddp``, ``ddp_spawn``, ...); only a strategy other
    than ``auto`` imports Lightning to look it up."""
    if strategy == "auto":
        return strategy
    from lightning.pytorch.strategies import StrategyRegistry

    known = StrategyRegistry.available_strategies()
    if strategy not in known:
        raise ValueError(
            f"{name} must be auto or one of Lightning's strategies ({', '.join(known)}), got {strategy!r}."
        )
    if "spawn" in strategy or strategy.startswith("ddp_notebook") or strategy.startswith("ddp_fork"):
        raise ValueError(
            f"{name} {strategy} trains in worker processes whose history a run's folder cannot record: "
            "use ddp (which starts its processes as scripts) or auto."
        )
    return strategy


def _on_the_cpu(accelerator: str) -> bool:
    """Whether Lightning's ``accelerator`` runs on the CPU (``auto`` without a GPU: imports PyTorch)."""
    if accelerator == "cpu":
        return True
    if accelerator != "auto":
        return False
    import torch

    return not (torch.cuda.is_available() or torch.backends.mps.is_available())


def check_cpu_devices(accelerator: str, devices) -> None:
    """Refuse more CPU processes than the machine has cores: each device on the CPU is a process."""
    cores = os.cpu_count() or 1
    if isinstance(devices, list) and _on_the_cpu(accelerator):
        raise ValueError(
            f"devices={devices} lists device indices, but on the CPU devices is a count: pass --devices 1."
        )
    if isinstance(devices, int) and devices > cores and _on_the_cpu(accelerator):
        raise ValueError(
            f"devices={devices} on the CPU starts {devices} processes, but this machine has {cores} cores: "
            f"pass --devices {cores} or fewer (on the CPU one process already uses every core)."
        )


# ------------------------------------------------------------------ the configuration
# the plateau schedule's settings: no part of a run whose rate is constant (its identity, its module
# and the comparison of its model file leave them out)
PLATEAU_SETTINGS = ("lr_patience", "lr_factor")


@dataclass
class TrainConfig:
    """Everything a run depends on (see the module's docstring): what is trained, how, and where (device,
    folders, logger: not part of the identity). ``method_options`` holds the halting method's keywords
    (``{"lambda_p": 0.1}``), ``step_options`` the step function's; one left out takes the experiment's
    default, else the constructor's."""

    experiment: str = setting(
        str,
        "mnist-interpolation",
        "the experiment: " + "; ".join(f"{e.name} ({e.description})" for e in EXPERIMENTS.values()),
        choices=tuple(EXPERIMENTS),
    )
    method: str = setting(
        str,
        "pondernet",
        "halting method: pondernet, act (Adaptive Computation Time), fixed (always --max-steps steps), hrm or trm (their halting heads)",
        choices=lambda: tuple(METHODS),
    )
    seed: int = setting(
        int,
        0,
        "random seed of the run (weights, batches, rotations, dropout)",
        check=in_range(0, 2**32 - 1, "the seeds of NumPy and Lightning are 32-bit"),
    )
    step: str | None = setting(
        str,
        None,
        f"step function: {', '.join(STEPS)}, or the import path module:Class of one, built as "
        "Class(n_classes=..., **step options) [default: the experiment's]",
        check=check_step,
    )
    step_options: dict = setting(
        dict,
        None,
        "an option of the step function as KEY=VALUE, e.g. hidden_size=32 (repeatable); "
        + "; ".join(f"{step}: {', '.join(step_options(step))}" for step in STEPS),
    )
    epochs: int | None = setting(
        int,
        20,
        "most training epochs (parity: an epoch is 1,000 batches)",
        check=in_range(1, MAX_EPOCHS, EPOCHS_REASON),
    )
    batch_size: int | None = setting(int, 128, "batch size", check=in_range(1, MAX_BATCH, BATCH_REASON))
    lr: float | None = setting(float, 1e-3, "Adam learning rate", check=above(0))
    grad_clip: float | None = setting(float, 0.5, "gradient-norm clipping, 0 for none", check=at_least(0))
    method_options: dict = setting(
        dict,
        None,
        "the halting method's options, its constructor's keywords (max_steps, lambda_p, tau, ...); on the "
        "command line each is a flag of its own",
    )
    lr_schedule: str | None = setting(
        str, "plateau", "plateau (ReduceLROnPlateau on val/acc) or constant", choices=("plateau", "constant")
    )
    lr_patience: int | None = setting(
        int, 2, "ReduceLROnPlateau: epochs without improvement before the rate is lowered", check=at_least(0)
    )
    lr_factor: float | None = setting(
        float, 0.5, "ReduceLROnPlateau: factor by which the rate is lowered, in (0, 1)", check=between(0, 1)
    )
    early_stopping_patience: int | None = setting(
        int,
        None,
        "stop after this many epochs without a better val/acc, 0 for never",
        check=at_least(0),
        optional=True,
    )
    stop_at_val_acc: float | None = setting(
        float,
        None,
        "stop once val/acc reaches this value, 0 for never",
        check=between(0, 1, "both"),
        optional=True,
    )
    select_by: str = setting(
        str,
        "val/acc",
        "the epoch whose weights a run keeps: the best val/acc (the first of equals), the lowest val/loss "
        "(where accuracy saturates before halting settles), or the last (epoch: a rule that reads no "
        "metric, for heads whose loss is not comparable across epochs)",
        choices=("val/acc", "val/loss", "epoch"),
    )
    precision: str = setting(str, "32-true", "Lightning precision", choices=PRECISIONS, reproduce=True)
    train_subset: int | None = setting(
        int,
        None,
        "training samples per epoch (MNIST: the first N images; quick runs only, never shipped)",
        check=in_range(1, MAX_TRAIN_SUBSET, TRAIN_SUBSET_REASON),
        optional=True,
    )
    quick: bool = setting(
        bool,
        False,
        "the experiment's tiny quick settings: try a command in a minute; learns nothing worth keeping, never shipped",
    )
    compile: bool | None = setting(
        bool,
        False,
        "torch.compile the unroll and loss of training, validation and test (off in quick mode; a CUDA "
        "graph replays the compiled training step)",
        identity=False,
        reproduce=True,
    )
    cuda_graph: bool | None = setting(
        bool,
        None,
        "replay each training step from one CUDA graph (default: wherever it can: one CUDA device, a "
        "precision other than 16-mixed)",
        optional=True,
        identity=False,
        reproduce=True,
    )
    accelerator: str = setting(
        str, "auto", "Lightning accelerator", choices=ACCELERATORS, identity=False, reproduce=True
    )
    devices: str | int = setting(
        object,
        "auto",
        "Lightning devices: auto, a count, or a list such as 0,1 (on the CPU at most one per core)",
        check=check_devices,
        identity=False,
        reproduce=True,
    )
    strategy: str = setting(
        str,
        "auto",
        "Lightning strategy: auto, ddp, ... (not the spawning ones: ddp_spawn, ddp_fork, ddp_notebook)",
        check=check_strategy,
        identity=False,
        reproduce=True,
    )
    data_dir: str | None = setting(
        str,
        None,
        "folder holding MNIST/raw [default: $PONDERNET_DATA_DIR, else shared/data beside the clone, "
        "else ~/.cache/pondernet_tutorial]",
        optional=True,
        identity=False,
        reproduce=True,
    )
    output_dir: str = setting(
        str, "runs", "folder for runs: <output_dir>/<experiment>/<variant>/seed<k>/", identity=False
    )
    logger: str = setting(
        str, "csv", "csv, tensorboard or wandb (offline)", choices=LOGGERS, identity=False, reproduce=True
    )
    progress_bar: bool = setting(bool, True, "show Lightning's progress bar", identity=False)

    def __post_init__(self):
        for name in ("experiment", "method"):  # the others' defaults depend on these two
            value = getattr(self, name)
            setattr(self, name, option(name).validate(name, option(name).default if value is None else value))
        experiment = get_experiment(self.experiment)
        for f in fields(self):
            if getattr(self, f.name) is None and f.name in FIELD_OPTIONS:
                setattr(
                    self, f.name, default_value(f.name, self.experiment, self.method, self.quick or False)
                )
        given = dict(self.method_options or {})
        for name, owners in other_methods_options(self.method, given).items():
            raise ValueError(f"{name} is an option of {' and '.join(owners)}, not of {self.method}.")
        unknown = sorted(set(given) - set(method_options(self.method)))
        if unknown:
            raise ValueError(
                f"{self.method} takes no option {', '.join(unknown)}; its options: "
                f"{', '.join(method_options(self.method))}."
            )
        self.method_options = {
            name: default_value(name, self.experiment, self.method, self.quick or False)
            if given.get(name) is None
            else given[name]
            for name in method_options(self.method)
        }
        self.step = self.step or experiment.step
        # the experiment's step options belong to its default step function; another one starts from its own defaults
        defaults = experiment.step_options if self.step == experiment.step else {}
        self.step_options = {**defaults, **(self.step_options or {})}
        self.check()

    @classmethod
    def from_options(cls, **values) -> TrainConfig:
        """A configuration from keywords in which the method's options stand on their own
        (``from_options(method="act", tau=0.01)``), as run folders, ``metadata.json`` and the command
        line name them. Options that only other methods take are left out (a recorded configuration
        holds every method's); a name that no method takes is refused."""
        names = {f.name for f in fields(cls)}
        method = values.get("method") or FIELD_OPTIONS["method"].default
        options = dict(values.pop("method_options", None) or {})
        others = other_methods_options(method, values)
        for name in [name for name in values if name not in names]:
            value = values.pop(name)
            if name not in others:
                options[name] = value
        return cls(**values, method_options=options)

    def check(self) -> None:
        """Check every field with its declaration and normalise it (``devices="2"`` becomes ``2``);
        raise a ``ValueError`` naming the first field that is out of range. The method's and the step
        function's options are checked for their types here, and for their ranges by their
        constructors (:func:`~.build.check_model`)."""
        for f in fields(self):
            if f.name in FIELD_OPTIONS:
                setattr(self, f.name, FIELD_OPTIONS[f.name].validate(f.name, getattr(self, f.name)))
        for name, declared in method_options(self.method).items():
            self.method_options[name] = declared.validate(name, self.method_options[name])
        self.step_options = check_step_options(self.step, self.step_options, self.experiment)
        check_cpu_devices(self.accelerator, self.devices)

    @property
    def max_steps(self) -> int:
        """N, the method's most steps (fixed: its number of steps)."""
        return self.method_options["max_steps"]

    # ------------------------------------------------------------------ what the run is
    def method_kwargs(self) -> dict:
        """The keyword arguments of the halting method (besides the step function); an option newer
        than the shipped runs is left out at its default, so that their saved hyperparameters stay the
        model's, and so is an option that the others leave without effect (:data:`~.registry.UNUSED_WHEN`)."""
        declared, options = method_options(self.method), self.method_options
        unused = [
            name
            for name, where in UNUSED_WHEN.get(self.method, {}).items()
            if all(options.get(key) == value for key, value in where.items())
        ]
        return {
            name: value
            for name, value in options.items()
            if name not in unused and not (name in OMITTED_AT_DEFAULT and value == declared[name].default)
        }

    def options(self) -> dict:
        """Every field, with the method's options standing on their own in its place (as
        ``metadata.json`` records a run, and :meth:`from_options` reads it)."""
        values = {}
        for f in fields(self):
            value = getattr(self, f.name)
            if f.name == "method_options":
                values.update(value)
            else:
                values[f.name] = dict(value) if isinstance(value, dict) else value
        return values

    def identity(self) -> dict:
        """The options that change the trained model, in the order run folders name them."""
        kept, passed = {}, self.method_kwargs()
        for name, value in self.options().items():
            if name in self.method_options:
                if name in passed:
                    kept[name] = value
                continue
            declared = FIELD_OPTIONS[name]
            if not declared.identity or (self.lr_schedule != "plateau" and name in PLATEAU_SETTINGS):
                continue
            if name in OMITTED_AT_DEFAULT and value == declared.default:
                continue  # an option newer than the shipped runs, at its default: as if absent
            kept[name] = value
        return kept

    @property
    def variant(self) -> str:
        """The run's name within its experiment, e.g. ``pondernet-lambda_p=0.2-beta=0.01``: the method,
        its key options, then every other field that differs from the experiment's defaults."""
        mine = self.identity()
        defaults = TrainConfig(experiment=self.experiment, method=self.method, quick=self.quick).identity()
        # another step function's options are compared with that step function's defaults
        step_defaults = TrainConfig(experiment=self.experiment, method=self.method, step=self.step)
        defaults["step_options"] = step_defaults.step_options
        named = [name for name in NAMED_IN_FOLDER.get(self.method, ()) if name in mine]
        skip = {"experiment", "method", "seed", "quick", *named}
        # (an option left out of the defaults' identity holds its declared default there)
        different = [
            k for k in mine if k not in skip and mine[k] != defaults.get(k, option(k, self.method).default)
        ]
        parts = [self.method] + [f"{k}={_slug(mine[k])}" for k in named + different]
        if self.quick:
            parts.append("quick")
        return safe_name("-".join(parts))

    @property
    def run_dir(self) -> Path:
        names = [safe_name(self.experiment), self.variant, safe_name(f"seed{self.seed}")]
        return Path(self.output_dir).expanduser().joinpath(*names)  # "~/runs", as check_inside reads it


# The characters a folder name keeps as they are (every shipped run's name is made of them); any other
# character, a path separator included, is written as %XX (its UTF-8 bytes), so no option can add a
# folder level, climb out with "..", or make the name absolute. 255 bytes is the common file-system limit.
SAFE_NAME_CHARACTERS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._=,+-")
MAX_NAME_BYTES = 255


def safe_name(name: str) -> str:
    """``name`` as one safe folder name: characters outside :data:`SAFE_NAME_CHARACTERS` become %XX,
    ``.``/``..``/an empty name are encoded too, and a name longer than :data:`MAX_NAME_BYTES` is cut and
    ends with a hash of the whole (the run's metadata.json still records every option)."""
    encoded = "".join(
        c if c in SAFE_NAME_CHARACTERS else "".join(f"%{b:02X}" for b in c.encode("utf-8", "surrogatepass"))
        for c in str(name)
    )
    if encoded in ("", ".", ".."):
        encoded = "".join(f"%{ord(c):02X}" for c in encoded) or "%00"
    if len(encoded) > MAX_NAME_BYTES:
        digest = hashlib.sha256(encoded.encode("ascii")).hexdigest()[:16]
        encoded = f"{encoded[: MAX_NAME_BYTES - 17]}~{digest}"
    return encoded


def _slug(value) -> str:
    if isinstance(value, dict):
        return "_".join(f"{k}{_slug(v)}" for k, v in sorted(value.items()))
    if isinstance(value, (list, tuple)):
        return "_".join(_slug(v) for v in value)
    if isinstance(value, float):  # short where that names the value exactly, else every digit
        value = value + 0.0  # -0.0 is 0.0 (equal, and so one identity): one folder, "0"
        short = f"{value:g}"
        return short if float(short) == value else repr(value)
    return str(value).lower() if isinstance(value, bool) or value is None else str(value)


def identity_differences(saved: dict, requested: dict) -> list[str]:
    """``"field: saved X, requested Y"`` for the fields on which two identities differ, at most
    :data:`MAX_DIFFERENCES` of them and each value cut short (a saved
    identity that is not a dictionary, from a damaged record, differs in every field)."""
    saved, requested = (plain(v) if isinstance(v, dict) else {} for v in (saved, requested))
    keys = list(dict.fromkeys([*requested, *saved]))
    differing = [k for k in keys if saved.get(k, "(absent)") != requested.get(k, "(absent)")]
    lines = [
        f"{shown(k)}: saved {shown(repr(saved.get(k, '(absent)')))}, "
        f"requested {shown(repr(requested.get(k, '(absent)')))}"
        for k in differing[:MAX_DIFFERENCES]
    ]  # a saved record is untrusted: a few fields, each quoted short, make the line
    if len(differing) > MAX_DIFFERENCES:
        lines.append(f"and {len(differing) - MAX_DIFFERENCES:,} more fields")
    return lines


MAX_DIFFERENCES = 8  # the fields an error line names


def check_same_identity(saved: dict, requested: dict, what: str) -> None:
    """Raise :class:`ConfigMismatchError` listing the fields on which ``saved`` differs from ``requested``."""
    differences = identity_differences(saved, requested)
    if differences:
        raise ConfigMismatchError(
            f"{what} was made with another configuration ({'; '.join(differences)}): retrain it "
            "(--overwrite) or ask for the configuration it was made with."
        )


# ------------------------------------------------------------------ the declarations, by name
FIELD_OPTIONS: dict[str, Option] = {
    f.name: f.metadata["option"] for f in fields(TrainConfig) if "option" in f.metadata
}


# Options added after runs were shipped: left out of a run's identity and of its model's
# hyperparameters while they hold their declared default, so that the recorded ones stay valid.
OMITTED_AT_DEFAULT = ("train_epsilon", "learn_halting", "eval_max_steps", "select_by", "prior")


def other_methods_options(method: str, names) -> dict[str, list[str]]:
    """Those of ``names`` that only other halting methods take (``lambda_p`` for ``act``), each with the
    methods that take it: a request that names them asks for a run that ``method`` cannot be."""
    mine = method_options(method) if method in METHODS else {}
    return {
        name: owners
        for name in names
        if name not in FIELD_OPTIONS and name not in mine
        for owners in [[m for m, declared in all_method_options().items() if name in declared]]
        if owners
    }


def option(name: str, method: str | None = None) -> Option | Parameter:
    """The declaration of a :class:`TrainConfig` field, or of a method's option (``method``'s, by
    default the first method's that takes it)."""
    if name in FIELD_OPTIONS:
        return FIELD_OPTIONS[name]
    for candidate in [method] if method else METHODS:
        if name in method_options(candidate):
            return method_options(candidate)[name]
    raise KeyError(f"{name} is not an option of {'method ' + method if method else 'TrainConfig'}.")


def default_value(name: str, experiment: str, method: str, quick: bool = False):
    """The default of a field or a method's option for an experiment and method: the quick settings
    (in quick mode), else the experiment's defaults (``"method.name"`` for one method's, then
    ``"name"``), else the declaration's (the field's, or the method's constructor's)."""
    spec = get_experiment(experiment)
    if name == "compile":  # compilation takes tens of seconds: not worth it in quick mode
        return not quick and spec.defaults.get("compile", FIELD_OPTIONS["compile"].default)
    if quick and name in spec.quick:
        return spec.quick[name]
    if f"{method}.{name}" in spec.defaults:  # a default for one method only (e.g. "act.halting_bias")
        return spec.defaults[f"{method}.{name}"]
    return spec.defaults.get(name, option(name, method).default)


# The global defaults: the fields', then each method option's as the first method that takes it
# declares it (PonderNet's max_steps, lambda_p and beta; ACT's tau and epsilon).
DEFAULTS = {
    **{
        name: o.default
        for name, o in FIELD_OPTIONS.items()
        if name not in ("experiment", "method", "step", "step_options", "method_options")
    },
    **{
        name: parameter.default
        for options in reversed(all_method_options().values())
        for name, parameter in options.items()
    },
}


def check_step_options(step: str, options: dict, experiment: str) -> dict:
    """The step function's options checked against its constructor (:func:`~.options.step_options`)
    and the experiment's data: an option named like a data option (parity's ``n_elements``) must equal
    it."""
    declared = step_options(step)
    if declared is None:  # a step function given by import path: its constructor checks its options
        return dict(options)
    data = get_experiment(experiment).data_options
    checked = {}
    for key, value in options.items():
        if key not in declared:
            raise ValueError(
                f"unknown step option {key!r} for step function {step}; its options: {', '.join(declared)}."
            )
        checked[key] = declared[key].validate(key, value)
        if key in data and checked[key] != data[key]:
            raise ValueError(
                f"step option {key}={checked[key]!r} does not fit the data of {experiment} ({key}={data[key]!r}): "
                f"leave it out, or choose an experiment whose data has {key}={checked[key]!r}."
            )
    return checked


def check_model_fits(experiment: str, n_classes: int, step_options: dict, what: str) -> None:
    """Refuse a model of another task than ``experiment``: another number of classes, or a step option
    that does not fit the experiment's data (see :func:`check_step_options`)."""
    spec = get_experiment(experiment)
    if n_classes != spec.n_classes:
        raise ValueError(
            f"{what} predicts {n_classes} classes but {experiment} has {spec.n_classes}: it was trained on "
            "another task; evaluate it on an experiment of its own task."
        )
    data = spec.data_options
    for key, value in (step_options or {}).items():
        if key in data and value != data[key]:
            raise ValueError(
                f"{what} was made for {key}={value!r} but the data of {experiment} has {key}={data[key]!r}: "
                "evaluate it on an experiment of its own task."
            )


def _check_can_write_in(folder: Path, what: str) -> None:
    try:  # a temporary file, removed at once: the only test that a root user, a read-only disk or /proc all answer truly
        with tempfile.TemporaryFile(dir=folder):
            pass
    except OSError as error:
        raise ValueError(
            f"{what} cannot be written ({error.strerror or error}): choose a folder you can write to."
        ) from error


def check_not_shipped(path: str | os.PathLike, what: str = "--output-dir") -> None:
    """Refuse the package's shipped runs (:data:`PRETRAINED_DIR`) or anything below them, however the
    path is spelled (relative, with ``..``, through a symbolic link): only ``--ship`` writes there."""
    try:
        resolved = Path(path).expanduser().resolve()
        shipped = PRETRAINED_DIR.resolve()
    except (OSError, RuntimeError) as error:  # a loop of links
        raise ValueError(f"{what} {path} cannot be resolved ({error}): choose another folder.") from None
    if resolved == shipped or shipped in resolved.parents:
        raise ValueError(
            f"{what} {path} is the package's shipped pretrained/ folder, which is read-only: "
            "choose another folder (only reproduce --ship writes there)."
        )


def check_writable_folder(path: str | os.PathLike, what: str = "--output-dir", ship: bool = False) -> None:
    """Refuse a folder that is a file, lies under a file, cannot be written, or (unless ``ship``) is the
    shipped runs' folder or lies below it; nothing is created."""
    if not ship:
        check_not_shipped(path, what)
    path = existing = Path(path).expanduser()
    while not existing.exists() and not existing.is_symlink() and existing != existing.parent:
        existing = existing.parent  # the nearest folder that is there
    if not existing.is_dir():
        where = "is a file" if existing == path else f"lies under the file {existing}"
        raise ValueError(f"{what} {path} {where}, not a folder: choose another folder.")
    _check_can_write_in(existing, f"{what} {path}")


def _same_file(a: Path, b) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:  # one of them is not there
        return False


def check_writable_file(
    path: str | os.PathLike, what: str = "--output", overwrite: bool = False, keep=()
) -> None:
    """Refuse a file name that names a folder, or anything but a regular file (a device such as
    /dev/null, a FIFO: the file is written beside it and renamed onto it, which would replace it), lies
    in the shipped runs' folder, or whose folder is missing or cannot be written; a file that is there
    unless ``overwrite``, and never a run's model file or record, or one of ``keep`` (the files read)."""
    check_not_shipped(path, what)
    path = Path(path).expanduser()
    if path.is_dir():
        raise ValueError(f"{what} {path} is a folder: give a file name, e.g. {path / 'per_sample.csv'}.")
    if os.path.lexists(path) and not (path.is_symlink() or path.is_file()):
        raise ValueError(f"{what} {path} is not a regular file (a device or a FIFO): give a file name.")
    if path.name in (WEIGHTS, "metadata.json") or any(_same_file(path, k) for k in keep):
        raise ValueError(f"{what} {path} is a run's own file: choose another file name.")
    if os.path.lexists(path) and not overwrite:
        raise ValueError(
            f"{what} {path} is there already: pass --overwrite to replace it, or choose another name."
        )
    folder = path.parent
    if not folder.is_dir():
        raise ValueError(f"{what} {path}: the folder {folder} does not exist; create it first.")
    _check_can_write_in(folder, f"{what} {path}")
