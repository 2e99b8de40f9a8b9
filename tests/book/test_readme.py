"""The README: its top is two commands, and every number of its results section is the one the shipped
tables give, computed with the functions the book uses (before: it quoted single draws where the book
gives the mean of 20, and "none passes 60%" after a continued run had passed it)."""

import re
from pathlib import Path

import pandas as pd
import pytest

from pondernet_tutorial.analysis import paper_claims
from pondernet_tutorial.analysis.heads import HeadRules, at_limit
from pondernet_tutorial.analysis.notebook import load_json
from pondernet_tutorial.analysis.verdicts import FIXED, FOLLOWS, Rules, config_label, judge, seeds_on, span
from pondernet_tutorial.runs.config import PRETRAINED_DIR, TrainConfig
from pondernet_tutorial.runs.evaluation import COIN_DRAWS
from pondernet_tutorial.runs.registry import get_experiment
from pondernet_tutorial.runs.studies import HEADS_TASKS, POINTER, load_study
from pondernet_tutorial.untrusted import read_table

README = Path(__file__).resolve().parents[2] / "README.md"
RULES = Rules()
PAPER = paper_claims.PaperRules()
# a number as the README prints it: 99.9%, 4.5, −0.22, 0.88–0.90, 500,000
NUMBER = re.compile(r"(?<![\w.,])[−-]?\d+(?:,\d{3})*(?:\.\d+)?%?")


def section(title: str) -> str:
    text = README.read_text(encoding="utf-8")
    match = re.search(rf"^## {re.escape(title)}\n(.*?)(?=^## |\Z)", text, re.S | re.M)
    assert match, f"the README has no section {title!r}"
    return match.group(1)


def test_the_top_is_two_commands():
    block = re.search(r"```bash\n(.*?)```", section("Get going"), re.S)
    assert block, "the README's 'Get going' section shows its commands in a bash block"
    lines = [line for line in block.group(1).splitlines() if line.strip()]
    assert len(lines) == 2, lines
    assert "pip install -r requirements.txt" in lines[0] and lines[1].startswith("jupyter-book build")


def pct(fraction: float, digits: int = 1) -> str:
    return f"{100 * fraction:.{digits}f}%"


def per_run(study: str, experiment: str, set_name: str = "test"):
    """Each run's accuracy and ρ over its halting coins' draws, as the chapters read them, named and
    grouped into families as the book names them."""
    tables = load_study(study, PRETRAINED_DIR)
    runs = tables["runs"][tables["runs"]["experiment"] == experiment]
    labels = [config_label(load_json(PRETRAINED_DIR, run)["config"]) for _, run in runs.iterrows()]
    runs = runs.assign(config=[name for name, _ in labels], family=[family for _, family in labels])
    return seeds_on(tables["halting"], runs, set_name).sort_values("seed")


def seeds(runs, family: str) -> list[str]:
    return [pct(a) for a in runs.loc[runs["family"] == family, "accuracy"]]


def mnist_one_step_enough() -> bool | None:
    """Rule 2 on upright digits, by judge(), as the closing chapter applies it: the seeds of the networks
    trained within ±22.5° (the fixed networks are trained so), PonderNet's and the fixed ones'."""
    frames = []
    for study in ("mnist-reference", "mnist-baselines"):
        tables = load_study(study, PRETRAINED_DIR)
        runs = tables["runs"][tables["runs"]["experiment"] == "mnist-extrapolation"]
        labels = [config_label(load_json(PRETRAINED_DIR, run)["config"]) for _, run in runs.iterrows()]
        runs = runs.assign(config=[name for name, _ in labels], family=[family for _, family in labels])
        summary = tables["summary"]
        summary = summary[(summary["experiment"] == "mnist-extrapolation") & (summary["set"] == "rot0")]
        frames.append(summary.merge(runs[["variant", "seed", "config", "family"]], on=["variant", "seed"]))
    per_run = pd.concat(frames).rename(
        columns={"spearman_steps_entropy": "rho", "expected_steps_std": "spread", "halt_step": "steps"}
    )
    _, setting = judge(per_run, 1 / get_experiment("mnist-extrapolation").n_classes)
    assert setting["one_step"] is not None
    return setting["one_step_enough"]


def expected_results() -> tuple[list[str], dict[str, bool]]:
    """The README's results, in the order it states them: its numbers, and the rule behind each of its
    qualitative sentences."""
    numbers, holds = [str(COIN_DRAWS)], {}

    # MNIST: the reference network on upright digits, and the best one-step network (as the landing page)
    mnist = load_study("mnist-reference", PRETRAINED_DIR)["summary"]
    mnist = mnist[(mnist["experiment"] == "mnist-interpolation") & (mnist["set"] == "rot0")]
    baselines = load_study("mnist-baselines", PRETRAINED_DIR)["summary"]
    one = baselines[(baselines["set"] == "rot0") & (baselines["max_steps"] == 1)]
    one = one.groupby("variant")["accuracy"].mean().max()
    numbers += [pct(mnist["accuracy"].mean()), f"{mnist['expected_steps'].mean():.1f}", pct(one)]
    numbers.append(span(mnist["spearman_steps_entropy"].min(), mnist["spearman_steps_entropy"].max()))
    holds["MNIST: the three seeds agree"] = (
        len(mnist) == 3 and mnist["accuracy"].max() - mnist["accuracy"].min() <= RULES.margin
    )
    holds["MNIST: one step is enough"] = mnist_one_step_enough()
    holds["MNIST: steps do not rise with the entropy"] = (mnist["spearman_steps_entropy"] < 0).all()

    # labml's parity: the most accurate PonderNet configuration; extrapolation's unseen range
    configs, _ = judge(per_run("parity-interpolation", "parity-interpolation"), 0.5)
    ponder = configs[configs["family"] == "pondernet"]
    best = ponder.loc[ponder["accuracy"].idxmax()]
    extra = get_experiment("parity-extrapolation").data_options
    numbers += [pct(best["accuracy"]), span(best["rho_low"], best["rho_high"])]
    numbers += [*map(str, extra["train_k"]), *map(str, extra["test_k"])]
    holds["labml: PonderNet solves it with a fixed depth"] = (
        best["solves"] is True and best["verdict"] == FIXED
    )
    extra_configs, _ = judge(per_run("parity-extrapolation", "parity-extrapolation"), 0.5)
    holds["labml: no method solves 9 to 16"] = extra_configs["solves"].ne(True).all()

    # the paper's parity: every seed, interpolation, extrapolation where it stopped, and continued
    study = "parity-paper16-long"
    inter = per_run(study, "parity-paper16-interpolation")
    numbers += [str(get_experiment("parity-paper16-interpolation").data_options["n_elements"])]
    numbers += [*seeds(inter, "pondernet"), *seeds(inter, "act"), *seeds(inter, "control")]
    numbers += seeds(inter, "one step")
    paper = get_experiment("parity-paper16-extrapolation").data_options
    numbers += [*map(str, paper["train_k"]), *map(str, paper["test_k"])]
    runs = load_study(study, PRETRAINED_DIR)["runs"]
    learns = runs["method"].isin(["pondernet", "act"]) & runs["learn_halting"].ne(False)  # not the control
    adaptive = runs[runs["experiment"].str.endswith("extrapolation") & learns]
    holds["paper: PonderNet's and ACT's runs stopped once they fit"] = (
        adaptive["stopped_by"] == "stopping_threshold"
    ).all()
    extrapolation = per_run(study, "parity-paper16-extrapolation")
    numbers += [*seeds(extrapolation, "pondernet"), *seeds(extrapolation, "act"), "50%"]
    continued = load_study(study, PRETRAINED_DIR)["continued"]
    ends = continued.sort_values("updates").groupby(["method", "seed"])["unseen_accuracy"].last()
    last = continued.groupby(["method", "seed"])["updates"].max()
    assert last.nunique() == 1, "the continued runs end at different updates"
    numbers.append(f"{int(last.iloc[0]):,}")
    numbers += [pct(ends[("pondernet", s)]) for s in (0, 1)] + [pct(ends[("act", s)]) for s in (0, 1)]
    mark = 0.5 + RULES.learned
    numbers += ["1", f"{100 * mark:g}%", "96"]
    size = read_table(PRETRAINED_DIR / "studies" / paper_claims.STUDY / "runs.csv")
    numbers += [f"{paper_claims.UPDATES:,}", "64", "96"]
    holds["paper's sizes: both seeds of each method at 64 and 96, every run at chance on its ranges"] = set(
        zip(size["size"], size["method"], size["seed"])
    ) == paper_claims.RUNS and paper_claims.every_range_at_chance(size, PAPER)
    holds["paper: ACT's seed 1 is the best continued run, the only one above the mark"] = (
        ends.idxmax() == ("act", 1) and (ends > mark).sum() == 1
    )
    both = pd.concat([inter, extrapolation])
    draws = both.groupby("family")["coin_draws"].agg(set)
    holds["paper: PonderNet and the control are scored over the coin draws, ACT once"] = draws[
        "pondernet"
    ] == draws["control"] == {COIN_DRAWS} and draws["act"] == {0}

    # pointer chasing: the one-step network, PonderNet (λ_p = 0.5) and ACT
    pointer, setting = judge(per_run("pointer", "pointer-extrapolation"), 1 / 32)
    reference = pointer[pointer.index.str.startswith("PonderNet λ_p=0.5")].iloc[0]
    act = pointer[pointer["family"] == "act"].iloc[0]
    numbers += [pct(setting["one_step_accuracy"], 0), "0.5"]
    numbers += [span(reference["rho_low"], reference["rho_high"]), span(act["rho_low"], act["rho_high"])]
    holds["pointer: both follow the walk, ACT more closely"] = (
        reference["verdict"] == FOLLOWS == act["verdict"] and act["rho_low"] > reference["rho_high"]
    )
    # the halting heads on pointer chasing, with and without the exit bit: the design's runs and HRM's last epoch
    heads = {s: judge(per_run("halting-heads-pointer", POINTER, s), 1 / 32)[0] for s in ("test", "beyond")}
    plain = judge(per_run("halting-heads-noexit", POINTER, "test"), 1 / 32)[0]  # without the exit bit
    trm = per_run("halting-heads-pointer", POINTER, "beyond").query("family == 'trm'")
    per_step = load_study("halting-heads-pointer", PRETRAINED_DIR)["per_step"]
    trm_steps = per_step[per_step["method"] == "trm"].sort_values("seed")
    limit = [at_limit(steps, int(steps["step"].max()))["beyond"] for _, steps in trm_steps.groupby("seed")]
    numbers += [pct(a) for a in trm["accuracy"]] + [pct(a) for a in limit] + [str(trm_steps["step"].max())]
    test, beyond = heads["test"], heads["beyond"]
    adaptive = pd.concat([t[t["family"].isin(["pondernet", "act"])] for t in (test, plain)])
    holds[
        "heads: PonderNet and ACT solve the trained walks, TRM halts too early, HRM only at its last epoch"
    ] = (
        (adaptive["solves"] == True).all()  # noqa: E712 (None is not True)
        and beyond.loc["TRM's head", "solves"] is False
        and beyond.loc["TRM's head", "steps"] < get_experiment(POINTER).data_options["beyond_k"][0]
        and test.loc["HRM's head", "solves"] is False
        and test.loc["HRM's head (last epoch)", "solves"] is True
        and plain.loc["HRM's head", "solves"] is False
        and plain.loc["HRM's head (last epoch)", "solves"] is True
    )
    # the heads on the paper's parity: its budget, the fixed depth's seeds, TRM's and HRM's collapse
    parity_task = HEADS_TASKS["parity"][1]
    parity_runs = per_run("halting-heads-parity", parity_task["experiment"])
    parity, _ = judge(parity_runs, 1 / 2)
    fixed = parity_runs[parity_runs["family"] == "fixed"]
    budget = TrainConfig.from_options(**parity_task, method="pondernet")  # the task's N, as heads_runs
    numbers += [str(budget.epochs), str(budget.max_steps)] + [pct(a) for a in fixed["accuracy"]]
    numbers.append(f"{HeadRules().collapsed:g}")
    holds["heads: on parity no head that halts solves it; TRM's and HRM's seeds all stop within 2 steps"] = (
        (parity.loc[~parity["family"].isin(["fixed", "control"]), "solves"] == False).all()  # noqa: E712
        and len(fixed) == 3
        and (fixed["steps"] == budget.max_steps).all()
        and (
            parity_runs.loc[parity_runs["family"].isin(["trm", "hrm"]), "steps"] <= HeadRules().collapsed
        ).all()
    )
    return numbers, holds


def quoted(text: str) -> list[str]:
    """The numbers of the README's results, in order (an interval as one); the names of runs, tables,
    tests and links left out."""
    text = re.sub(r"`[^`]*`|\]\([^)]*\)|λ_p = |seed 0|ρ\(k, n\)", " ", text)
    found, pos = [], 0
    while match := NUMBER.search(text, pos):
        value, pos = match.group(0), match.end()
        for joint in ("–", " to "):  # an interval, as span() prints it: 0.88–0.90, −0.10 to 0.17
            tail = NUMBER.match(text, pos + len(joint)) if text.startswith(joint, pos) else None
            if tail and (joint == "–" or "." in value):
                value, pos = f"{value}{joint}{tail.group(0)}", tail.end()
        found.append(value)
    return found


@pytest.fixture(scope="module")
def results():
    return expected_results()


def test_every_number_of_the_results_is_the_tables(results):
    numbers, _ = results
    assert quoted(section("Results")) == numbers


def test_every_sentence_of_the_results_holds(results):
    _, holds = results
    assert [sentence for sentence, held in holds.items() if not held] == []


def test_the_gpu_figures_are_the_shipped_measurement():
    """The package section's GPU sentence gives what ``pretrained/gpu_fit.json`` records (it said "not
    yet timed on a GPU" after a GPU had timed it)."""
    import json

    gpu = json.loads((PRETRAINED_DIR / "gpu_fit.json").read_text())
    sentence = re.search(r"On one H200 .*?\)\.", section("The package and its command"), re.S)
    assert sentence, "the README's package section says what fit's fast path did on a GPU"
    mnist, own = gpu["samples_per_second"]["mnist-interpolation"], gpu["own_model_seconds"]
    expected = [f"{mnist['fast']:,}", f"{mnist['plain']:,}", f"{own['gpu_fast']:.1f}"]
    expected += [f"{own['gpu_plain']:.0f}", f"{own['cpu']:.0f}", str(own["cpu_cores"])]
    assert NUMBER.findall(sentence.group(0).replace("H200", "")) == expected
