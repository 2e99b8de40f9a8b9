"""The experiments behind the book: train every run, evaluate it on the rotation sweep, aggregate.

:func:`reproduce` is what ``python -m pondernet_tutorial reproduce`` runs. It writes into a new folder
(``results/reproduce`` by default) and never into the shipped ``pretrained/`` folder unless asked.

Layout of a results folder (the shipped one is ``pondernet_tutorial/pretrained``)::

    <experiment>/seed<k>/model.pt        weights only
    <experiment>/seed<k>/history.csv     one row per epoch
    <experiment>/seed<k>/metadata.json   hyperparameters, epochs, wall time, hardware, versions
    <experiment>/seed<k>/per_sample.csv.gz  every test digit of the sweep
    per_run.csv          one row per (experiment, seed, test set): accuracy, steps
    per_angle.csv        the same, mean / std / min / max over seeds
    figures/*.png, *.svg
"""

from __future__ import annotations

import json
import time
from dataclasses import replace
from pathlib import Path

import pandas as pd

from .checkpoints import PRETRAINED_DIR, load_model
from .data import load_mnist
from .evaluation import across_seeds, evaluate_sweep, summarize
from .training import TrainConfig, train

EXPERIMENTS = ("interpolation", "extrapolation")


def evaluate_run(run_dir: Path, data_dir=None, limit=None, test_data=None, overwrite=False) -> pd.DataFrame:
    """Evaluate a run's ``model.pt`` on the sweep and write its ``per_sample.csv.gz``."""
    target = run_dir / "per_sample.csv.gz"
    if target.exists() and not overwrite:
        return pd.read_csv(target)
    module = load_model(run_dir / "model.pt")
    per_sample = evaluate_sweep(module, data_dir=data_dir, limit=limit, test_data=test_data)
    per_sample.to_csv(target, index=False, float_format="%.4g")
    return per_sample


def collect_per_sample(root: str | Path | None = None) -> pd.DataFrame:
    """Every run's per-sample table under ``root`` in one frame, with ``experiment`` and ``seed`` columns."""
    root = Path(root or PRETRAINED_DIR)
    frames = []
    for path in sorted(root.glob("*/seed*/per_sample.csv.gz")):
        experiment, seed = path.parent.parent.name, int(path.parent.name.removeprefix("seed"))
        frames.append(pd.read_csv(path).assign(experiment=experiment, seed=seed))
    if not frames:
        raise FileNotFoundError(f"no evaluated runs (*/seed*/per_sample.csv.gz) under {root}.")
    return pd.concat(frames, ignore_index=True)


def load_results(root: str | Path | None = None, per_sample: bool = True) -> dict[str, pd.DataFrame]:
    """The tables of a results folder (default: the shipped results)."""
    root = Path(root or PRETRAINED_DIR)
    tables = {"per_run": pd.read_csv(root / "per_run.csv"), "per_angle": pd.read_csv(root / "per_angle.csv")}
    if per_sample:
        tables["per_sample"] = collect_per_sample(root)
    return tables


def aggregate(root: Path) -> dict[str, pd.DataFrame]:
    """Summarise every run's per-sample table into ``per_run.csv`` and ``per_angle.csv``."""
    per_sample = collect_per_sample(root)
    per_run = summarize(per_sample, ("experiment", "seed", "set", "mode", "degrees"))
    per_angle = across_seeds(per_run)
    per_run.to_csv(root / "per_run.csv", index=False, float_format="%.6g")
    per_angle.to_csv(root / "per_angle.csv", index=False, float_format="%.6g")
    return {"per_sample": per_sample, "per_run": per_run, "per_angle": per_angle}


def save_figures(root: Path, tables: dict[str, pd.DataFrame], lambda_p: float, max_steps: int) -> list[Path]:
    """Draw the rotation figures and halting distributions as PNG and SVG under ``root/figures``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from .plots import plot_halting_distribution, plot_rotation_figure

    out = root / "figures"
    out.mkdir(parents=True, exist_ok=True)
    paths = []
    figures = {
        "rotation_exact": plot_rotation_figure(tables["per_run"], "exact"),
        "rotation_reference": plot_rotation_figure(tables["per_run"], "uniform"),
    }
    per_sample = tables["per_sample"]
    for experiment in per_sample["experiment"].unique():
        fig, ax = plt.subplots(figsize=(6, 4), constrained_layout=True)
        plot_halting_distribution(
            per_sample[per_sample["experiment"] == experiment],
            lambda_p,
            max_steps,
            sets=["rot0", "rot45", "rot90", "rot135", "rot180"],
            ax=ax,
        )
        ax.set_title(f"{experiment}: sampled halting step")
        figures[f"halting_{experiment}"] = fig
    for name, fig in figures.items():
        for suffix in ("png", "svg"):
            path = out / f"{name}.{suffix}"
            fig.savefig(path, dpi=120)
            paths.append(path)
        plt.close(fig)
    return paths


def reproduce(
    output_dir: str | Path = "results/reproduce",
    seeds=(0, 1, 2),
    experiments=EXPERIMENTS,
    base: TrainConfig | None = None,
    limit: int | None = None,
    overwrite: bool = False,
    ship: bool = False,
    reevaluate: bool = False,
) -> dict[str, pd.DataFrame]:
    """Train (or reuse) every run, evaluate it on the rotation sweep, aggregate, draw the figures.

    Runs already trained in ``output_dir`` are reused unless ``overwrite``: an interrupted
    reproduction resumes where it stopped.

    Args:
        base: the training configuration shared by all runs (reference defaults).
        limit: evaluate on the first ``limit`` test images only (quick runs).
        ship: write into the package's ``pretrained/`` folder (``output_dir`` is then ignored).
        reevaluate: evaluate the runs again even where their per-sample tables exist.
    """
    base = base or TrainConfig()
    root = PRETRAINED_DIR if ship else Path(output_dir)
    if ship and (base.train_subset or limit):
        raise ValueError("quick runs (train_subset or limit) are never shipped as pretrained results.")
    test_data = load_mnist(train=False, data_dir=base.data_dir)
    start = time.perf_counter()
    for experiment in experiments:
        for seed in seeds:
            config = replace(base, experiment=experiment, seed=seed, output_dir=str(root))
            trained = overwrite or not (config.run_dir / "model.pt").exists()
            if trained:
                print(f"== training {experiment}, seed {seed} -> {config.run_dir}", flush=True)
                train(config, overwrite=True)
            print(f"== evaluating {experiment}, seed {seed}", flush=True)
            evaluate_run(config.run_dir, base.data_dir, limit, test_data, overwrite=trained or reevaluate)
    tables = aggregate(root)
    save_figures(root, tables, base.lambda_p, base.max_steps)
    summary = {"seconds": round(time.perf_counter() - start, 1), "root": str(root)}
    print(json.dumps(summary))
    return tables
