"""The module a run trains: the fast module (:mod:`~pondernet_tutorial.fast_path`) over the model that
names describe.

A run folder and a model file describe the model by name (the step function, the method, their
options and the loss), so :class:`RunModule` takes those names as its hyperparameters and builds the
model from the registry; a model file rebuilds it from them. :class:`GraphedRunModule` is the same
with its training step replayed from one CUDA graph.
"""

from __future__ import annotations

from ..fast_path import FastPonderLitModule, GraphedPonderLitModule
from .registry import LOSSES, STEPS, describe_component, method_class, resolve_component


def build_model(
    step,
    n_classes: int,
    method: str = "pondernet",
    step_options=None,
    method_options=None,
    loss_fn="cross_entropy",
):
    """The halting method that names describe: the step function ``step`` (a registered name or an
    import path) with ``step_options``, under ``method`` with ``method_options`` and the loss ``loss_fn``."""
    if isinstance(n_classes, bool) or int(n_classes) != n_classes or n_classes < 2:
        raise ValueError(f"n_classes must be an integer >= 2, got {n_classes!r}.")
    step_function = resolve_component(step, STEPS, "step function")(
        n_classes=int(n_classes), **(step_options or {})
    )
    loss = resolve_component(loss_fn, LOSSES, "loss function")
    try:
        return method_class(method)(step_function, loss_fn=loss, **(method_options or {}))
    except TypeError as error:
        raise ValueError(f"method {method!r} does not take these options: {error}") from error


class RunModule(FastPonderLitModule):
    """The fast module over the model that names describe.

    Args:
        step, n_classes, method, step_options, method_options, loss_fn: the model (:func:`build_model`),
            saved as hyperparameters with the plain module's.
        lr, lr_schedule, lr_patience, lr_factor, eval_seed, grad_clip, compile: the fast module's.
    """

    def __init__(
        self,
        step,
        n_classes: int,
        method: str = "pondernet",
        step_options: dict | None = None,
        method_options: dict | None = None,
        loss_fn="cross_entropy",
        lr: float = 1e-3,
        lr_schedule: str = "plateau",
        lr_patience: int = 2,
        lr_factor: float = 0.5,
        eval_seed: int = 0,
        grad_clip: float = 0.0,
        compile: bool = False,
    ):
        names = {
            "step": describe_component(step, STEPS, "step function"),
            "n_classes": int(n_classes),
            "method": method,
            "step_options": dict(step_options or {}),
            "method_options": dict(method_options or {}),
            "loss_fn": describe_component(loss_fn, LOSSES, "loss function"),
        }
        model = build_model(step, n_classes, method, step_options, method_options, loss_fn)
        super().__init__(model, lr, lr_schedule, lr_patience, lr_factor, eval_seed, grad_clip, compile)
        self.save_hyperparameters(names)  # the model by its names, beside the plain module's settings


class GraphedRunModule(GraphedPonderLitModule, RunModule):
    """:class:`RunModule` with its training step replayed from one CUDA graph
    (:class:`~pondernet_tutorial.fast_path.GraphedPonderLitModule`)."""
