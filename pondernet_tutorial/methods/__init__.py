"""Halting methods: how a step function decides how many steps to take, and how that is trained.

* :mod:`.base`: the unroll with early exit, ``HaltingRule``, ``PonderOutput``, ``PonderingMethod``;
* :mod:`.pondernet`: PonderNet (sampled halting, KL to a geometric prior);
* :mod:`.act`: Adaptive Computation Time (cumulative halting, ponder cost);
* :mod:`.fixed`: the fixed-step baseline (always ``k`` steps).

A new halting method is a ``PonderingMethod`` subclass in a module of its own here, added to
:data:`METHODS` under the name that configurations, run folders and checkpoints use, and to
:data:`METHOD_OPTIONS` with the options its constructor takes (besides ``max_steps``). Each option is
declared there once (type, default, help, range check): it becomes a field of
:class:`~pondernet_tutorial.runs.config.TrainConfig` and a flag of the command line, and two methods may
share a name with different defaults (``--epsilon`` is then each method's own).
"""

from __future__ import annotations

from ..options import (
    KL_DIRECTIONS,
    Option,
    check_beta,
    check_epsilon,
    check_finite,
    check_kl_direction,
    check_lambda_p,
    check_max_steps,
    check_tau,
)

# Import paths, resolved when used: listing the names imports no PyTorch (fast --help).
METHODS: dict[str, str] = {
    "pondernet": "pondernet_tutorial.methods.pondernet:PonderNet",
    "act": "pondernet_tutorial.methods.act:ACT",
    "fixed": "pondernet_tutorial.methods.fixed:FixedSteps",
}

_HALTING_BIAS = Option(
    float,
    None,
    "initial bias of the halting layer (none: PyTorch's initialisation)",
    check=check_finite,
    optional=True,
)
_EVAL_MAX_STEPS = Option(
    int,
    None,
    "the most steps at evaluation and inference (none: max_steps); more than max_steps lets an input use "
    "more steps than any input did in training, as the paper's evaluation without a limit does",
    check=check_max_steps,
    optional=True,
    omitted_at_default=True,
)
# The options of each method's constructor besides max_steps, keyword by keyword.
METHOD_OPTIONS: dict[str, dict[str, Option]] = {
    "pondernet": {
        "lambda_p": Option(
            float, 0.2, "λ_p of the geometric prior, in (0, 1); its mean is 1/λ_p steps", check=check_lambda_p
        ),
        "beta": Option(float, 0.01, "β, weight of the KL regularisation, >= 0", check=check_beta),
        "kl_direction": Option(
            str,
            "p_prior",
            "p_prior = the paper's KL(p || p_G); prior_p = KL(p_G || p) as in the article's, labml's and "
            "mildlyoverfitted's code",
            choices=KL_DIRECTIONS,
            check=check_kl_direction,
        ),
        "renormalize_prior": Option(bool, False, "renormalise the truncated geometric prior to sum to 1"),
        "halting_bias": _HALTING_BIAS,
        "train_epsilon": Option(
            float,
            None,
            "the paper's rule for N in training: each sample's halting distribution ends at the first step "
            "n with Σ_{j≤n} p_j > 1 − ε (the paper: 0.05; the rest of the mass on that step); none: all "
            "max_steps steps",
            check=check_epsilon,
            optional=True,
            omitted_at_default=True,
        ),
        "learn_halting": Option(
            bool,
            True,
            "learn λ_n; false freezes λ_n at λ_p (the control: PonderNet's expected loss without learned "
            "halting)",
            omitted_at_default=True,
        ),
        "eval_max_steps": _EVAL_MAX_STEPS,
    },
    "act": {
        "tau": Option(float, 1e-3, "τ, weight of the ponder cost, >= 0", check=check_tau),
        "epsilon": Option(
            float, 0.01, "ε, a sample halts once its halting units sum to 1 − ε", check=check_epsilon
        ),
        "halting_bias": _HALTING_BIAS,
        "eval_max_steps": _EVAL_MAX_STEPS,
    },
    "fixed": {
        "eval_max_steps": Option(
            int,
            None,
            "the steps at evaluation and inference (none: max_steps, the k it was trained with); the answer is "
            "the last one's",
            check=check_max_steps,
            optional=True,
            omitted_at_default=True,
        )
    },
}
# The options each method's run folders always name.
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
