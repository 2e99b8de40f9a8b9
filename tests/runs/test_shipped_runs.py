"""Every shipped run, asked for by name, is the folder it was shipped in and scores as it was shipped.

A run in ``pretrained/<experiment>/<variant>/seed<k>`` is asked for as a reader asks: the method and
the options on which its recorded identity (``metadata.json``) differs from the experiment's defaults,
given to :func:`load_pretrained`; and as the study that ships it declares it (:class:`Study`'s
``TrainConfig``). Both requests must name that very folder and the identity it records, and the model
loaded by name must score as shipped on a slice of each test set, row by row against the shipped
``per_sample.csv.gz``:

- the first ``PREFIX`` samples: the label, prediction, halting step and E[n]. PonderNet's coins come
  from one generator per set, seeded with the evaluation's seed and drawn row by row in sample order
  (:func:`~pondernet_tutorial.halting.halting_uniforms`), so these rows draw the same coins as in the
  whole set;
- ``SPREAD`` samples spread evenly over the set (parity's and the pointer task's sets are sorted by
  ``k``, so the first rows are the easiest): E[n], which draws no coin, and the prediction and halting
  step of the methods that draw none. PonderNet's halting step there would need the coins of the rows
  that the slice skips.

The table keeps E[n] to 9 significant digits (a float32 whole: 24 of the 110 tables), or, in those
written before it did, to 4 (86); a new E[n] may differ from it by that rounding and by the float error
of another batch size (:data:`FLOAT_NOISE`); the label, prediction and halting step must be equal. The
21 runs that ship no per-sample table (the MNIST baselines, ablations and refinement) are scored on
their first test set whole, against its row of ``summary.csv``, as ``tools/check_shipped_weights.py``
scores every set of every run (slowly).

Deliberate breaks these tests catch (each was tried): the folder naming its options in another order
(``variant``: every run named by more than its method's options); a default of an experiment changed
(pointer's ``grad_clip``: every pointer run; its ``lambda_p``: no study declares the λ_p = 0.5 runs);
a field added to the identity (``compile``); one weight of a run changed by 0.001 to 0.1 (PonderNet's
E[n], ACT's predictions, an MNIST baseline's accuracy).
"""

from __future__ import annotations

import dataclasses
import importlib.util
import json
from functools import cache
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

import pondernet_tutorial
from pondernet_tutorial.runs.checkpoints import load_pretrained
from pondernet_tutorial.runs.config import TrainConfig
from pondernet_tutorial.runs.evaluation import evaluate, load_run_tables, summarize
from pondernet_tutorial.runs.studies import STUDIES
from pondernet_tutorial.threads import training_threads
from pondernet_tutorial.untrusted import read_json

SHIPPED = Path(pondernet_tutorial.__file__).parent / "pretrained"
RUNS = sorted(model.parent for model in SHIPPED.glob("**/seed*/model.safetensors"))
PREFIX = SPREAD = 64
COINLESS = ("act", "fixed")  # the methods whose answer draws no coin: ACT's N(x), the fixed k
# E[n] of a batch of 64 against one of 2,000, beyond the table's rounding, relative to max(E[n], 1):
# 1.8e-7 at most over every run's slices (1.5 float32 ulps); allowed 1e-6
FLOAT_NOISE = 1e-6
NAMED_BY = ("experiment", "method", "seed")  # load_pretrained's own arguments


def _tool():
    """tools/check_shipped_weights.py, whose test sets and summary comparison this test shares."""
    path = Path(__file__).resolve().parents[2] / "tools" / "check_shipped_weights.py"
    spec = importlib.util.spec_from_file_location("check_shipped_weights", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


CHECK = _tool()


@pytest.fixture(autouse=True, scope="module")
def _threads():
    """One thread on two cores, as a training: two wait for each other on a loaded machine (6x slower)."""
    with training_threads():
        yield


def _plain(value):
    return json.loads(json.dumps(value))


def reader_request(identity: dict) -> dict:
    """The method and options a reader names the run by: where its identity differs from the defaults
    of its experiment and method."""
    experiment, method = identity["experiment"], identity["method"]
    defaults = _plain(TrainConfig(experiment=experiment, method=method).identity())
    # a step function's options are told where they differ from its own defaults
    defaults["step_options"] = TrainConfig(
        experiment=experiment, method=method, step=identity["step"]
    ).step_options
    options = {k: v for k, v in identity.items() if k not in NAMED_BY and v != defaults.get(k, ...)}
    return {**{k: identity[k] for k in NAMED_BY}, **options}


@cache
def study_configs() -> dict[Path, list[tuple[str, TrainConfig]]]:
    """The runs that the studies ship with their weights, by the folder their configuration names. A
    study's runs may land before its tables: a study trained over several sessions ships each finished
    run as it ends (a session's machine keeps nothing), and its tables once the last one is in."""
    named: dict[Path, list] = {}
    for study in STUDIES.values():
        if study.ship != "tables":
            for config in study.configs(output_dir=str(SHIPPED)):
                named.setdefault(config.run_dir.resolve(), []).append((study.name, config))
    return named


def rows(eval_set, picked: torch.Tensor):
    """The picked rows of a test set, with their own facts (parity's ``k``)."""
    return dataclasses.replace(
        eval_set,
        inputs=eval_set.inputs[picked],
        labels=eval_set.labels[picked],
        per_sample={name: values[picked] for name, values in eval_set.per_sample.items()},
    )


def scored(module, sets: list, picks: list[torch.Tensor], seed: int) -> pd.DataFrame:
    """``evaluate`` on the picked rows of each set, indexed by ``(set, index)`` in the whole set."""
    per_sample, _ = evaluate(module, [rows(s, p) for s, p in zip(sets, picks)], seed)
    per_sample["index"] = torch.cat(picks).numpy()
    return per_sample.set_index(["set", "index"])


def half_unit(values: np.ndarray, digits: int) -> np.ndarray:
    """Half a unit of the last of ``digits`` significant digits of each value."""
    return 0.5 * 10.0 ** (np.floor(np.log10(np.abs(values).clip(min=1e-30))) - (digits - 1))


def kept_digits(shipped: pd.Series) -> int:
    """The significant digits the table keeps of E[n]: 9 (a float32 whole), or 4 in the tables written
    before E[n] was kept whole (``%.4g``), where no value has more."""
    values = shipped.to_numpy(float)
    rounded = np.round(values / (2 * half_unit(values, 4))) * 2 * half_unit(values, 4)
    return 4 if np.allclose(rounded, values, rtol=1e-12, atol=0) else 9


def differences(new: pd.DataFrame, shipped: pd.DataFrame, exact: list[str]) -> list[str]:
    """Each row and column of ``new`` that differs from the shipped table's row of the same sample;
    E[n] by more than the table's rounding and :data:`FLOAT_NOISE`."""
    old = shipped.loc[new.index]
    found = [
        f"{where} {column}: {a} shipped {b}"
        for column in exact
        for where, a, b in zip(new.index, new[column], old[column])
        if a != b
    ]
    a, b = new["expected_steps"].to_numpy(float), old["expected_steps"].to_numpy(float)
    allowed = half_unit(b, kept_digits(shipped["expected_steps"])) + FLOAT_NOISE * np.maximum(np.abs(b), 1)
    far = np.abs(a - b) > allowed
    found += [
        f"{where} expected_steps: {x!r} shipped {y!r}" for where, x, y in zip(new.index[far], a[far], b[far])
    ]
    return found


@pytest.mark.slow
@pytest.mark.parametrize("folder", RUNS, ids=[str(run.relative_to(SHIPPED)) for run in RUNS])
def test_a_shipped_run_asked_for_by_name_is_its_folder_and_scores_as_shipped(folder):
    metadata, record = read_json(folder / "metadata.json"), read_json(folder / "evaluation.json")
    recorded = metadata["identity"]
    request = reader_request(recorded)
    config = TrainConfig.from_options(**request, output_dir=str(SHIPPED))
    named = config.run_dir.resolve()
    assert named == folder.resolve(), f"{request} names {named.relative_to(SHIPPED.resolve())}"
    assert _plain(config.identity()) == recorded
    shipping = study_configs().get(folder.resolve(), [])
    assert shipping, f"no study ships {folder.relative_to(SHIPPED)} with its weights"
    for study, declared in shipping:
        assert _plain(declared.identity()) == recorded, f"study {study} declares another run"

    module = load_pretrained(**request)
    sets = CHECK.shipped_test_sets(config, record, folder)
    tables = load_run_tables(folder, per_sample=True)
    seed = record["seed"]
    if "per_sample" not in tables:  # the first set whole, against its row of summary.csv
        new = summarize(evaluate(module, sets[:1], seed)[0])
        summary = tables["summary"]
        shipped = summary[summary["set"] == sets[0].name].reset_index(drop=True)
        relative = CHECK.relative_differences(new, shipped)
        assert all(d <= CHECK.TOLERANCE for d in relative.values()), relative
        return
    shipped = tables["per_sample"].set_index(["set", "index"])
    facts = ["label", *sets[0].per_sample]  # the samples' own facts: the same samples
    prefix = scored(module, sets, [torch.arange(min(PREFIX, len(s.labels))) for s in sets], seed)
    spread = [torch.linspace(0, len(s.labels) - 1, SPREAD).round().long().unique() for s in sets]
    coinless = ["prediction", "halt_step"] if config.method in COINLESS else []
    found = differences(prefix, shipped, [*facts, "prediction", "halt_step"])
    found += differences(scored(module, sets, spread, seed), shipped, [*facts, *coinless])
    assert not found, f"{len(found)} differences: " + "; ".join(found[:5])


def test_every_run_that_a_study_ships_with_its_weights_is_shipped():
    missing = [str(folder) for folder in study_configs() if folder not in {run.resolve() for run in RUNS}]
    assert not missing, missing


def test_the_shipped_weights_are_safetensors_and_nothing_else():
    """Every shipped model is a safetensors file (data); no pickle (``*.pt``, ``*.ckpt``) is shipped."""
    assert not [*SHIPPED.rglob("*.pt"), *SHIPPED.rglob("*.ckpt")]
    assert len(RUNS) == len(list(SHIPPED.rglob("seed*/model.safetensors"))) > 100


def test_load_pretrained_examples_load_and_a_missing_run_lists_its_neighbours():
    """The docstring's examples load (one asked for a run that is not shipped), and a run that is not
    shipped is refused with the runs of the same experiment and method, not every shipped run."""
    import re

    from pondernet_tutorial.runs.checkpoints import CheckpointError, load_pretrained

    examples = re.findall(r"``(load_pretrained\(.*?\))``", load_pretrained.__doc__)
    assert len(examples) == 2
    for example in examples:
        assert not eval(example, {"load_pretrained": load_pretrained}).training
    with pytest.raises(CheckpointError) as error:
        load_pretrained("parity-extrapolation", "act", seed=1, tau=0.01)
    assert "act-tau=0.001 (seeds 0, 1, 2)" in str(error.value) and "pondernet-lambda_p" not in str(
        error.value
    )
