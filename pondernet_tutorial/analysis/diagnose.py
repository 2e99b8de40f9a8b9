"""Does a model ponder? A short diagnosis from one full unroll of a PonderNet model."""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd
import torch

from .difficulty import spearman


@dataclass
class Diagnosis:
    mean_steps: float  # E[n] = Σ_n n·p_n, averaged over the batch
    spread: float  # standard deviation over samples of E[n]
    mass_at_n: float  # mean p_N: the share of the halting mass left on the last step
    rho: float | None  # Spearman ρ between E[n] and the difficulty the user supplies
    distribution: list[float]  # mean p_n over the batch, n = 1..N


@torch.no_grad()
def diagnose(model, x, difficulty=None, show: bool = True) -> Diagnosis:
    """Diagnose whether ``model`` (a PonderNet) ponders on the batch ``x``.

    Args:
        model: a :class:`~pondernet_tutorial.PonderNet`, in training or eval mode, or a
            :class:`~pondernet_tutorial.PonderLitModule` around one (what ``fit`` returns); or any module
            whose forward pass returns ``log_p`` of shape ``(N, B)``.
        x: a batch of ``B`` inputs the model accepts.
        difficulty: optional ``(B,)`` difficulty of each input (any numbers, higher is harder).
    """
    if isinstance(x, torch.Tensor) and (x.dim() == 0 or x.shape[0] == 0):
        raise ValueError(
            f"diagnose needs a batch of at least one input, got a tensor of shape {tuple(x.shape)}"
        )
    inner = getattr(model, "model", None)
    method = inner if isinstance(inner, torch.nn.Module) else model  # the method inside a LitModule
    if hasattr(method, "evaluation_forward"):  # the full unroll over the evaluation's steps, any mode
        out = method.evaluation_forward(method.inference_input(x))
    else:
        out = method(x)
    if out.log_p is None:
        raise ValueError("diagnose needs a full unroll with log_p: call it on a PonderNet model")
    p = out.log_p.exp().float()  # (N, B)  p_n = λ_n ∏_{j<n}(1−λ_j)
    if not torch.isfinite(p).all():
        raise ValueError("the halting distribution has non-finite values: check the model's halting logits")
    n = torch.arange(1, p.shape[0] + 1, dtype=p.dtype).unsqueeze(1)  # (N, 1)
    expected = (n * p).sum(0)  # (B,)  E[n] = Σ_n n·p_n
    rho = None
    if difficulty is not None:
        d = torch.as_tensor(difficulty).flatten().cpu().numpy()
        if len(d) != expected.shape[0]:
            raise ValueError(
                f"difficulty has {len(d)} values for a batch of {expected.shape[0]}: give one per input"
            )
        rho = float(spearman(pd.Series(d), pd.Series(expected.cpu().numpy())))
    result = Diagnosis(
        mean_steps=float(expected.mean()),
        spread=float(expected.std()) if expected.numel() > 1 else 0.0,
        mass_at_n=float(p[-1].mean()),  # p_N: the remainder left at the last step
        rho=rho,
        distribution=p.mean(1).tolist(),
    )
    if show:
        print(
            f"expected steps E[n] = {result.mean_steps:.2f} of N = {p.shape[0]}, spread {result.spread:.2f}"
        )
        print(
            "halting distribution, mean p_n for n = 1..N:", " ".join(f"{v:.2f}" for v in result.distribution)
        )
        print(f"mass at N: {result.mass_at_n:.3f}")
        if rho is not None:
            print(f"Spearman rho against your difficulty: {rho:.2f}")
    return result
