"""Step functions: the networks that ponder, one module per task.

* :mod:`.base`: the :class:`~.base.StepFunction` interface ``(x, h_n) -> (ŷ_n, z_n, h_{n+1})``;
* :mod:`.mnist`: the book's CNN + MLP, the refining CNN, the plain CNN;
* :mod:`.parity`: the GRU for the parity task;
* :mod:`.pointer`: one attention lookup per step for the pointer-chasing task.

A new step function is a :class:`~.base.StepFunction` subclass, written in the module of its task (or a
new one here) and added to :data:`STEPS` under the name that configurations and checkpoints use. Its
constructor takes ``n_classes`` and its own options as keywords.
"""

from __future__ import annotations

# Import paths, resolved when used: listing the names imports no PyTorch (fast --help).
STEPS: dict[str, str] = {
    "mnist_mlp": "pondernet_tutorial.steps.mnist:MNISTStep",
    "mnist_refine": "pondernet_tutorial.steps.mnist:MNISTRefineStep",
    "mnist_cnn": "pondernet_tutorial.steps.mnist:MNISTPlainStep",
    "parity_gru": "pondernet_tutorial.steps.parity:ParityStep",
    "pointer_attention": "pondernet_tutorial.steps.pointer:PointerStep",
}


def step_class(name: str):
    """The step function class registered as ``name`` (or at an import path ``module:Class``)."""
    from ..registry import resolve_component

    return resolve_component(name, STEPS, "step function")
