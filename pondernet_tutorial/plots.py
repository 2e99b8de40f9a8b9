"""Figures of the notebooks: metrics against the rotation angle, halting distributions against the prior,
metrics against a per-sample quantity (parity's ``k``), with the spread over seeds as a band."""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import seaborn as sns

from .halting import geometric_prior
from .registry import get_experiment

METRIC_LABELS = {
    "accuracy": "test accuracy",
    "halt_step": "mean halting step (steps computed)",
    "expected_steps": "mean expected steps  Σ n·pₙ",
}


def plot_band(frame: pd.DataFrame, x: str, metric: str, ax, label: str, color=None, marker="o"):
    """The mean over seeds as a line and the lowest-to-highest seed as a band (``frame``: one row per
    seed and ``x``)."""
    stats = frame.groupby(x)[metric].agg(["mean", "min", "max"]).reset_index()
    line = ax.plot(stats[x], stats["mean"], marker=marker, ms=3, color=color, label=label)[0]
    ax.fill_between(stats[x], stats["min"], stats["max"], color=line.get_color(), alpha=0.2, lw=0)
    return line


def plot_against_rotation(summary: pd.DataFrame, metric: str = "accuracy", ax=None, experiments=None):
    """A metric against the signed rotation angle (positive: counter-clockwise), one line per experiment.

    Args:
        summary: per-run summaries with ``experiment``, ``seed``, ``mode`` and ``degrees``.

    The extrapolation models' training range is shaded.
    """
    ax = ax or plt.gca()
    data = summary[summary["mode"] == "exact"]
    experiments = experiments or list(dict.fromkeys(data["experiment"]))
    palette = dict(zip(experiments, sns.color_palette("colorblind", len(experiments))))
    for experiment in experiments:
        group = data[data["experiment"] == experiment]
        seeds = group["seed"].nunique()
        plot_band(group, "degrees", metric, ax, f"{experiment} (mean of {seeds} seeds)", palette[experiment])
        train_range = get_experiment(experiment).data_options.get("train_rotation", 0.0)
        if train_range:
            ax.axvspan(
                -train_range,
                train_range,
                color="grey",
                alpha=0.12,
                label=f"training range (±{train_range:g}°)",
            )
    ax.set_xlabel("rotation angle (°, counter-clockwise positive)")
    ax.set_ylabel(METRIC_LABELS.get(metric, metric))
    ax.set_xticks(range(-180, 181, 45))
    ax.legend(frameon=False, fontsize="small")
    return ax


def plot_halting_distribution(
    per_sample: pd.DataFrame,
    lambda_p: float,
    max_steps: int,
    sets: list[str],
    ax=None,
    column: str = "halt_step",
):
    """Frequency of the sampled halting step for several test sets against the prior, the geometric
    distribution renormalised over 1..N (what the KL term pulls towards)."""
    ax = ax or plt.gca()
    steps = np.arange(1, max_steps + 1)
    colors = sns.color_palette("viridis", len(sets))
    for name, color in zip(sets, colors):
        values = per_sample.loc[per_sample["set"] == name, column].astype(int)
        frequency = np.bincount(values, minlength=max_steps + 1)[1:] / len(values)
        label = name.replace("rot_pm", "±").replace("rot", "") + "°"
        ax.plot(steps, frequency, marker="o", ms=3, color=color, label=label)
    prior = geometric_prior(lambda_p, max_steps, renormalize=True).numpy()
    ax.bar(steps, prior, color="grey", alpha=0.3, label=f"prior p_G(λ_p={lambda_p:g}), renormalised")
    ax.set_xlabel("halting step n")
    ax.set_ylabel("fraction of test samples")
    ax.set_xticks(steps[::2] if max_steps > 10 else steps)
    ax.legend(frameon=False, fontsize="small", ncol=2)
    return ax
