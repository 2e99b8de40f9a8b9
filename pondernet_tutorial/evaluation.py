"""Evaluate models on rotated test sets: per-sample tables and per-angle summaries.

Two protocols:

* **exact angles**: the whole test set rotated by exactly θ = 0°, 15°, …, 180°;
* **the reference protocol**: digits rotated uniformly within ±22.5°, ±45°, ±67.5°, ±90°, as
  ``RandomRotation(θ)`` does in the popular implementations. Note that "±90°" mixes in every smaller
  angle, the training range included, so it says less about extrapolation than "exactly 90°".

The halting coins come from a generator seeded per test set, one uniform number per sample and step,
so any slice of a test set gets the same halting steps as the whole set does.
"""

from __future__ import annotations

import pandas as pd
import torch
from torch import Tensor

from .data import RotationSpec, load_mnist, rotated_test_set

EXACT_ANGLES = tuple(range(0, 181, 15))
REFERENCE_ANGLES = (22.5, 45.0, 67.5, 90.0)


def sweep_specs() -> list[RotationSpec]:
    """The exact angles 0°–180° in steps of 15° and the reference protocol's uniform ranges."""
    return [RotationSpec(float(a)) for a in EXACT_ANGLES] + [
        RotationSpec(a, "uniform") for a in REFERENCE_ANGLES
    ]


def halting_step_from_uniforms(lambda_logits: Tensor, uniforms: Tensor) -> Tensor:
    """First step n with ``u_n < λ_n`` (a Bernoulli(λ_n) coin per step), N if none.

    Args:
        lambda_logits: ``(N, B)``; uniforms: ``(N, B)`` in [0, 1) (the last row is unused).

    Returns:
        ``(B,)`` halting steps in 1..N.
    """
    halts = uniforms < torch.sigmoid(lambda_logits.float())
    halts[-1] = True  # λ_N = 1
    return halts.float().argmax(0) + 1


@torch.no_grad()
def evaluate_images(
    module, images: Tensor, labels: Tensor, seed: int = 0, batch_size: int = 2000
) -> pd.DataFrame:
    """Per-sample results of a model on one (already rotated) float image set.

    Returns:
        DataFrame with columns ``index, label, prediction, halt_step, expected_steps, entropy``:
        prediction at the sampled halting step, expected steps Σ n p_n and the predictive entropy
        (nats) of the prediction at the halting step.
    """
    model = module.model if hasattr(module, "model") else module
    model.eval()
    device = next(model.parameters()).device
    generator = torch.Generator().manual_seed(seed)
    # one row of N coins per sample, drawn in sample order: a prefix of the set gets the same coins
    uniforms = torch.rand(len(labels), model.max_steps, generator=generator).T
    rows = []
    for start in range(0, len(labels), batch_size):
        x = images[start : start + batch_size].to(device)
        out = model(x, halting="full")
        out.halt_step = halting_step_from_uniforms(
            out.lambda_logits.cpu(), uniforms[:, start : start + batch_size]
        ).to(device)
        logits = out.prediction_logits.float()
        log_probs = torch.log_softmax(logits, dim=-1)
        rows.append(
            pd.DataFrame(
                {
                    "index": torch.arange(start, start + len(x)).numpy(),
                    "label": labels[start : start + batch_size].numpy(),
                    "prediction": logits.argmax(-1).cpu().numpy(),
                    "halt_step": out.halt_step.cpu().numpy(),
                    "expected_steps": out.expected_steps.cpu().numpy(),
                    "entropy": -(log_probs.exp() * log_probs).sum(-1).cpu().numpy(),
                }
            )
        )
    return pd.concat(rows, ignore_index=True)


def evaluate_sweep(
    module,
    specs: list[RotationSpec] | None = None,
    data_dir: str | None = None,
    limit: int | None = None,
    seed: int = 0,
    test_data: tuple[Tensor, Tensor] | None = None,
) -> pd.DataFrame:
    """Per-sample results on every rotated test set (default :func:`sweep_specs`).

    Args:
        limit: only the first ``limit`` test images (quick runs and tests).
        seed: seeds both the uniform rotations and the halting coins.
        test_data: ``(images uint8 (M, 1, 28, 28), labels (M,))`` to skip loading MNIST again.

    Returns:
        the per-sample table with the columns ``set, mode, degrees`` in front.
    """
    images, labels = test_data if test_data is not None else load_mnist(train=False, data_dir=data_dir)
    if limit:
        images, labels = images[:limit], labels[:limit]
    frames = []
    for spec in specs or sweep_specs():
        rotated = rotated_test_set(images, spec, seed=seed)
        frame = evaluate_images(module, rotated, labels, seed=seed)
        frame.insert(0, "degrees", spec.degrees)
        frame.insert(0, "mode", spec.mode)
        frame.insert(0, "set", spec.name)
        frames.append(frame)
    return pd.concat(frames, ignore_index=True)


def summarize(per_sample: pd.DataFrame, by: tuple[str, ...] = ("set", "mode", "degrees")) -> pd.DataFrame:
    """Accuracy, mean sampled halting step and mean expected steps per group."""
    frame = per_sample.assign(correct=per_sample["prediction"] == per_sample["label"])
    return (
        frame.groupby(list(by), sort=False)
        .agg(
            accuracy=("correct", "mean"),
            halt_step=("halt_step", "mean"),
            expected_steps=("expected_steps", "mean"),
            entropy=("entropy", "mean"),
            n=("correct", "size"),
        )
        .reset_index()
    )


def across_seeds(
    per_run: pd.DataFrame, by: tuple[str, ...] = ("experiment", "set", "mode", "degrees")
) -> pd.DataFrame:
    """Mean, standard deviation, min and max over seeds of a per-run summary."""
    stats = per_run.groupby(list(by), sort=False)[["accuracy", "halt_step", "expected_steps"]].agg(
        ["mean", "std", "min", "max"]
    )
    stats.columns = [f"{metric}_{stat}" for metric, stat in stats.columns]
    return stats.reset_index().assign(seeds=per_run.groupby(list(by), sort=False).size().values)
