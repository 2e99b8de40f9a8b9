"""Figures of the notebooks: metrics against the rotation angle, halting distributions against the prior,
metrics against a per-sample quantity (parity's ``k``), with the spread over seeds as a band.

Every figure is drawn for the book's column: :data:`COLUMN_WIDTH` inches wide, panels stacked rather
than side by side, legends below the panels (:func:`legend_below`), and shown as SVG
(:func:`use_book_style`), so that it is as sharp in the book as in Jupyter and on Colab and its text is
read at the size it was set in. Axes of counts (steps, epochs, ``k``) carry integer ticks
(:func:`integer_ticks`); an axis of steps starts at 0 (:func:`steps_axis`), so that a change of a few
tenths of a step looks like one.
"""

from __future__ import annotations

import re

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import seaborn as sns
from matplotlib.ticker import MaxNLocator

from ..halting import geometric_prior
from ..runs.registry import get_experiment

# The book's column is about 690 CSS px wide (tools/check_rendering.py measures it); an SVG figure is
# shown at 96 px per inch, so 6.8 inches (653 px) fit it with a margin.
COLUMN_WIDTH = 6.8
PANEL_HEIGHT = 2.9  # inches per stacked panel


def use_book_style() -> None:
    """The notebooks' figure style: seaborn's grid, fonts sized for the column, SVG output inline, and the
    colour cycle of :data:`METHOD_COLORS` (a line drawn in the default first colour is PonderNet's blue);
    and tables whose cells are shown whole (pandas cuts a cell at 50 characters by default)."""
    sns.set_theme(context="notebook", style="whitegrid", font_scale=0.85, palette=_COLORBLIND)
    pd.set_option("display.max_colwidth", None)
    plt.rcParams.update(
        {
            "figure.figsize": (COLUMN_WIDTH, PANEL_HEIGHT),
            "figure.constrained_layout.use": True,
            "legend.frameon": False,
            "svg.fonttype": "path",  # text drawn as outlines: the same in every browser
        }
    )
    try:
        from matplotlib_inline.backend_inline import set_matplotlib_formats
    except ImportError:  # no IPython: figures are saved, not shown inline
        return
    set_matplotlib_formats("svg")


def shades(n: int, family: str = "pondernet") -> list:
    """``n`` shades of a method's colour, darkest first: its seeds, or groups of its inputs, stay its hue."""
    return sns.light_palette(METHOD_COLORS[family], n_colors=n + 1, reverse=True)[:n]


def column_figure(rows: int = 1, height: float = PANEL_HEIGHT, **subplots):
    """A figure of ``rows`` panels stacked in the column, each ``height`` inches tall.

    Returns:
        the figure and a 1-D array of its axes.
    """
    fig, axes = plt.subplots(rows, 1, figsize=(COLUMN_WIDTH, height * rows), squeeze=False, **subplots)
    return fig, axes[:, 0]


def integer_ticks(axis) -> None:
    """Integer ticks only, on an axis of counts (``ax.xaxis`` or ``ax.yaxis``)."""
    axis.set_major_locator(MaxNLocator(integer=True))


def steps_axis(ax, top: float | None = None) -> None:
    """A y axis of steps from 0 (to ``top``, or a little above the data), with integer ticks."""
    ax.set_ylim(0, top if top is not None else max(1.0, ax.get_ylim()[1] * 1.05))
    integer_ticks(ax.yaxis)


def legend_below(fig, axes, ncols: int = 2, **options):
    """One legend for the whole figure, below its panels: every distinct label of ``axes`` once."""
    handles, labels = {}, []
    for ax in np.atleast_1d(axes):
        for handle, label in zip(*ax.get_legend_handles_labels()):
            if label not in handles and not label.startswith("_"):
                handles[label] = handle
                labels.append(label)
    return fig.legend(
        [handles[label] for label in labels], labels, loc="outside lower center", ncols=ncols, **options
    )


METRIC_LABELS = {
    "accuracy": "test accuracy",
    "halt_step": "mean halting step (steps computed)",
    "expected_steps": "mean expected steps  Σ n·pₙ",
}


# One colour per method, the same in every figure of the book; the configurations of one method share
# its colour and differ by marker and line style (config_styles). Keys: the method families of
# pondernet_tutorial.analysis.verdicts ("one step" is its ONE_STEP).
_COLORBLIND = sns.color_palette("colorblind")
METHOD_COLORS = {
    "pondernet": _COLORBLIND[0],  # blue
    "control": _COLORBLIND[4],  # purple: PonderNet with frozen halting
    "act": _COLORBLIND[3],  # vermilion
    "trm": _COLORBLIND[2],  # green: TRM's halting head
    "hrm": _COLORBLIND[1],  # orange: HRM's halting head
    "fixed": (0.55, 0.55, 0.55),  # grey
    "one step": (0.0, 0.0, 0.0),  # black
}
# one PonderNet network's halting, drawn as bars in the model chapters: p_n in PonderNet's colour, λ_n grey
HALTING_COLORS = {"p": METHOD_COLORS["pondernet"], "lambda": (0.7, 0.7, 0.7)}
MARKERS = "osD^vP*X"
LINESTYLES = ("-", "--", ":", "-.")


def config_styles(families: dict[str, str], shift: float = 0.0) -> dict[str, dict]:
    """The style of each configuration: ``{config: {"color", "marker", "linestyle", "offset"}}``.

    Args:
        families: each configuration's method family (a key of :data:`METHOD_COLORS`), in drawing order.
        shift: the sideways step between configurations, in x units (0.1 to 0.3 on an axis of ``k``), so
            that lines with equal values lie side by side instead of on top of each other.
    """
    configs = list(families)
    for family in set(families.values()):
        if family not in METHOD_COLORS:
            raise ValueError(f"unknown method family {family!r}: use one of {', '.join(METHOD_COLORS)}.")
    ranks = {c: prior_rank(c) for c in configs}  # a plain PonderNet's prior: its own rank in every figure
    for config in configs:  # the others: the first rank their family leaves free, in drawing order
        if ranks[config] is None:
            taken = {ranks[c] for c in configs if families[c] == families[config]}
            ranks[config] = next(r for r in range(len(configs) + len(PRIOR_RANKS)) if r not in taken)
    return {
        config: {
            "color": METHOD_COLORS[families[config]],
            "marker": MARKERS[ranks[config] % len(MARKERS)],
            "linestyle": LINESTYLES[ranks[config] % len(LINESTYLES)],
            "offset": shift * (i - (len(configs) - 1) / 2),
        }
        for i, config in enumerate(configs)
    }


# the priors of the book's PonderNet runs, in order: "PonderNet λ_p=0.5" has one marker and line in every
# figure (a reader follows a prior from figure to figure)
PRIOR_RANKS = (0.2, 0.5, 0.1, 0.8, 0.05, 0.9)


def prior_rank(config: str) -> int | None:
    """The style rank of a plain PonderNet configuration, named ``PonderNet λ_p=<value>``, by its prior;
    None for any other name."""
    match = re.fullmatch(r"PonderNet λ_p=([0-9.]+)", config)
    value = float(match[1]) if match else None
    return PRIOR_RANKS.index(value) if value in PRIOR_RANKS else None


def plot_band(
    frame: pd.DataFrame,
    x: str,
    metric: str,
    ax,
    label: str,
    color=None,
    marker="o",
    linestyle="-",
    offset: float = 0.0,
):
    """The mean over seeds as a line and the lowest-to-highest seed as a band (``frame``: one row per
    seed and ``x``), moved ``offset`` along x (see :func:`config_styles`)."""
    stats = frame.groupby(x)[metric].agg(["mean", "min", "max"]).reset_index()
    xs = stats[x] + offset
    line = ax.plot(xs, stats["mean"], marker=marker, ms=3, ls=linestyle, color=color, label=label)[0]
    ax.fill_between(xs, stats["min"], stats["max"], color=line.get_color(), alpha=0.2, lw=0)
    return line


def plot_against_rotation(summary: pd.DataFrame, metric: str = "accuracy", ax=None, experiments=None):
    """A metric against the signed rotation angle (positive: counter-clockwise), one line per experiment.

    Args:
        summary: per-run summaries with ``experiment``, ``seed``, ``mode`` and ``degrees``.

    The extrapolation models' training range is shaded. Colours follow :data:`METHOD_COLORS` (the
    method of each experiment's runs), with a marker, line style and a sideways offset of 2° per
    experiment (:func:`config_styles`), so that equal lines lie side by side.
    """
    ax = ax or plt.gca()
    data = summary[summary["mode"] == "exact"]
    experiments = experiments or list(dict.fromkeys(data["experiment"]))
    methods = {e: data.loc[data["experiment"] == e, "method"].iloc[0] for e in experiments}
    styles = config_styles(
        {e: methods[e] if methods[e] in METHOD_COLORS else "fixed" for e in experiments}, 2.0
    )
    for experiment in experiments:
        group = data[data["experiment"] == experiment]
        seeds = group["seed"].nunique()
        label = f"{experiment} (mean of {seeds} seeds)"
        plot_band(group, "degrees", metric, ax, label, **styles[experiment])
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
    if metric in ("halt_step", "expected_steps"):
        steps_axis(ax)
    return ax


def angle_style(name: str) -> dict:
    """The colour of a rotated test set (``rot45``, ``rot-45``) by its angle's size, the same in every
    figure (viridis from 0° to 180°), and its direction by the line: dashed for a negative angle."""
    degrees = float(name.replace("rot_pm", "").replace("rot", ""))
    return {
        "color": plt.get_cmap("viridis")(abs(degrees) / 180 * 0.9),
        "linestyle": "--" if degrees < 0 else "-",
    }


def angle_label(name: str) -> str:
    return ("rotated by " + name.replace("rot_pm", "±").replace("rot", "") + "°").replace("-", "−")


def plot_halting_distribution(
    per_sample: pd.DataFrame,
    lambda_p: float,
    max_steps: int,
    sets: list[str],
    ax=None,
    column: str = "halt_step",
):
    """Frequency of the sampled halting step for several test sets against the prior, the geometric
    distribution renormalised over 1..N (what the KL term pulls towards). MNIST's rotated sets
    (``rot45``) are drawn by their angle; any other set by its name, in the colour cycle."""
    ax = ax or plt.gca()
    steps = np.arange(1, max_steps + 1)
    for name in sets:
        values = per_sample.loc[per_sample["set"] == name, column]
        outside = values[~(values.between(1, max_steps) & (values % 1 == 0))]
        if len(outside):  # np.bincount would size its array by the value (the table is data)
            raise ValueError(f"{column} holds {outside.iloc[0]}, not a step from 1 to {max_steps}.")
        values = values.astype(int)
        frequency = np.bincount(values, minlength=max_steps + 1)[1:] / len(values)
        rotated = re.fullmatch(r"rot(_pm)?-?\d+(\.\d+)?", str(name))  # MNIST's sets; any other by its name
        style = {"label": angle_label(name), **angle_style(name)} if rotated else {"label": str(name)}
        ax.plot(steps, frequency, marker="o", ms=3, **style)
    prior = geometric_prior(lambda_p, max_steps, renormalize=True).numpy()
    ax.bar(steps, prior, color="grey", alpha=0.3, label=f"prior p_G(λ_p={lambda_p:g}), renormalised")
    ax.set_xlabel("halting step n")
    ax.set_ylabel("fraction of test samples")
    ax.set_xticks(steps[::2] if max_steps > 10 else steps)
    return ax


def pointer_walk(arrows) -> list[int]:
    """The slots of a pointer-chasing input's walk, from slot 0 to its exit (the slot that points at
    itself): ``[0, a_0, a_{a_0}, ...]``, ``k`` slots (:mod:`pondernet_tutorial.data.pointer`)."""
    arrows = [int(a) for a in arrows]
    walk = [0]
    while arrows[walk[-1]] != walk[-1]:
        walk.append(arrows[walk[-1]])
        if len(walk) > len(arrows):
            raise ValueError("the arrows from slot 0 run in a cycle: not a pointer-chasing input.")
    return walk


def _arc(ax, start: int, end: int, up: bool, height: float, **style):
    """A half-ellipse from slot ``start`` to slot ``end`` above (``up``) or below the row of slots, with
    an arrowhead at ``end``."""
    t = np.linspace(0, np.pi, 60)
    x = (start + end) / 2 - (end - start) / 2 * np.cos(t)
    y = (1 if up else -1) * height * np.sin(t)
    (line,) = ax.plot(x, y, **style)
    ax.annotate(
        "",
        xy=(x[-1], y[-1]),
        xytext=(x[-4], y[-4]),
        arrowprops={"arrowstyle": "-|>", "color": line.get_color(), "lw": line.get_linewidth()},
    )
    return line


def plot_pointer_sample(arrows, ax=None, color=None):
    """One pointer-chasing input as an arc diagram: the slots in a row, the walk from slot 0 above it
    (the arc that step ``n`` can follow numbered ``n``, each higher than the one before), every other
    arrow below, the exits as squares.

    Args:
        arrows: ``(n_slots,)`` the slot each slot points at.

    Returns:
        the walk (:func:`pointer_walk`).
    """
    ax = ax or plt.gca()
    arrows = [int(a) for a in arrows]
    n = len(arrows)
    walk = pointer_walk(arrows)
    color = color or "black"  # the task, not a method: no method's colour
    scale = 2.0 / n  # below the row, an arc rises with the distance it spans: the longest by 2

    def height(i, j):
        return 0.3 + scale * abs(j - i)

    on_walk = set(zip(walk[:-1], walk[1:]))
    for i, j in enumerate(arrows):
        if i != j and (i, j) not in on_walk:
            _arc(ax, i, j, False, height(i, j), color="0.6", lw=0.8, label="other arrows", gid="other")
    rise = 0.3  # the walk's n-th arc rises 0.3 n: its arcs never coincide, nor their numbers
    for step, (i, j) in enumerate(zip(walk[:-1], walk[1:]), start=1):
        _arc(ax, i, j, True, rise * step, color=color, lw=1.8, label="the walk from slot 0", gid="walk")
        ax.text(
            (i + j) / 2,
            rise * step,
            str(step),
            ha="center",
            va="center",
            fontsize=8,
            color=color,
            bbox={"boxstyle": "circle,pad=0.15", "facecolor": "white", "edgecolor": color, "lw": 0.8},
        )
    slots = np.arange(n)
    exits = np.array([a == i for i, a in enumerate(arrows)])
    ax.scatter(
        slots[~exits],
        np.zeros((~exits).sum()),
        s=40,
        color="white",
        edgecolor="0.3",
        zorder=3,
        label="slot (points at another)",
    )
    ax.scatter(
        slots[exits],
        np.zeros(exits.sum()),
        s=40,
        marker="s",
        color="0.3",
        zorder=3,
        label="exit (points at itself)",
    )
    ax.scatter(
        [walk[-1]],
        [0],
        s=90,
        marker="s",
        facecolor="none",
        edgecolor=color,
        lw=1.8,
        zorder=4,
        label="the answer: the walk's exit",
    )
    for i in slots:
        ax.text(i, -0.18, str(i), ha="center", va="top", fontsize=6.5)
    top = rise * len(on_walk) + 0.3
    bottom = max([height(i, j) for i, j in enumerate(arrows) if i != j], default=0.3) + 0.1
    ax.set(xlim=(-0.8, n - 0.2), ylim=(-bottom, top), xticks=[], yticks=[])
    ax.grid(False)
    for side in ax.spines.values():
        side.set_visible(False)
    return walk
