"""Figures: accuracy and pondering steps against rotation, halting distributions against the prior."""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import seaborn as sns

from .halting import geometric_prior

TRAIN_RANGE = {"interpolation": 0.0, "extrapolation": 22.5}
METRIC_LABELS = {
    "accuracy": "test accuracy",
    "halt_step": "mean sampled halting step",
    "expected_steps": "mean expected steps  Σ n·pₙ",
}


def plot_against_rotation(
    per_run: pd.DataFrame,
    metric: str = "accuracy",
    mode: str = "exact",
    ax=None,
    experiments: tuple[str, ...] = ("interpolation", "extrapolation"),
):
    """A metric against the rotation angle: the mean over seeds as a line, min–max over seeds as a band.

    Args:
        per_run: one row per (experiment, seed, set) with ``mode``, ``degrees`` and the metric.
        mode: ``"exact"`` (x = the angle) or ``"uniform"`` (x = the half-range ±θ).

    The extrapolation model's training range (±22.5°) is shaded.
    """
    ax = ax or plt.gca()
    data = per_run[(per_run["mode"] == mode) & per_run["experiment"].isin(experiments)]
    palette = dict(zip(experiments, sns.color_palette("colorblind", len(experiments))))
    for experiment, group in data.groupby("experiment", sort=False):
        stats = group.groupby("degrees")[metric].agg(["mean", "min", "max"]).reset_index()
        seeds = group["seed"].nunique()
        color = palette[experiment]
        ax.plot(
            stats["degrees"],
            stats["mean"],
            marker="o",
            ms=3,
            color=color,
            label=f"{experiment} (mean of {seeds} seeds)",
        )
        ax.fill_between(stats["degrees"], stats["min"], stats["max"], color=color, alpha=0.25, lw=0)
    if "extrapolation" in experiments:
        ax.axvspan(0, TRAIN_RANGE["extrapolation"], color="grey", alpha=0.15, label="training range (±22.5°)")
    ax.set_xlabel("rotation angle (°)" if mode == "exact" else "rotated uniformly within ± (°)")
    ax.set_ylabel(METRIC_LABELS.get(metric, metric))
    ax.legend(frameon=False, fontsize="small")
    return ax


def plot_rotation_figure(per_run: pd.DataFrame, mode: str = "exact"):
    """Accuracy and pondering steps against rotation, side by side."""
    fig, axes = plt.subplots(1, 2, figsize=(11, 4), constrained_layout=True)
    plot_against_rotation(per_run, "accuracy", mode, axes[0])
    plot_against_rotation(per_run, "expected_steps", mode, axes[1])
    if mode == "exact":
        for ax in axes:
            ax.set_xticks(range(0, 181, 30))
    return fig


def plot_halting_distribution(
    per_sample: pd.DataFrame,
    lambda_p: float = 0.2,
    max_steps: int = 20,
    sets: list[str] | None = None,
    ax=None,
    column: str = "halt_step",
):
    """Distribution of the sampled halting step for several test sets against the geometric prior."""
    ax = ax or plt.gca()
    sets = sets or list(dict.fromkeys(per_sample["set"]))
    steps = np.arange(1, max_steps + 1)
    colors = sns.color_palette("viridis", len(sets))
    for name, color in zip(sets, colors):
        values = per_sample.loc[per_sample["set"] == name, column]
        freq = np.bincount(values, minlength=max_steps + 1)[1:] / len(values)
        ax.plot(
            steps,
            freq,
            marker="o",
            ms=3,
            color=color,
            label=name.replace("rot", "").replace("_pm", "±") + "°",
        )
    prior = geometric_prior(lambda_p, max_steps).numpy()
    ax.bar(steps, prior, color="grey", alpha=0.3, label=f"prior p_G(λ_p={lambda_p:g})")
    ax.set_xlabel("halting step n")
    ax.set_ylabel("fraction of test digits")
    ax.set_xticks(steps[::2] if max_steps > 10 else steps)
    ax.legend(frameon=False, fontsize="small", ncol=2)
    return ax


def plot_history(history: pd.DataFrame, ax_acc=None, ax_steps=None, label: str = ""):
    """Validation accuracy and expected steps per epoch from a run's ``history.csv``."""
    epochs = history["epoch"] + 1
    if ax_acc is not None:
        ax_acc.plot(epochs, history["val/acc"], label=label)
        ax_acc.set_xlabel("epoch")
        ax_acc.set_ylabel("validation accuracy")
    if ax_steps is not None:
        ax_steps.plot(epochs, history["val/expected_steps"], label=label)
        ax_steps.set_xlabel("epoch")
        ax_steps.set_ylabel("validation expected steps")
