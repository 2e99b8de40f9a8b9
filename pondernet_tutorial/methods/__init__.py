"""Halting methods: how a step function decides how many steps to take, and how that is trained.

* :mod:`.base`: the unroll with early exit, ``HaltingRule``, ``PonderOutput``, ``PonderingMethod``;
* :mod:`.pondernet`: PonderNet (sampled halting, KL to a geometric prior);
* :mod:`.act`: Adaptive Computation Time (cumulative halting, ponder cost);
* :mod:`.fixed`: the fixed-step baseline (always ``k`` steps).

A new halting method is a ``PonderingMethod`` subclass in a module of its own here, added to
:data:`METHODS` under the name that configurations, run folders and checkpoints use, and to
:data:`METHOD_OPTIONS` with the configuration fields it takes.
"""

from __future__ import annotations

# Import paths, resolved when used: listing the names imports no PyTorch (fast --help).
METHODS: dict[str, str] = {
    "pondernet": "pondernet_tutorial.methods.pondernet:PonderNet",
    "act": "pondernet_tutorial.methods.act:ACT",
    "fixed": "pondernet_tutorial.methods.fixed:FixedSteps",
}

# The configuration fields each method takes (besides max_steps), and the ones its run folders name.
METHOD_OPTIONS: dict[str, tuple[str, ...]] = {
    "pondernet": ("lambda_p", "beta", "kl_direction", "renormalize_prior", "halting_bias"),
    "act": ("tau", "epsilon", "halting_bias"),
    "fixed": (),
}
NAMED_IN_FOLDER: dict[str, tuple[str, ...]] = {
    "pondernet": ("lambda_p", "beta"),
    "act": ("tau",),
    "fixed": ("max_steps",),
}


def method_class(name: str):
    """The halting method registered as ``name``."""
    from ..registry import resolve_component

    if name not in METHODS:
        raise ValueError(f"unknown method {name!r}; choose one of {', '.join(METHODS)}.")
    return resolve_component(name, METHODS, "method")
