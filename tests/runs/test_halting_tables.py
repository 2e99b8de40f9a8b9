"""The halting tables: how each run's steps follow the difficulty over fresh draws of its halting coins,
drawn once when the run is evaluated (and so when a study is shipped), reused while that evaluation
stands, and gathered into the study's ``halting.csv``, which every chapter reads.

Deliberate breaks these tests catch (each was tried):
- ``halting_up_to_date`` always False (the coins drawn again at every ``reproduce``):
  test_run_one_draws_the_coins_once;
- PonderNet's ``random_halting`` False (its interval would be one draw):
  test_only_random_halting_gets_coin_draws;
- ``halting_by_run`` correlating the difficulty with the accuracy instead of the steps, or the spread
  with ``ddof=1``: test_halting_by_run_by_hand;
- a shipped study without its halting table, or with tables drawn under other settings than the
  code's: test_every_shipped_study_with_a_difficulty_has_current_halting_tables.
"""

import json
import math

import pandas as pd
import pytest
from test_training import tiny as training_tiny

from pondernet_tutorial.analysis.verdicts import ONE_STEP, config_label, span
from pondernet_tutorial.runs.config import PRETRAINED_DIR
from pondernet_tutorial.runs.evaluation import COIN_DRAWS, evaluate_run, halting_by_run, halting_up_to_date
from pondernet_tutorial.runs.studies import Study, get_study, load_study, run_one, write_study_tables

K_STUDIES = (
    "parity-interpolation",
    "parity-extrapolation",
    "parity-paper16-long",
    "pointer",
    "pointer-noexit",
)


def tiny(tmp_path, **kwargs):
    """test_training's tiny parity run, one epoch."""
    return training_tiny(tmp_path, **{"epochs": 1, **kwargs})


def samples(seed, steps, k=(1, 2, 3, 4), correct=(1, 1, 1, 0)):
    return pd.DataFrame(
        {
            "seed": seed,
            "set": "test",
            "k": list(k),
            "halt_step": list(steps),
            "label": [0, 0, 0, 0],
            "prediction": [0 if c else 1 for c in correct],
        }
    )


def test_halting_by_run_by_hand():
    frame = pd.concat(
        [
            samples(0, [1, 2, 3, 4]),  # steps = k
            samples(1, [4, 3, 2, 1], correct=(1, 0, 0, 0)),  # the other way round
            samples(2, [3, 3, 3, 3]),  # one depth for every input
        ]
    )
    table = halting_by_run(frame, by=("seed", "set")).set_index("seed")
    assert table.loc[0, "rho"] == pytest.approx(1.0) and table.loc[1, "rho"] == pytest.approx(-1.0)
    assert math.isnan(table.loc[2, "rho"]) and table.loc[2, "spread"] == 0.0
    assert table.loc[0, "spread"] == pytest.approx(1.25**0.5)  # over the samples, ddof = 0
    assert table.loc[0, "steps"] == pytest.approx(2.5) and table.loc[1, "accuracy"] == pytest.approx(0.25)
    assert list(table["n"]) == [4, 4, 4] and list(table["set"]) == ["test"] * 3
    ties = halting_by_run(samples(0, [1, 1, 2, 2], k=(1, 2, 2, 3))).iloc[0]
    assert ties["rho"] == pytest.approx(0.5**0.5)  # Spearman with average ranks for ties


def test_run_one_draws_the_coins_once(tmp_path):
    config = tiny(tmp_path)
    assert run_one(config, limit=8, overwrite=False, reevaluate=False, threads=None)["done"] == "trained"
    path = config.run_dir / "halting.csv"
    table = pd.read_csv(path)
    per_sample = pd.read_csv(config.run_dir / "per_sample.csv.gz")
    assert len(table) == per_sample["set"].nunique() and (table["n"] == 8 * per_sample["k"].nunique()).all()
    assert (table["coin_draws"] == COIN_DRAWS).all()
    for name in ("accuracy", "rho"):
        drawn = table.dropna(subset=[f"{name}_low"])
        assert (drawn[f"{name}_low"] <= drawn[f"{name}_draws"] + 1e-9).all()
        assert (drawn[f"{name}_draws"] <= drawn[f"{name}_high"] + 1e-9).all()
    # the evaluation's own draw, beside the coin interval: what halting_by_run makes of the per-sample table
    by_hand = halting_by_run(per_sample, by=("set",)).set_index("set")
    assert table.set_index("set")["accuracy"].to_dict() == pytest.approx(
        by_hand["accuracy"].to_dict(), abs=1e-6
    )
    stamp = path.stat().st_mtime_ns
    assert run_one(config, limit=8, overwrite=False, reevaluate=False, threads=None)["done"] == "reused"
    assert path.stat().st_mtime_ns == stamp  # not drawn again
    (config.run_dir / "halting.json").unlink()  # an older release, without the record: drawn again,
    evaluated = (config.run_dir / "per_sample.csv.gz").stat().st_mtime_ns
    assert run_one(config, limit=8, overwrite=False, reevaluate=False, threads=None)["done"] == "reused"
    assert halting_up_to_date(config, limit=8)
    assert (config.run_dir / "per_sample.csv.gz").stat().st_mtime_ns == evaluated  # the tables are kept
    assert run_one(config, limit=4, overwrite=False, reevaluate=False, threads=None)["done"] == "evaluated"
    record = json.loads((config.run_dir / "halting.json").read_text())
    assert record["evaluation"]["limit"] == 4 and record["coin_draws"] == COIN_DRAWS
    assert (pd.read_csv(path)["n"] == 4 * per_sample["k"].nunique()).all()


def test_only_random_halting_gets_coin_draws(tmp_path):
    for config in (tiny(tmp_path, method="act"), tiny(tmp_path, method="fixed", max_steps=2)):
        run_one(config, limit=8, overwrite=False, reevaluate=False, threads=None)
        table = pd.read_csv(config.run_dir / "halting.csv")
        assert (table["coin_draws"] == 0).all()
        for name in ("accuracy", "rho"):  # the interval is the point: the same steps in every draw
            for end in ("low", "high", "draws"):
                assert table[f"{name}_{end}"].equals(table[name]) or table[name].isna().all()
    control = tiny(tmp_path, learn_halting=False)  # frozen halting still flips coins
    run_one(control, limit=8, overwrite=False, reevaluate=False, threads=None)
    assert (pd.read_csv(control.run_dir / "halting.csv")["coin_draws"] == COIN_DRAWS).all()


def test_the_study_table_gathers_every_runs_halting_table(tmp_path):
    study = Study("tiny", "two tiny runs", ({"method": "pondernet"}, {"method": "act"}), ship="all")
    configs = [tiny(tmp_path, method=m, seed=0) for m in ("pondernet", "act")]
    for config in configs:
        run_one(config, limit=8, overwrite=False, reevaluate=False, threads=None)
    write_study_tables(study, tmp_path, configs=configs)
    halting = load_study("tiny", tmp_path)["halting"]
    assert set(halting["method"]) == {"pondernet", "act"} and len(halting) == 2 * halting["set"].nunique()
    (configs[1].run_dir / "halting.csv").unlink()  # one run without: no study table, none left behind
    write_study_tables(study, tmp_path, configs=configs)
    assert "halting" not in load_study("tiny", tmp_path)


def test_per_sample_keeps_expected_steps_whole(tmp_path):
    config = tiny(tmp_path)
    run_one(config, limit=8, overwrite=False, reevaluate=False, threads=None)
    stored = pd.read_csv(config.run_dir / "per_sample.csv.gz")
    tables = evaluate_run(config, limit=8, overwrite=True)  # the same evaluation, in memory
    stored_again = pd.read_csv(config.run_dir / "per_sample.csv.gz")
    model = tables["per_sample"]["expected_steps"].to_numpy()
    assert len(set(model.round(3))) > 1  # E[n] varies over the inputs: the comparison below means something
    for table in (stored, stored_again):
        # every bit of the model's float32: a rank correlation with k ranks E[n] of nearly equal inputs
        assert (table["expected_steps"].to_numpy(dtype=model.dtype) == model).all()
        assert table["loss"].to_numpy() == pytest.approx(tables["per_sample"]["loss"].to_numpy(), rel=1e-3)


@pytest.mark.parametrize("name", K_STUDIES)
def test_every_shipped_study_with_a_difficulty_has_current_halting_tables(name):
    if not (PRETRAINED_DIR / "studies" / name / "study.json").is_file():
        pytest.skip(f"study {name} is not shipped in this checkout")
    tables = load_study(name)
    halting = tables["halting"]
    assert len(halting) == len(tables["runs"]) * halting["set"].nunique()
    sampled = halting["method"] == "pondernet"
    assert (halting.loc[sampled, "coin_draws"] == COIN_DRAWS).all() and (
        halting.loc[~sampled, "coin_draws"] == 0
    ).all()
    for config in get_study(name).configs(output_dir=str(PRETRAINED_DIR)):
        assert halting_up_to_date(config), f"{config.run_dir}: ship the study again (reproduce --ship)"


def test_one_label_per_configuration():
    assert config_label({"method": "pondernet", "lambda_p": 0.5}) == ("PonderNet λ_p=0.5", "pondernet")
    frozen = {"method": "pondernet", "lambda_p": 0.1, "learn_halting": False}
    assert config_label(frozen) == ("control (halting frozen at λ_p=0.1)", "control")
    one = {"method": "fixed", "max_steps": 1, "eval_max_steps": None, "step": "parity_gru"}
    assert config_label(one) == ("one step", ONE_STEP)
    cnn = {"method": "fixed", "max_steps": 1, "eval_max_steps": None, "step": "mnist_cnn"}
    assert config_label(cnn) == ("plain CNN", ONE_STEP)
    longer = {"method": "fixed", "max_steps": 10, "eval_max_steps": 20, "step": "pointer_attention"}
    assert config_label(longer) == ("fixed 10 steps (run for 20)", "fixed")
    assert config_label({"method": "act", "tau": 1e-3, "halting_bias": -3.0})[0] == "ACT τ=0.001 (bias −3)"
    assert (
        config_label({"method": "act", "tau": 1e-2, "halting_bias": None})[0] == "ACT τ=0.01 (default bias)"
    )
    uniform = {"method": "pondernet", "lambda_p": 0.2, "prior": "uniform"}  # λ_p unused: not in its name
    assert config_label(uniform) == ("PonderNet uniform prior", "pondernet")
    assert config_label({"method": "trm", "max_steps": 20}) == ("TRM's head", "trm")
    assert config_label({"method": "hrm", "max_steps": 20}) == ("HRM's head", "hrm")
    last = {"method": "hrm", "max_steps": 20, "select_by": "epoch"}  # its last epoch's weights kept
    assert config_label(last) == ("HRM's head (last epoch)", "hrm")
    # on the tasks with a difficulty, the label tells every configuration of a study apart, and the seeds
    # of one configuration share it
    for name in K_STUDIES:
        if not (PRETRAINED_DIR / "studies" / name / "study.json").is_file():
            continue
        runs = load_study(name)["runs"]
        labels = {}
        for _, run in runs.iterrows():
            record = json.loads((PRETRAINED_DIR / run["path"] / "metadata.json").read_text())
            labels.setdefault((run["experiment"], run["variant"]), set()).add(
                config_label(record["config"])[0]
            )
        assert all(len(names) == 1 for names in labels.values())
        for experiment in runs["experiment"].unique():
            names = [next(iter(v)) for (e, _), v in labels.items() if e == experiment]
            assert len(names) == len(set(names)), (name, names)


def test_span():
    assert span(0.8234, 0.9012) == "0.82–0.90"
    assert span(0.9001, 0.9049) == "0.90"  # both ends round alike: one number
    assert span(-0.55, 0.1) == "−0.55 to 0.10"
