"""Evaluate a trained run on its experiment's test sets: per-sample, per-group, per-step and per-class
tables.

Per test sample: the answer at the step inference halts at (PonderNet's sampled step, ACT's ``T(x)``,
the fixed ``k``), that step, ``Σ_n n p_n``, the answer's entropy and loss, the total-variation distance
of its halting distribution to the prior (PonderNet) and the set's per-sample facts (parity's ``k``).
PonderNet's coins come from one generator per test set, drawn in sample order
(:func:`~pondernet_tutorial.halting.halting_uniforms`): every batch size halts a sample at the same step.
Tasks with a difficulty also get ``halting.csv`` (:func:`halting_table`), TRM's and HRM's heads
``decisions.csv`` (:func:`decision_table`).
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from ..data.base import EvalSet
from ..methods.base import expected_steps, per_sample_loss
from ..untrusted import damaged_table, read_json, read_table
from .config import WEIGHTS, TrainConfig, check_not_shipped, identity_differences
from .files import check_inside, folder_lock, remove_inside, write_csv, write_json
from .processes import command_name

EVAL_FORMAT = "pondernet_tutorial/evaluation-v3"
RUN_TABLES = ("summary.csv", "per_step.csv", "per_class.csv")
# the columns of the run tables that hold numbers (the studies compute with them): a table read back with
# text in one is damaged, one line, not a traceback where it is used
NUMERIC_COLUMNS = tuple("degrees k step label prediction accuracy halt_step expected_steps n".split())
# the columns a study reads from every run's tables (a table without one is damaged, one line); MNIST's
# summaries add the rotation's mode and degrees, the tasks with a difficulty its per-sample k
REQUIRED_COLUMNS = {
    "summary": ("set", "accuracy", "halt_step", "expected_steps", "n"),
    "per_step": ("set", "step", "accuracy"),
    "per_class": ("set", "label", "accuracy", "halt_step", "expected_steps", "n"),
    "halting": ("set", "accuracy", "accuracy_draws", "rho", "rho_draws", "spread", "steps", "difficulty"),
    "per_sample": ("set", "label", "prediction", "halt_step", "expected_steps"),
}
# the columns that hold one halting step each (whole numbers from 1 to MAX_STEPS): figures size arrays by them
STEP_COLUMNS = {"per_sample": ("halt_step",), "per_step": ("step",)}
HALTING_FORMAT = "pondernet_tutorial/halting-v1"
DIFFICULTY = "k"  # the per-sample difficulty of the tasks that have one (parity, pointer chasing)
COIN_DRAWS = 20  # fresh halting-coin draws behind the coin interval of a sampled halting step
COVERAGE = 0.95  # the share of the coin draws inside a seed's coin interval (the central 95%)
# the methods whose halting logit q_n is trained towards c_n = 1[argmax ŷ_n = y] (TRM's, HRM's halt
# logit): their evaluation also writes DECISIONS, how often q_n > 0 says what c_n is
DECISION_HEADS = ("trm", "hrm")
DECISIONS = "decisions.csv"
# every file an evaluation writes in a run folder (what a run folder may hold besides training's files)
EVALUATION_FILES = (
    *RUN_TABLES,
    DECISIONS,
    "per_sample.csv.gz",
    "evaluation.json",
    "halting.csv",
    "halting.json",
)
DECISION_COUNTS = ("pairs", "right", "positive", "correct")


def spearman(a: pd.Series, b: pd.Series) -> float:
    """Spearman's rank correlation (Pearson's of the average ranks); NaN if either is constant."""
    ra, rb = a.rank(), b.rank()
    if ra.nunique() < 2 or rb.nunique() < 2:
        return float("nan")
    return float(ra.corr(rb))


def count(n: int, noun: str, plural: str | None = None) -> str:
    """``n`` and the noun in the right number: ``count(1, "run")`` is ``"1 run"``, ``count(3, "run")``
    ``"3 runs"``; ``plural`` for the irregular ones."""
    n = int(n)
    return f"{n} {noun if n == 1 else plural or noun + 's'}"


def halt_logits(model, out) -> torch.Tensor:
    """``(S, B)``: the halt logit ``q_n`` of every step of a full unroll of a correctness head: TRM's
    halting logit, HRM's ``q^halt_n`` (its rows past the unroll's ``S`` steps left out). Raises a
    ``ValueError`` for the other methods, whose halting logit is not trained towards ``c_n``."""
    from ..methods.hrm import HALT, HRMHalting
    from ..methods.trm import TRMHalting

    steps = out.logits.shape[0]
    if isinstance(model, TRMHalting):
        return out.halting_logits[:steps]
    if isinstance(model, HRMHalting):
        return out.halting_logits[:steps, :, HALT]
    raise ValueError(
        f"{type(model).__name__} has no halting logit trained towards the answer's correctness: "
        f"halting decisions are scored for {', '.join(DECISION_HEADS)} only."
    )


def decision_pairs(q: torch.Tensor, logits: torch.Tensor, y: torch.Tensor, halt_step: torch.Tensor) -> dict:
    """The pairs (sample, step ``n ≤ T(x)``) of one batch, as columns: ``sample`` (its row in the
    batch), ``step``, ``halt_logit`` (``q_n``), ``correct`` (``c_n = 1[argmax ŷ_n = y]``) and
    ``halt_step`` (``T(x)``).

    Args:
        q: ``(S, B)`` halt logits (:func:`halt_logits`); ``logits``: ``(S, B, C)`` every step's answer;
            ``y``: ``(B,)`` labels; ``halt_step``: ``(B,)`` the step inference halts at.
    """
    steps = torch.arange(1, q.shape[0] + 1, device=q.device)[:, None].expand_as(q)
    taken = (steps <= halt_step[None]).T  # (B, S): sample by sample, step by step
    sample = torch.arange(q.shape[1], device=q.device)[:, None].expand_as(taken)
    correct = (logits.argmax(-1) == y).T
    return {
        "sample": sample[taken],
        "step": steps.T[taken],
        "halt_logit": q.T.float()[taken],
        "correct": correct[taken].to(torch.int8),
        "halt_step": halt_step[:, None].expand_as(taken)[taken],
    }


def evaluate_set(
    module, eval_set: EvalSet, seed: int = 0, batch_size: int = 2000
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Run a model on one test set.

    Args:
        module: a :class:`~pondernet_tutorial.lightning_module.PonderLitModule` or a halting method.
        seed: seed of PonderNet's halting coins for this set.

    Returns:
        ``(per_sample, per_step)``: one row per sample (``index, label, prediction, halt_step,
        expected_steps, entropy, loss, tv_prior`` and the set's per-sample columns), and the accuracy
        of the step-``n`` prediction for every ``n`` (methods that unroll every step only).
    """
    return evaluate_set_decisions(module, eval_set, seed, batch_size, decisions=False)[:2]


@torch.no_grad()
def evaluate_set_decisions(
    module, eval_set: EvalSet, seed: int = 0, batch_size: int = 2000, decisions: bool = True
) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame | None]:
    """:func:`evaluate_set`, and from the same forward pass the halting decisions of a correctness
    head (:func:`halt_logits`; ``decisions``): one row per sample and step ``n ≤ T(x)``, with ``set``,
    ``index``, ``step``, ``halt_logit``, ``correct``, ``halt_step`` and the set's columns and
    per-sample columns (:func:`decision_pairs`); None with ``decisions=False``."""
    model = (module.model if hasattr(module, "model") else module).eval()
    device = next(model.parameters()).device
    generator = torch.Generator().manual_seed(seed)
    prior = model.halting_prior(model.eval_steps)
    frames, correct_by_step, pair_frames = [], [], []
    for start in range(0, len(eval_set.labels), batch_size):
        x = eval_set.inputs[start : start + batch_size].to(device)
        y = eval_set.labels[start : start + batch_size].to(device)
        if not x.is_floating_point():
            x = x.float() / 255.0
        out = model(x)  # every step of the evaluation's budget
        logits, halt_step = model.answer(out, generator)  # the answer at the halting step inference takes
        logits, p = logits.float(), model.weights(out)
        log_probs = torch.log_softmax(logits, dim=-1)
        columns = {
            "index": torch.arange(start, start + len(y)),
            "label": y,
            "prediction": logits.argmax(-1),
            "halt_step": halt_step,
            "expected_steps": expected_steps(p),
            "entropy": -(log_probs.exp() * log_probs).sum(-1),  # nats, of the answer
            "loss": per_sample_loss(model.loss_fn, logits, y),  # of the answer
        }
        if prior is not None:  # TV(p_b, prior) = ½ Σ_n |p_n − q_n|
            columns["tv_prior"] = 0.5 * (p.float() - prior.to(device)[:, None]).abs().sum(0)
        for name, values in eval_set.per_sample.items():
            columns[name] = values[start : start + batch_size]
        frames.append(pd.DataFrame({k: v.cpu().numpy() for k, v in columns.items()}))
        if decisions:  # the same unroll's halt logits and answers, the same halting steps
            pairs = decision_pairs(halt_logits(model, out), out.logits, y, halt_step)
            rows = {"index": pairs.pop("sample").cpu() + start, **{k: v.cpu() for k, v in pairs.items()}}
            for name, values in eval_set.per_sample.items():  # the sample's facts (parity's k)
                rows[name] = values[start : start + batch_size][rows["index"] - start]
            pair_frames.append(pd.DataFrame({k: v.numpy() for k, v in rows.items()}))
        if model.step_answers:
            correct_by_step.append((out.logits.argmax(-1) == y).float().sum(1).cpu())  # (S,)
    per_sample = pd.concat(frames, ignore_index=True)
    for name, value in eval_set.columns.items():
        per_sample.insert(0, name, value)
    per_sample.insert(0, "set", eval_set.name)
    per_step = pd.DataFrame(columns=["set", "step", "accuracy"])
    if correct_by_step:
        accuracy = torch.stack(correct_by_step).sum(0) / len(eval_set.labels)
        per_step = pd.DataFrame(
            {"set": eval_set.name, "step": range(1, len(accuracy) + 1), "accuracy": accuracy.numpy()}
        )
    if not decisions:
        return per_sample, per_step, None
    pairs = pd.concat(pair_frames, ignore_index=True)
    for name, value in eval_set.columns.items():
        pairs.insert(0, name, value)
    pairs.insert(0, "set", eval_set.name)
    return per_sample, per_step, pairs


def decision_table(pairs: pd.DataFrame, by: tuple[str, ...] = ("set",)) -> pd.DataFrame:
    """What ``decisions.csv`` keeps of the pairs (sample, step ``n ≤ T(x)``): per group of ``by`` and
    step, the counts ``pairs``, ``right`` (``[q_n > 0] == c_n``, whose share over the pairs is
    :func:`~pondernet_tutorial.analysis.heads.decisions_right`), ``positive`` (``q_n > 0``) and
    ``correct`` (``c_n = 1``).

    Counts, not the 1.6 million pairs of a run on the paper's parity (about 7 MB gzipped): their sums give
    ``decisions_right`` exactly for every coarser grouping (:func:`pooled_decisions`).
    """
    keys = [*by, "step"]
    counted = pairs[pairs["step"] <= pairs["halt_step"]]
    positive = counted["halt_logit"] > 0  # the head's own halting test, σ(q_n) > 1/2
    # right: [q_n > 0] == c_n, the agreement that analysis/heads.decisions_right takes the share of
    # (runs/ imports nothing of analysis/; tests/runs/test_halting_decisions.py holds the two equal)
    frame = counted[keys].assign(
        pairs=1,
        right=positive == counted["correct"].astype(bool),
        positive=positive,
        correct=counted["correct"],
    )
    table = frame.groupby(keys, sort=False)[list(DECISION_COUNTS)].sum().reset_index()
    table[list(DECISION_COUNTS)] = table[list(DECISION_COUNTS)].astype(int)
    sets = {name: i for i, name in enumerate(pairs["set"].unique())}  # the sets in evaluation's order
    order = table.sort_values(keys, key=lambda c: c.map(sets) if c.name == "set" else c, ignore_index=True)
    return order[[*keys, *DECISION_COUNTS]]


def pooled_decisions(table: pd.DataFrame, by: tuple[str, ...] = ("set",)) -> pd.DataFrame:
    """``decisions.csv`` summed over the other columns: per group of ``by``, the counts and ``right``
    as :func:`~pondernet_tutorial.analysis.heads.decisions_right` gives it on the same pairs (the
    share of the pairs), with ``positive`` and ``correct`` as shares too."""
    by = list(by)
    sums = table.groupby(by, sort=False)[list(DECISION_COUNTS)].sum().reset_index()
    for name in ("right", "positive", "correct"):
        sums[name] = sums[name] / sums["pairs"]
    return sums


def evaluate(module, eval_sets: list[EvalSet], seed: int = 0) -> tuple[pd.DataFrame, pd.DataFrame]:
    """:func:`evaluate_set` on every set; the coins of each set start from ``seed``."""
    return evaluate_decisions(module, eval_sets, seed, decisions=False)[:2]


def evaluate_decisions(module, eval_sets: list[EvalSet], seed: int = 0, decisions: bool = True):
    """:func:`evaluate_set_decisions` on every set: ``(per_sample, per_step, pairs)``, ``pairs`` None
    with ``decisions=False``."""
    tables = [evaluate_set_decisions(module, s, seed, decisions=decisions) for s in eval_sets]
    per_sample, per_step, pairs = zip(*tables)
    pairs = pd.concat(pairs, ignore_index=True) if decisions else None
    return pd.concat(per_sample, ignore_index=True), pd.concat(per_step, ignore_index=True), pairs


def summarize(per_sample: pd.DataFrame, by: tuple[str, ...] = ("set",)) -> pd.DataFrame:
    """Per group: accuracy, mean halting step, expected steps (mean and spread over samples), entropy
    and loss, the mean distance to the prior, the rank correlations of the expected steps with the
    entropy and with the loss, and the mean expected steps of wrong and right answers."""
    frame = per_sample.assign(correct=per_sample["prediction"] == per_sample["label"])
    rows = []
    for key, group in frame.groupby(list(by), sort=False, dropna=False):
        key = key if isinstance(key, tuple) else (key,)
        row = dict(zip(by, key))
        row.update(
            accuracy=group["correct"].mean(),
            halt_step=group["halt_step"].mean(),
            expected_steps=group["expected_steps"].mean(),
            expected_steps_std=group["expected_steps"].std(ddof=0),  # how much the steps vary between samples
            entropy=group["entropy"].mean(),
            loss=group["loss"].mean(),
            tv_prior=group["tv_prior"].mean() if "tv_prior" in group else float("nan"),
            spearman_steps_entropy=spearman(group["expected_steps"], group["entropy"]),
            spearman_steps_loss=spearman(group["expected_steps"], group["loss"]),
            steps_wrong=group.loc[~group["correct"], "expected_steps"].mean(),
            steps_right=group.loc[group["correct"], "expected_steps"].mean(),
            n=len(group),
        )
        rows.append(row)
    return pd.DataFrame(rows)


def per_angle(summary: pd.DataFrame, by: tuple[str, ...] = ("experiment", "variant")) -> pd.DataFrame:
    """Both rotation directions and their mean, per ``|θ|``, with mean, std, min and max over seeds.

    Args:
        summary: per-run summaries with ``seed``, ``mode`` and signed ``degrees`` (MNIST).

    Returns:
        one row per group, mode, ``abs_degrees`` and ``direction``: ``counter-clockwise``,
        ``clockwise`` and their ``mean of both`` (per seed, then over seeds); ``both`` at 0° and 180°,
        which have no direction; ``uniform`` for the symmetric uniform ranges.
    """
    frame = summary.assign(abs_degrees=summary["degrees"].abs())
    frame = frame[~((frame["mode"] == "exact") & (frame["degrees"] == -180))]  # the same turn as 180°
    exact = frame["mode"] == "exact"
    frame["direction"] = "uniform"
    frame.loc[exact, "direction"] = "both"  # 0° and 180° have no direction
    frame.loc[exact & (frame["degrees"] > 0) & (frame["degrees"] < 180), "direction"] = "counter-clockwise"
    frame.loc[exact & (frame["degrees"] < 0), "direction"] = "clockwise"
    keys = [*by, "seed", "mode", "abs_degrees"]
    metrics = ["accuracy", "halt_step", "expected_steps"]
    turned = frame[frame["direction"].isin(["counter-clockwise", "clockwise"])]
    both = turned.groupby(keys, sort=False)[metrics].mean().reset_index().assign(direction="mean of both")
    frame = pd.concat([frame[[*keys, "direction", *metrics]], both], ignore_index=True)
    stats = frame.groupby([*by, "mode", "abs_degrees", "direction"], sort=True)[metrics].agg(
        ["mean", "std", "min", "max"]
    )
    stats.columns = [f"{metric}_{stat}" for metric, stat in stats.columns]
    counts = frame.groupby([*by, "mode", "abs_degrees", "direction"], sort=True).size().rename("seeds")
    return stats.join(counts).reset_index()


def per_class(per_sample: pd.DataFrame, by: tuple[str, ...] = ("set",)) -> pd.DataFrame:
    """Per group and true class: accuracy, mean halting step and mean expected steps."""
    frame = per_sample.assign(correct=per_sample["prediction"] == per_sample["label"])
    return (
        frame.groupby([*by, "label"], sort=False)
        .agg(
            accuracy=("correct", "mean"),
            halt_step=("halt_step", "mean"),
            expected_steps=("expected_steps", "mean"),
            n=("correct", "size"),
        )
        .reset_index()
    )


def evaluation_record(config: TrainConfig, limit: int | None, seed: int, set_names: list[str]) -> dict:
    """What a run's evaluation tables depend on; they are reused only when it is unchanged."""
    return {
        "format": EVAL_FORMAT,
        "identity": config.identity(),
        "limit": limit,
        "seed": seed,
        "sets": set_names,
    }


def _datamodule_and_record(config: TrainConfig, limit: int | None, seed: int, sweep: str | None):
    from .build import make_datamodule
    from .registry import get_experiment

    sweep = sweep or get_experiment(config.experiment).evaluation.get("sweep")
    datamodule = make_datamodule(config, test_rotations=sweep, test_subset=limit)
    return datamodule, evaluation_record(config, limit, seed, datamodule.test_set_names)


def run_tables(config: TrainConfig) -> tuple[str, ...]:
    """The tables a run's evaluation writes besides ``per_sample.csv.gz``: :data:`RUN_TABLES`, and
    :data:`DECISIONS` for the correctness heads (:data:`DECISION_HEADS`)."""
    return (*RUN_TABLES, DECISIONS) if config.method in DECISION_HEADS else RUN_TABLES


def tables_up_to_date(
    config: TrainConfig, limit: int | None = None, seed: int = 0, sweep: str | None = None
) -> bool:
    """True if the run's folder holds evaluation tables made for exactly this request."""
    run_dir = config.run_dir
    saved_path = run_dir / "evaluation.json"
    if not saved_path.is_file() or not all((run_dir / t).is_file() for t in run_tables(config)):
        return False
    saved = read_json(saved_path, follow_links=False)  # no link out of the run
    if saved is None:  # damaged: the tables are made again
        return False
    _, record = _datamodule_and_record(config, limit, seed, sweep)
    return not identity_differences(saved, record)


def evaluate_run(
    config: TrainConfig,
    limit: int | None = None,
    seed: int = 0,
    overwrite: bool = False,
    sweep: str | None = None,
    module=None,
    ship: bool = False,
) -> dict[str, pd.DataFrame]:
    """Evaluate a trained run and write its tables into its folder.

    Writes ``summary.csv`` (per group of :attr:`Experiment.group_by`), ``per_step.csv``,
    ``per_class.csv``, ``per_sample.csv.gz``, :data:`DECISIONS` for TRM and HRM, and, last,
    ``evaluation.json`` (:func:`evaluation_record`), each whole; tables are reused only when their
    ``evaluation.json`` equals the requested one.

    Args:
        limit: only the first ``limit`` test samples of every set (of every ``k`` on parity and pointer chasing).
        sweep: the data module's named set of test sets (MNIST: ``"full"``); default the experiment's.
        module: the trained module, if already in memory (else ``model.safetensors`` is loaded).
        ship: write into the package's shipped ``pretrained/`` folder (``reproduce --ship``); without
            it the tables of a shipped run are read, never written (``ValueError``).
    """
    from .checkpoints import load_model
    from .registry import get_experiment

    experiment = get_experiment(config.experiment)
    run_dir = config.run_dir
    check_inside(run_dir, config.output_dir)  # no lock, read or write through a link out of the folder
    with folder_lock(run_dir, wait=True, doing="training or evaluating it"):
        if not overwrite and tables_up_to_date(config, limit, seed, sweep):
            return load_run_tables(run_dir)
        if not ship:  # the shipped runs are the package's data: only reproduce --ship rewrites them
            check_not_shipped(config.output_dir, "output_dir")
        datamodule, record = _datamodule_and_record(config, limit, seed, sweep)
        module = module if module is not None else load_model(run_dir / WEIGHTS, config=config)
        decisions = config.method in DECISION_HEADS
        per_sample, per_step, pairs = evaluate_decisions(
            module, datamodule.evaluation_sets(), seed, decisions
        )
        tables = {
            "summary": summarize(per_sample, experiment.group_by),
            "per_step": per_step,
            "per_class": per_class(per_sample, experiment.group_by),
            "per_sample": per_sample,
        }
        inside = config.output_dir  # every write and removal in the run folder, never through a link
        # evaluation.json, written last, vouches for the tables: gone while they are replaced
        remove_inside(run_dir / "evaluation.json", inside, missing_ok=True)
        remove_inside(run_dir / DECISIONS, inside, missing_ok=True)  # not another method's
        for name in ("summary", "per_step", "per_class"):
            write_csv(run_dir / f"{name}.csv", tables[name], inside, index=False, float_format="%.6g")
        if decisions:
            write_csv(run_dir / DECISIONS, decision_table(pairs, experiment.group_by), inside, index=False)
        write_csv(
            run_dir / "per_sample.csv.gz",
            per_sample_for_file(per_sample),
            inside,
            index=False,
            float_format="%.4g",
        )
        write_json(run_dir / "evaluation.json", record, inside)
        return tables


# E[n] is kept whole: a rank correlation with k ranks it, and 4 digits tie runs of E[n] near the budget
# (pointer-noexit PonderNet λ_p = 0.2, seed 1: ρ(k, E[n]) 0.117 from the model, 0.163 from 4 digits)
FULL_PRECISION_COLUMNS = ("expected_steps",)


def per_sample_for_file(per_sample: pd.DataFrame) -> pd.DataFrame:
    """``per_sample`` as ``per_sample.csv.gz`` stores it: E[n] to every digit of its float (9
    significant digits round-trip a float32), the other real columns to 4 by the file's float_format."""
    whole = {}
    for name in FULL_PRECISION_COLUMNS:
        if name in per_sample:
            digits = 17 if per_sample[name].dtype == "float64" else 9
            whole[name] = [f"{v:.{digits}g}" for v in per_sample[name]]
    return per_sample.assign(**whole)


def halting_by_run(
    per_sample: pd.DataFrame, difficulty: str = DIFFICULTY, steps: str = "halt_step", by=("set",)
) -> pd.DataFrame:
    """Per group (test set): how the steps follow the difficulty.

    Args:
        per_sample: per-sample tables (``label``, ``prediction``, ``steps``, ``difficulty``) with the
            ``by`` columns.

    Returns:
        one row per group: ``rho`` (Spearman's ``ρ`` of the difficulty and the steps; NaN where either is
        the same for every sample), ``spread`` (the standard deviation of the steps over the samples),
        ``steps`` (their mean), ``accuracy`` and ``n``.
    """
    by = list(by)
    rows = []
    for key, group in per_sample.groupby(by, sort=False, dropna=False):
        row = dict(zip(by, key if isinstance(key, tuple) else (key,)))
        row.update(
            rho=spearman(group[difficulty], group[steps]),
            spread=group[steps].std(ddof=0),
            steps=group[steps].mean(),
            accuracy=(group["prediction"] == group["label"]).mean(),
            n=len(group),
        )
        rows.append(row)
    return pd.DataFrame(rows)


@torch.no_grad()
def coin_draws(module, eval_set, draws: int = COIN_DRAWS, seed: int = 1, batch_size: int = 2000) -> dict:
    """A run's accuracy and ``ρ(k, n)`` over ``draws`` fresh draws of its halting coins, on one set.

    The network runs once; draw ``i`` samples halting steps from its logits with seed ``seed + i``.
    Returns ``accuracy`` and ``rho``, arrays ``(draws,)``.
    """
    model = (module.model if hasattr(module, "model") else module).eval()
    device = next(model.parameters()).device
    outs = []
    for start in range(0, len(eval_set.labels), batch_size):
        x = eval_set.inputs[start : start + batch_size].to(device)
        if not x.is_floating_point():
            x = x.float() / 255.0
        outs.append(model(x))  # every step of the evaluation's budget
    k = pd.Series(np.asarray(eval_set.per_sample[DIFFICULTY]))
    labels = eval_set.labels
    accuracy, rho = [], []
    for draw in range(draws):
        generator = torch.Generator().manual_seed(seed + draw)
        steps, correct = [], []
        for start, out in zip(range(0, len(labels), batch_size), outs):
            prediction, halt_step = model.answer(out, generator)
            y = labels[start : start + batch_size]
            steps.append(halt_step.cpu())
            correct.append((prediction.argmax(-1).cpu() == y).float())
        accuracy.append(float(torch.cat(correct).mean()))
        rho.append(spearman(k, pd.Series(torch.cat(steps).numpy())))
    return {"accuracy": np.array(accuracy), "rho": np.array(rho)}


def halting_table(module, eval_sets, per_sample: pd.DataFrame, draws: int = COIN_DRAWS) -> pd.DataFrame:
    """How one run's halting follows the difficulty, per test set of ``eval_sets``, over ``draws`` fresh
    draws of the coins where halting is random (``random_halting``), made once by :func:`evaluate_halting`.

    Returns:
        one row per set: :func:`halting_by_run` of ``per_sample`` (the evaluation's draw), ``difficulty``
        (the mean ``k``), ``rho_expected`` (``ρ(k, E[n])``), ``coin_draws`` (0: not random), and for
        ``accuracy`` and ``rho`` the draws' mean (``_draws``) and central :data:`COVERAGE` (``_low``,
        ``_high``; the point values where halting is not random).
    """
    table = halting_by_run(per_sample)
    table["difficulty"] = per_sample.groupby("set", sort=False)[DIFFICULTY].mean().loc[table["set"]].values
    expected = halting_by_run(per_sample, steps="expected_steps")
    table["rho_expected"] = expected.set_index("set")["rho"].loc[table["set"]].values
    model = module.model if hasattr(module, "model") else module
    if not (getattr(model, "random_halting", False) and draws > 0):
        for name in ("accuracy", "rho"):  # the same halting in every draw: the interval is the point
            for end in ("draws", "low", "high"):
                table[f"{name}_{end}"] = table[name]
        return table.assign(coin_draws=0)
    tail = (1 - COVERAGE) / 2
    rows = []
    for eval_set in eval_sets:
        drawn, row = coin_draws(model, eval_set, draws), {"set": eval_set.name}
        for name in ("accuracy", "rho"):
            values = drawn[name][~np.isnan(drawn[name])]
            stats = (values.mean(), *np.quantile(values, [tail, 1 - tail])) if len(values) else [math.nan] * 3
            row.update({f"{name}_{end}": float(v) for end, v in zip(("draws", "low", "high"), stats)})
        rows.append(row)
    return table.merge(pd.DataFrame(rows), on="set", how="left").assign(coin_draws=draws)


def has_difficulty(config: TrainConfig) -> bool:
    """True for the experiments whose test samples carry a difficulty ``k`` (parity, pointer chasing)."""
    from .registry import get_experiment

    return DIFFICULTY in get_experiment(config.experiment).group_by


def halting_record(evaluation: dict) -> dict:
    """What a run's ``halting.csv`` depends on: its evaluation and the coin draws."""
    return {
        "format": HALTING_FORMAT,
        "evaluation": evaluation,
        "coin_draws": COIN_DRAWS,
        "coverage": COVERAGE,
    }


def halting_up_to_date(config: TrainConfig, limit: int | None = None, seed: int = 0) -> bool:
    """True if the run needs no ``halting.csv`` (no difficulty) or holds one made for its evaluation."""
    if not has_difficulty(config):
        return True
    run_dir = config.run_dir
    saved = (
        read_json(run_dir / "halting.json", follow_links=False)
        if (run_dir / "halting.csv").is_file()
        else None
    )
    evaluation = read_json(run_dir / "evaluation.json", follow_links=False)
    if saved is None or evaluation is None:
        return False
    _, record = _datamodule_and_record(config, limit, seed, None)
    return not identity_differences(saved, halting_record(record)) and not identity_differences(
        evaluation, record
    )


def evaluate_halting(
    config: TrainConfig,
    limit: int | None = None,
    seed: int = 0,
    overwrite: bool = False,
    module=None,
    ship: bool = False,
) -> pd.DataFrame | None:
    """Write ``halting.csv`` (:func:`halting_table`, from :func:`evaluate_run`'s sets and per-sample
    table) and, last, ``halting.json``; reused while that record is unchanged. None without a difficulty.
    ``ship``: as :func:`evaluate_run`'s.
    """
    from .checkpoints import load_model

    if not has_difficulty(config):
        return None
    run_dir = config.run_dir
    check_inside(run_dir, config.output_dir)  # no lock, read or write through a link out of the folder
    with folder_lock(run_dir, wait=True, doing="training or evaluating it"):
        if not overwrite and halting_up_to_date(config, limit, seed):
            return read_table(run_dir / "halting.csv", follow_links=False)
        if not ship:
            check_not_shipped(config.output_dir, "output_dir")
        if not tables_up_to_date(config, limit, seed) or not (run_dir / "per_sample.csv.gz").is_file():
            raise FileNotFoundError(
                f"{run_dir} has no up-to-date evaluation with its per-sample table: evaluate it first "
                f"(`{command_name()} reproduce --reevaluate`)."
            )
        datamodule, record = _datamodule_and_record(config, limit, seed, None)
        module = module if module is not None else load_model(run_dir / WEIGHTS, config=config)
        per_sample = read_table(
            run_dir / "per_sample.csv.gz",
            numeric=NUMERIC_COLUMNS,
            follow_links=False,  # no link out of the run
            required=(*REQUIRED_COLUMNS["per_sample"], DIFFICULTY),
            steps=STEP_COLUMNS["per_sample"],
        )
        table = halting_table(module, datamodule.evaluation_sets(), per_sample)
        remove_inside(run_dir / "halting.json", config.output_dir, missing_ok=True)
        write_csv(run_dir / "halting.csv", table, config.output_dir, index=False, float_format="%.6g")
        write_json(run_dir / "halting.json", halting_record(record), config.output_dir)
        return table


def range_scores(module, sets: dict[str, EvalSet], seed: int = 0) -> dict:
    """Each set's accuracy, mean halting step and size as ``<name>_accuracy``, ``<name>_steps`` and
    ``<name>_n`` (the same coins, ``seed``, at every call); the module's training mode is kept."""
    was_training, scores = module.training, {}
    for name, eval_set in sets.items():
        per_sample, _ = evaluate_set(module, eval_set, seed=seed)
        scores[f"{name}_accuracy"] = float((per_sample.label == per_sample.prediction).mean())
        scores[f"{name}_steps"] = float(per_sample.halt_step.mean())
        scores[f"{name}_n"] = len(per_sample)
    module.train(was_training)
    return scores


def load_run_tables(run_dir: str | Path, per_sample: bool = False, budget=None) -> dict[str, pd.DataFrame]:
    """A run's evaluation tables (and its per-sample table, where it was kept), each read without
    following a link out of the run, with the columns a study reads (:data:`REQUIRED_COLUMNS`) and
    the test sets that the run's ``evaluation.json`` records: the summary each of them, every table no
    other (a per-step table may leave a set out). A table of other sets would drop the run from a
    study's tables without a word; each fault is a one-line ``DamagedFileError``. ``budget``: a
    :class:`~pondernet_tutorial.untrusted.TableBudget` shared with other runs' reads."""
    run_dir = Path(run_dir)
    files = {t.removesuffix(".csv"): run_dir / t for t in RUN_TABLES}
    if (run_dir / "halting.csv").is_file():
        files["halting"] = run_dir / "halting.csv"
    if per_sample and (run_dir / "per_sample.csv.gz").exists():
        files["per_sample"] = run_dir / "per_sample.csv.gz"
    record = read_json(run_dir / "evaluation.json", follow_links=False) or {}
    sets = record.get("sets")  # none recorded: nothing to hold the tables to (evaluated again anyway)
    sets = {str(name) for name in sets} if isinstance(sets, list) else None
    tables = {}
    for name, path in files.items():
        table = read_table(
            path,
            numeric=NUMERIC_COLUMNS,
            follow_links=False,
            required=REQUIRED_COLUMNS[name],
            steps=STEP_COLUMNS.get(name, ()),
            budget=budget,
        )
        if name == "summary" and "degrees" in table and "mode" not in table:  # MNIST's rotations
            raise damaged_table(path, "it has degrees without their mode")
        found = set(table["set"].astype(str))
        if sets is not None and (not found <= sets or (name == "summary" and found != sets)):
            raise damaged_table(
                path, f"its test sets {sorted(found)[:5]} are not the evaluation's {sorted(sets)[:5]}"
            )
        tables[name] = table
    return tables
