"""What PonderNet and ACT share off the training path: the checks of their parameters, the coins of
PonderNet's halting and its priors.

* the domains of λ_p, N, ε and the weight of a loss term (β, τ), checked where a method is built;
* the coins: ``Bernoulli(λ_n)`` drawn from uniforms, ``u_n < λ_n``, for inference and evaluation;
* the priors, in log space: the paper's geometric ``p_G(n) = λ_p (1 − λ_p)^{n−1}``, truncated at N, and
  LoopLM's uniform ``π_n = 1/N``.

The halting distribution ``p_n`` and PonderNet's loss are in :mod:`~pondernet_tutorial.methods.pondernet`.
"""

from __future__ import annotations

import math
import numbers

import torch
from torch import Tensor


# ------------------------------------------------------------------ the domains of λ_p, N and ε
def _number(value, name: str, domain: str) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise ValueError(f"{name} must be a number {domain}, got {value!r}.")
    return float(value)


def check_lambda_p(lambda_p: float, name: str = "lambda_p") -> float:
    """Return ``lambda_p`` as a float or raise a ``ValueError`` that says what is allowed.

    ``λ_p = 1`` is refused: that prior puts all its mass on step 1, ``p_G(n) = 0`` for ``n > 1``, and
    ``KL(p ‖ p_G)`` is infinite for every halting distribution with any mass beyond step 1 (every one a
    sigmoid can produce). A network that always stops after one step is the fixed-step baseline
    (``method="fixed"``, ``max_steps=1``).
    """
    try:
        if isinstance(lambda_p, (str, bytes)):  # "0.2" is text, refused as every other number's is
            raise TypeError
        lambda_p = float(lambda_p)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be a number strictly between 0 and 1, got {lambda_p!r}.") from None
    if not 0.0 < lambda_p < 1.0:
        raise ValueError(
            f"{name} must lie strictly between 0 and 1, got {lambda_p}. It is the prior's per-step "
            "halting probability: the geometric prior has mean 1/lambda_p steps (0.2 gives 5 steps); "
            "for exactly one step use FixedSteps(step, max_steps=1) (--method fixed --max-steps 1)."
        )
    return lambda_p


# The most steps N (the command line's maximum too): a model holds a row of its prior per step, and
# training keeps every step's activations for the backward pass. The book uses N <= 100.
MAX_STEPS = 1000


def check_max_steps(max_steps: int, name: str = "max_steps") -> int:
    """Return ``max_steps`` (N) as an int or raise a ``ValueError``: N counts steps, a whole number from 1
    to :data:`MAX_STEPS`."""
    if (
        isinstance(max_steps, bool)
        or not isinstance(max_steps, numbers.Real)
        or not float(max_steps).is_integer()
        or not 1 <= max_steps <= MAX_STEPS
    ):
        raise ValueError(
            f"{name} must be a whole number from 1 to {MAX_STEPS:,} (the most pondering steps; each step "
            f"keeps its activations in memory), got {max_steps!r}."
        )
    return int(max_steps)


def check_epsilon(epsilon: float, name: str = "epsilon") -> float:
    """ε must lie in (0, 1): a sample halts once the mass that halted exceeds 1 − ε (the paper's rule for N
    in training, Σ p > 1 − ε), or reaches it (ACT's rule, Σ η ≥ 1 − ε)."""
    epsilon = _number(epsilon, name, "strictly between 0 and 1")
    if not 0.0 < epsilon < 1.0:
        raise ValueError(
            f"{name} must lie strictly between 0 and 1 (halting at a mass of 1 − ε), got {epsilon}."
        )
    return epsilon


def check_weight(weight: float, name: str) -> float:
    """Return the weight of a loss term (PonderNet's β, ACT's τ) as a float, or raise a ``ValueError``:
    it must be finite and >= 0 (0 turns the term off)."""
    if not 0 <= _number(weight, name, ">= 0 and finite") < math.inf:
        raise ValueError(
            f"{name} must be >= 0 and finite, got {weight}: it weighs a loss term (0 turns it off)."
        )
    return float(weight)


def is_finite_number(value) -> bool:
    """Whether ``value`` is a finite real number (not a bool; numpy's numbers count)."""
    return isinstance(value, numbers.Real) and not isinstance(value, bool) and math.isfinite(value)


def check_bias(bias: float, name: str = "halting_bias") -> float:
    """Return an initial bias as a float, or raise a ``ValueError``: it must be a finite number."""
    if not is_finite_number(bias):
        raise ValueError(f"{name} must be a finite number, got {bias!r}.")
    return float(bias)


def halting_uniforms(batch: int, max_steps: int, generator: torch.Generator | None = None) -> Tensor:
    """The uniform numbers behind PonderNet's halting coins: one per sample and step, ``(B, N)``.

    Sample ``b`` halts at the first step ``n`` with ``u[b, n] < λ_n`` (a Bernoulli(λ_n) coin). The
    numbers are drawn on the CPU, row by row in sample order, so a seeded generator gives the same
    halts on every device and for every way of splitting a data set into batches: drawing ``(10, N)``
    and then ``(5, N)`` gives the same rows as drawing ``(15, N)`` at once.
    """
    if generator is not None and not isinstance(generator, torch.Generator):
        raise TypeError(
            f"generator must be a torch.Generator, such as torch.Generator().manual_seed(0), got "
            f"{type(generator).__name__}."
        )
    return torch.rand(batch, max_steps, generator=generator)


def first_halt(halts: Tensor) -> Tensor:
    """``(B,)`` the first step ``n`` (1..N) whose entry of ``halts`` ``(N, B)`` is True; the last row
    counts as True (every sample halts at step N). Tensor operations only: no loop, no boolean index."""
    halts = torch.cat([halts[:-1], halts.new_ones((1, halts.shape[1]))])
    return halts.to(torch.uint8).argmax(0) + 1  # argmax returns the first of equal maxima


def sample_halting_step(lambda_logits: Tensor, generator: torch.Generator | None = None) -> Tensor:
    """PonderNet's halting step, drawn from a full unroll's ``(N, B)`` λ logits: the first ``n`` whose coin
    ``u_n < λ_n`` says halt. The coins are :func:`halting_uniforms`, as in ``PonderNet.infer``, so both
    take the same steps with the same seed."""
    n_steps, batch = lambda_logits.shape
    uniforms = halting_uniforms(batch, n_steps, generator)  # (B, N), drawn on the CPU
    if lambda_logits.device.type == "cuda":
        uniforms = uniforms.pin_memory()  # copied without making the host wait
    uniforms = uniforms.to(lambda_logits.device, non_blocking=True)
    return first_halt(uniforms.T < torch.sigmoid(lambda_logits.float()))  # u_n < λ_n


def geometric_prior(
    lambda_p: float, max_steps: int, renormalize: bool = False, device=None, dtype=torch.float32
) -> Tensor:
    """Truncated geometric prior ``p_G(n) = λ_p (1 − λ_p)^{n−1}`` for n = 1..max_steps.

    Args:
        lambda_p: per-step halting probability of the prior, in (0, 1); its mean is 1/λ_p steps.
        max_steps: N, where the prior is truncated.
        renormalize: divide by ``1 − (1 − λ_p)^N`` so that the truncated prior sums to 1. The default is
            the geometric pmf itself, as in the article, labml and mildlyoverfitted (the paper does not
            say how it truncates), which misses the mass beyond N.

    Returns:
        ``(N,)`` tensor of prior probabilities.
    """
    return log_geometric_prior(lambda_p, max_steps, renormalize, device, dtype).exp()


def log_geometric_prior(
    lambda_p: float, max_steps: int, renormalize: bool = False, device=None, dtype=torch.float32
) -> Tensor:
    """Log of :func:`geometric_prior`, ``(N,)``; computed in float64 and then cast."""
    lambda_p = check_lambda_p(lambda_p)
    max_steps = check_max_steps(max_steps)
    n = torch.arange(max_steps, dtype=torch.float64)
    log_prior = math.log(lambda_p) + n * math.log1p(-lambda_p)  # log λ_p + (n − 1) log(1 − λ_p)
    if renormalize:
        log_prior = log_prior - math.log1p(-((1.0 - lambda_p) ** max_steps))  # ÷ Σ_{n≤N} p_G(n)
    return log_prior.to(device=device, dtype=dtype)


PRIORS = ("geometric", "uniform")  # p_G(λ_p) (the paper's), 1/N (LoopLM/Ouro's)


def check_prior(prior: str, name: str = "prior") -> str:
    """Return the prior's name, or raise a ``ValueError`` that names the two."""
    if prior not in PRIORS:
        raise ValueError(
            f"{name} must be 'geometric' (the paper's p_G(lambda_p)) or 'uniform' (1/N, as LoopLM), "
            f"got {prior!r}."
        )
    return prior


def log_uniform_prior(max_steps: int, device=None, dtype=torch.float32) -> Tensor:
    """Log of the uniform prior ``π_n = 1/N`` over n = 1..N, ``(N,)``: the prior of LoopLM/Ouro (Zhu et
    al. 2025, arXiv 2510.25741, §3.3), which favours no depth. It has no λ_p."""
    max_steps = check_max_steps(max_steps)
    return torch.full((max_steps,), -math.log(max_steps), device=device, dtype=dtype)  # log π_n = −log N


def constant_lambda_distribution(lambda_p: float, max_steps: int, dtype=torch.float32) -> Tensor:
    """The halting distribution of a network whose ``λ_n = λ_p`` at every step, ``(N,)``.

    This is the geometric prior with the mass it leaves beyond ``N`` put on step ``N`` (where
    ``λ_N = 1``): ``q_n = λ_p (1 − λ_p)^{n−1}`` for ``n < N`` and ``q_N = (1 − λ_p)^{N−1}``. A network
    that ignores its input and keeps ``λ_n`` at ``λ_p`` produces it; the evaluation's distance to the
    prior is measured against the renormalised prior instead (``PonderNet.halting_prior``).
    """
    log_q = log_geometric_prior(lambda_p, max_steps, dtype=torch.float64)
    log_q[-1] = (log_q.shape[0] - 1) * math.log1p(-lambda_p)  # q_N = (1 − λ_p)^{N−1}
    return log_q.exp().to(dtype)
