"""A run's configuration, the folder it is saved in, and the check that a saved run fits a request.

:class:`TrainConfig` holds everything a run depends on. A field left at ``None`` takes the experiment's
default (:mod:`~pondernet_tutorial.registry`), else the global one below, so
``TrainConfig(experiment="parity-extrapolation", method="act")`` is the book's ACT run on parity.

Its *identity* (:meth:`TrainConfig.identity`) is the part that changes the trained model: not where the
data lives, which device or logger is used, or whether the step is compiled. The run folder
``<output_dir>/<experiment>/<variant>/seed<k>`` is named after the identity (the method, its key
options, and every other field that differs from the experiment's defaults), so two configurations
never share a folder, and a saved run is reused only when its recorded identity equals the requested
one (:func:`check_same_identity`). This module imports no PyTorch.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path

from .methods import METHOD_OPTIONS, METHODS, NAMED_IN_FOLDER
from .registry import get_experiment

PRETRAINED_DIR = Path(__file__).parent / "pretrained"  # the shipped runs

# The global defaults: the reference MNIST experiment's.
DEFAULTS = {
    "epochs": 20,
    "batch_size": 128,
    "lr": 1e-3,
    "grad_clip": 0.5,
    "max_steps": 20,
    "lambda_p": 0.2,
    "beta": 0.01,
    "kl_direction": "p_prior",
    "renormalize_prior": False,
    "tau": 1e-3,
    "epsilon": 0.01,
    "halting_bias": None,
    "lr_schedule": "plateau",
    "lr_patience": 2,
    "lr_factor": 0.5,
    "early_stopping_patience": None,
    "stop_at_val_acc": None,
    "train_subset": None,
    "compile": False,
}
LR_SCHEDULES = ("plateau", "constant")
LOGGERS = ("csv", "tensorboard", "wandb")
PRECISIONS = ("32-true", "32", "bf16-mixed", "16-mixed", "64-true", "bf16-true", "16-true")
# Fields that change where or how fast a run trains, not what it learns.
NOT_IDENTITY = (
    "accelerator",
    "devices",
    "strategy",
    "compile",
    "cuda_graph",
    "data_dir",
    "output_dir",
    "logger",
    "progress_bar",
)


class ConfigMismatchError(ValueError):
    """A saved run or table was made with another configuration than the one requested."""


@dataclass
class TrainConfig:
    """Everything a run depends on. ``None`` means: the experiment's default, else the global one.

    Fields are grouped as: what is trained (experiment, method, step function and their options), how
    (optimiser, schedule, stopping), and where (device, folders, logger; not part of the identity).
    """

    experiment: str = "mnist-interpolation"
    method: str = "pondernet"
    seed: int = 0
    step: str | None = None
    step_options: dict = field(default_factory=dict)
    epochs: int | None = None
    batch_size: int | None = None
    lr: float | None = None
    grad_clip: float | None = None
    max_steps: int | None = None
    lambda_p: float | None = None
    beta: float | None = None
    kl_direction: str | None = None
    renormalize_prior: bool | None = None
    tau: float | None = None
    epsilon: float | None = None
    halting_bias: float | None = None
    lr_schedule: str | None = None
    lr_patience: int | None = None
    lr_factor: float | None = None
    early_stopping_patience: int | None = None
    stop_at_val_acc: float | None = None
    precision: str = "32-true"
    train_subset: int | None = None
    quick: bool = False
    compile: bool | None = None
    cuda_graph: bool | None = None
    accelerator: str = "auto"
    devices: str | int = "auto"
    strategy: str = "auto"
    data_dir: str | None = None
    output_dir: str = "runs"
    logger: str = "csv"
    progress_bar: bool = True

    def __post_init__(self):
        experiment = get_experiment(self.experiment)
        if self.method not in METHODS:
            raise ValueError(f"unknown method {self.method!r}; choose one of {', '.join(METHODS)}.")
        quick = experiment.quick if self.quick else {}
        for name, default in DEFAULTS.items():
            if getattr(self, name) is None and name != "compile":
                value = quick.get(name, experiment.defaults.get(name, default))
                setattr(self, name, value)
        if self.compile is None:  # compilation takes tens of seconds: not worth it in quick mode
            self.compile = not self.quick and experiment.defaults.get("compile", DEFAULTS["compile"])
        self.step = self.step or experiment.step
        # the experiment's step options belong to its default step function; another one starts from its own defaults
        defaults = experiment.step_options if self.step == experiment.step else {}
        self.step_options = {**defaults, **(self.step_options or {})}
        self.check()

    def check(self) -> None:
        """Raise a ``ValueError`` naming the first field that is out of range."""

        def positive_int(name):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be an integer >= 1, got {value!r}.")

        for name in ("epochs", "batch_size", "max_steps"):
            positive_int(name)
        if isinstance(self.seed, bool) or not isinstance(self.seed, int) or self.seed < 0:
            raise ValueError(f"seed must be an integer >= 0, got {self.seed!r}.")
        if not self.lr > 0:
            raise ValueError(f"lr must be > 0, got {self.lr}.")
        if not self.grad_clip >= 0:
            raise ValueError(f"grad_clip must be >= 0 (0: no clipping), got {self.grad_clip}.")
        if not 0.0 < self.lambda_p < 1.0:
            raise ValueError(
                f"lambda_p must lie strictly between 0 and 1, got {self.lambda_p} (the prior's mean is "
                "1/lambda_p steps; for exactly one step use --method fixed --max-steps 1)."
            )
        if not self.beta >= 0:
            raise ValueError(f"beta must be >= 0, got {self.beta}.")
        if self.kl_direction in ("forward", "reverse"):  # deprecated names: translated, with a warning
            from .losses import check_kl_direction

            self.kl_direction = check_kl_direction(self.kl_direction)
        if self.kl_direction not in ("p_prior", "prior_p"):
            raise ValueError(
                f"kl_direction must be p_prior (the paper's KL(p || p_G)) or prior_p (KL(p_G || p)), "
                f"got {self.kl_direction!r}."
            )
        if not self.tau >= 0:
            raise ValueError(f"tau must be >= 0, got {self.tau}.")
        if not 0.0 < self.epsilon < 1.0:
            raise ValueError(f"epsilon must lie strictly between 0 and 1, got {self.epsilon}.")
        if self.lr_schedule not in LR_SCHEDULES:
            raise ValueError(
                f"lr_schedule must be one of {', '.join(LR_SCHEDULES)}, got {self.lr_schedule!r}."
            )
        if self.logger not in LOGGERS:
            raise ValueError(f"logger must be one of {', '.join(LOGGERS)}, got {self.logger!r}.")
        if self.precision not in PRECISIONS:
            raise ValueError(f"precision must be one of {', '.join(PRECISIONS)}, got {self.precision!r}.")
        if self.train_subset is not None:
            positive_int("train_subset")
        if self.early_stopping_patience is not None and self.early_stopping_patience < 0:
            raise ValueError(
                f"early_stopping_patience must be >= 0 (0: off), got {self.early_stopping_patience}."
            )
        if self.stop_at_val_acc is not None and not 0.0 <= self.stop_at_val_acc <= 1.0:
            raise ValueError(f"stop_at_val_acc must lie in [0, 1] (0: off), got {self.stop_at_val_acc}.")

    # ------------------------------------------------------------------ what the run is
    def method_options(self) -> dict:
        """The keyword arguments of the halting method (besides the step function)."""
        return {
            "max_steps": self.max_steps,
            **{name: getattr(self, name) for name in METHOD_OPTIONS[self.method]},
        }

    def identity(self) -> dict:
        """The fields that change the trained model, with the method's irrelevant options left out."""
        values = asdict(self)
        unused = {name for options in METHOD_OPTIONS.values() for name in options} - set(
            METHOD_OPTIONS[self.method]
        )
        if self.lr_schedule != "plateau":
            unused |= {"lr_patience", "lr_factor"}
        return {k: v for k, v in values.items() if k not in NOT_IDENTITY and k not in unused}

    @property
    def variant(self) -> str:
        """The run's name within its experiment, e.g. ``pondernet-lambda_p=0.2-beta=0.01``: the method,
        its key options, then every other field that differs from the experiment's defaults."""
        mine = self.identity()
        defaults = TrainConfig(experiment=self.experiment, method=self.method, quick=self.quick).identity()
        # another step function's options are compared with that step function's defaults
        step_defaults = TrainConfig(experiment=self.experiment, method=self.method, step=self.step)
        defaults["step_options"] = step_defaults.step_options
        named = list(NAMED_IN_FOLDER[self.method])
        skip = {"experiment", "method", "seed", "quick", *named}
        different = [k for k in mine if k not in skip and mine[k] != defaults[k]]
        parts = [self.method] + [f"{k}={_slug(mine[k])}" for k in named + different]
        if self.quick:
            parts.append("quick")
        return "-".join(parts)

    @property
    def run_dir(self) -> Path:
        return Path(self.output_dir) / self.experiment / self.variant / f"seed{self.seed}"


def _slug(value) -> str:
    if isinstance(value, dict):
        return "_".join(f"{k}{_slug(v)}" for k, v in sorted(value.items()))
    if isinstance(value, (list, tuple)):
        return "_".join(_slug(v) for v in value)
    if isinstance(value, float):
        return f"{value:g}"
    return str(value).lower() if isinstance(value, bool) or value is None else str(value)


def _plain(value):
    """JSON round trip: tuples become lists, so saved and requested values compare equal."""
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def identity_differences(saved: dict, requested: dict) -> list[str]:
    """``"field: saved X, requested Y"`` for every field on which two identities differ."""
    saved, requested = _plain(saved), _plain(requested)
    keys = list(dict.fromkeys([*requested, *saved]))
    return [
        f"{k}: saved {saved.get(k, '(absent)')!r}, requested {requested.get(k, '(absent)')!r}"
        for k in keys
        if saved.get(k, "(absent)") != requested.get(k, "(absent)")
    ]


def check_same_identity(saved: dict, requested: dict, what: str) -> None:
    """Raise :class:`ConfigMismatchError` listing the fields on which ``saved`` differs from ``requested``."""
    differences = identity_differences(saved, requested)
    if differences:
        raise ConfigMismatchError(
            f"{what} was made with another configuration ({'; '.join(differences)}): retrain it "
            "(--overwrite) or ask for the configuration it was made with."
        )
