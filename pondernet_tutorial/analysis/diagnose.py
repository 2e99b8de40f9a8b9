"""Does a model ponder? A short diagnosis from one full unroll of a PonderNet model, with the verdict
of the book's rules (:mod:`~pondernet_tutorial.analysis.verdicts`)."""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd
import torch
from torch.utils.data import DataLoader, Dataset

from ..checks import check_classes
from ..runs.evaluation import spearman
from .paper_claims import wilson
from .verdicts import FIXED, Rules, halting_verdict

NO_VERDICT = "no verdict without a difficulty"
NOT_LEARNED = "no verdict, the task is not learned"
ONE_INPUT = "no verdict from a single input"


@dataclass
class Diagnosis:
    mean_steps: float  # E[n] = Σ_n n·p_n (ACT and fixed depth: the steps computed), over the batch
    spread: float  # standard deviation over samples of E[n]
    mass_at_n: float  # mean p_N: the share of the halting mass left on the last step
    rho: float | None  # Spearman ρ between E[n] and the difficulty the user supplies
    distribution: list[float]  # mean p_n over the batch, n = 1..N
    prior_mean: float | None  # Σ_n n·p_G(n)/Z, the prior renormalised over 1..N: where the KL term pulls E[n]
    beyond: float | None  # mean of E[n] − difficulty: the steps taken past it, if it counts steps
    accuracy: float | None  # the share of the model's answers (its own halting) that match the targets
    verdict: str  # rule 3 of the book: follows difficulty, in between, fixed depth, wrong direction


def _method(model):
    inner = getattr(model, "model", None)
    return inner if isinstance(inner, torch.nn.Module) else model  # the method inside a LitModule


@torch.no_grad()
def diagnose(
    model, x, difficulty=None, targets=None, show: bool = True, rules: Rules | None = None
) -> Diagnosis:
    """Diagnose whether ``model`` (a PonderNet) ponders on the batch ``x``.

    Args:
        model: a :class:`~pondernet_tutorial.PonderNet`, in training or eval mode, or a
            :class:`~pondernet_tutorial.PonderLitModule` around one (what ``fit`` returns); or any module
            whose ``weights(forward(x))`` is a halting distribution of shape ``(N, B)``.
        x: a batch of ``B`` inputs the model accepts (at least one; a verdict needs two or more).
        difficulty: optional ``(B,)`` difficulty of each input (higher is harder). When it counts the
            steps an input needs, ``beyond`` is the mean number of steps taken past them.
        targets: optional ``(B,)`` class of each input. The model answers as at inference (its
            ``answer``; PonderNet's coins drawn with seed 0), and ``accuracy`` is the share right.
        show: print the diagnosis (the returned :class:`Diagnosis` holds the same numbers).
        rules: the thresholds of the verdict (default: the book's :class:`Rules`).

    A method whose halting flips no coin (ACT, a fixed depth) is judged by the steps each input takes,
    ``T(x)``, as in the book's tables, where ``E[n]`` stands below.

    The verdict is the book's rule 3 on one model: *fixed depth* when ``E[n]`` varies by less than
    ``rules.spread`` steps over the inputs, whatever ``ρ``; otherwise by ``ρ`` against the difficulty.
    A verdict on halting means something only for a model that has learned the task: given
    ``targets``, none is given when the accuracy's 95% interval lies under rule 1's mark, chance
    (one over the classes) plus ``rules.learned``. Without ``targets`` the accuracy is not checked.
    """
    if isinstance(x, torch.Tensor) and x.dim() == 0:
        raise ValueError("diagnose needs a batch of at least one input, got a tensor of shape ()")
    if isinstance(x, (DataLoader, Dataset)):  # the step function would fail inside, on its first line
        raise TypeError(
            f"diagnose needs a batch of inputs, got a {type(x).__name__}: take one with next(iter(loader))[0]"
        )
    rules = rules or Rules()
    method = _method(model)
    if not callable(getattr(method, "weights", None)):
        raise ValueError("diagnose needs a halting method (with weights(out)): call it on a PonderNet model")
    computed = not getattr(method, "random_halting", True)  # ACT, fixed depth: T(x), the steps taken
    training = method.training
    method.eval()  # the full unroll over the evaluation's steps, whatever the model's mode
    try:
        out = method(x)
        p = method.weights(out).float()  # (N, B)  p_n = λ_n ∏_{j<n}(1−λ_j)
        answers = halt_step = None
        if targets is not None or computed:
            if not callable(getattr(method, "answer", None)):
                raise ValueError(
                    "diagnose needs a method with answer(out) to score targets: pass a PonderNet"
                )
            answers, halt_step = method.answer(out, torch.Generator().manual_seed(0))  # (B, C), (B,)
    finally:
        method.train(training)
    if p.shape[1] == 0:  # an empty batch, whatever the model takes as input
        raise ValueError("diagnose needs a batch of at least one input, got an empty batch")
    if not torch.isfinite(p).all():
        raise ValueError("the halting distribution has non-finite values: check the model's halting logits")
    n = torch.arange(1, p.shape[0] + 1, dtype=p.dtype).unsqueeze(1)  # (N, 1)
    expected = (n * p).sum(0)  # (B,)  E[n] = Σ_n n·p_n
    if computed:  # the steps each input takes, as in the book's tables
        expected = halt_step.to(p.dtype)
    spread = float(expected.std()) if expected.numel() > 1 else 0.0
    rho = beyond = None
    if difficulty is not None:
        d = torch.as_tensor(difficulty).flatten().cpu().double()
        if len(d) != expected.shape[0]:
            raise ValueError(
                f"difficulty has {len(d)} values for a batch of {expected.shape[0]}: give one per input"
            )
        if not torch.isfinite(d).all():  # a NaN ranks nowhere: ρ would be NaN, read as fixed depth
            raise ValueError(
                f"difficulty has {int((~torch.isfinite(d)).sum())} NaN or infinite values: give a finite "
                "difficulty for every input (or none)"
            )
        rho = float(spearman(pd.Series(d.numpy()), pd.Series(expected.cpu().numpy())))
        beyond = float((expected.cpu().double() - d).mean())  # E[n] − difficulty
    accuracy = mark = None
    if targets is not None:
        y = torch.as_tensor(targets).flatten().to(answers.device)
        if len(y) != expected.shape[0]:
            raise ValueError(
                f"targets has {len(y)} values for a batch of {expected.shape[0]}: give one per input"
            )
        check_classes(y, answers.shape[-1], "the model", "give one class index per input")
        accuracy = float((answers.argmax(-1) == y).double().mean())
        mark = 1 / answers.shape[-1] + rules.learned  # rule 1: chance plus ten points
    if expected.numel() < 2:  # no spread and no ρ: nothing to judge the halting by
        verdict = ONE_INPUT
    elif accuracy is not None and wilson(accuracy, len(y))[1] < mark:
        verdict = NOT_LEARNED
    elif difficulty is None and spread >= rules.spread:
        verdict = NO_VERDICT
    elif difficulty is None:
        verdict = FIXED
    else:
        verdict = halting_verdict((rho, rho), spread, rules)  # NaN ρ (one E[n] for all): fixed depth
    prior = method.halting_prior(p.shape[0]) if hasattr(method, "halting_prior") else None
    prior_mean = None if prior is None else float((n.squeeze(1) * prior.to(n.dtype)).sum())  # Σ n·p_G(n)/Z
    result = Diagnosis(
        mean_steps=float(expected.mean()),
        spread=spread,
        mass_at_n=float(p[-1].mean()),  # p_N: the remainder left at the last step
        rho=rho,
        distribution=p.mean(1).tolist(),
        prior_mean=prior_mean,
        beyond=beyond,
        accuracy=accuracy,
        verdict=verdict,
    )
    if show:
        prior_text = "" if prior_mean is None else f" (the prior's mean over 1..N: {prior_mean:.2f})"
        steps = "T(x)" if computed else "E[n]"
        label = "steps taken T(x)" if computed else "expected steps E[n]"
        print(f"{label} = {result.mean_steps:.2f} of N = {p.shape[0]}{prior_text}")
        print(f"spread of {steps} over the inputs: {spread:.2f} steps")
        print(
            "halting distribution, mean p_n for n = 1..N:", " ".join(f"{v:.2f}" for v in result.distribution)
        )
        print(f"mass at N: {result.mass_at_n:.3f}")
        if accuracy is not None:
            print(
                f"accuracy: {100 * accuracy:.1f}% (learned at {100 * mark:.0f}% or more: chance + {100 * rules.learned:.0f} points)"
            )
        if rho is not None:
            print(f"Spearman rho against your difficulty: {rho:.2f}")
            print(f"steps beyond the difficulty, mean of {steps} - difficulty: {beyond:+.2f}")
        print(
            f"verdict: {verdict} (rules: fixed depth if the spread is below {rules.spread} or "
            f"|rho| < {rules.flat}; follows difficulty if rho >= {rules.follows})"
        )
    return result
