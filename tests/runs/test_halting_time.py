"""``benchmarks/halting_time.py``: the time halting saves, read three ways from one shipped run. The
times are the machine's; what is tested is that the three readings are the run's own, the
accuracies its evaluation tables hold on the same samples.

Deliberate breaks these tests catch (each was tried):
- early exit without the set's seeded coins (``infer`` with no generator):
  test_the_readings_are_the_evaluations;
- the full unroll's answer read one step early (``logits[-2]``): test_the_readings_are_the_evaluations;
- the fixed depth cut one step short (``range(depth - 1)``): test_the_readings_are_the_evaluations;
- the mean halting step rounded down: test_the_readings_are_the_evaluations.
"""

import math
import sys
from pathlib import Path

import pandas as pd
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import halting_time  # noqa: E402

from pondernet_tutorial.untrusted import read_table  # noqa: E402

RUN = halting_time.QUICK_RUN
# the paper's parity: its steps' accuracies differ from step to step, pointer chasing's reach 1
PARITY = RUN.parents[2] / "parity-paper16-interpolation"
PARITY = PARITY / "pondernet-lambda_p=0.1-beta=0.01-epochs=500-early_stopping_patience=100" / "seed0"


def test_the_readings_are_the_evaluations():
    """On every sample of the paper's parity: early exit is per_sample.csv, the full unroll
    per_step's last row, the fixed depth per_step's row at the mean halting step rounded up."""
    table = halting_time.measure(PARITY, batch_sizes=[4000], samples=0, repeats=1)
    per_sample = read_table(PARITY / "per_sample.csv.gz")
    per_step = read_table(PARITY / "per_step.csv").set_index(["set", "step"])["accuracy"]
    rows = table.set_index(["set", "mode"])
    for name, samples in per_sample.groupby("set"):
        early, full, fixed = (rows.loc[(name, mode)] for mode in halting_time.MODES)
        assert early["n"] == len(samples)
        assert early["accuracy"] == pytest.approx(
            (samples["prediction"] == samples["label"]).mean(), abs=1e-9
        )
        assert early["steps"] == pytest.approx(samples["halt_step"].mean())
        last = per_step.loc[name].index.max()
        assert full["steps"] == last == 100  # the paper's budget at evaluation
        assert full["accuracy"] == pytest.approx(per_step.loc[(name, last)], abs=1e-6)
        depth = math.ceil(samples["halt_step"].mean())
        assert fixed["steps"] == depth < last
        assert fixed["accuracy"] == pytest.approx(per_step.loc[(name, depth)], abs=1e-6)


def test_quick_mode_writes_its_table(tmp_path, capsys):
    path = tmp_path / "times.csv"
    halting_time.main(["--quick", "--csv", str(path)])
    table = pd.read_csv(path)
    assert len(table) == 2 * 2 * 3  # two sets, the loader's batch size and 1, three readings
    assert sorted(table["batch_size"].unique()) == [1, 128] and (table["n"] == 32).all()
    assert (table["ms_per_1000"] > 0).all() and (table["repeats"] == 2).all()
    full = table[table["mode"] == "full unroll"]
    assert (full["time_vs_full"] == 1).all() and (full["steps"] == 20).all()
    assert "early exit" in capsys.readouterr().out


def test_a_study_times_seed_0_of_every_head_that_halts_by_itself():
    heads = halting_time.study_heads("halting-heads-pointer")
    names = {folder.parent.name for folder, _ in heads}
    assert {folder.name for folder, _ in heads} == {"seed0"} and len(heads) == len(names) == 7
    assert all(config.seed == 0 and config.batch_size == 128 for _, config in heads)
    assert not any(name.startswith("fixed") or "learn_halting=false" in name for name in names)
    assert {"trm", "hrm", "hrm-select_by=epoch", "pondernet-beta=0.01-prior=uniform"} <= names


def test_a_bad_request_is_one_line(tmp_path, capsys):
    for request in (
        [str(tmp_path / "a" / "b" / "seed0")],
        [str(RUN), "--sets", "nowhere"],
        ["--study", "none"],
    ):
        with pytest.raises(SystemExit) as stop:
            halting_time.main(request)
        assert stop.value.code == 2
        error = capsys.readouterr().err
        assert error.count("\n") == 1 and any(
            why in error for why in ("metadata.json", "no test set nowhere", "unknown study 'none'")
        )


def test_a_study_written_to_a_csv_replaces_its_own_rows_and_keeps_the_others(tmp_path, monkeypatch):
    def measured(study, samples, repeats, device):  # the study's table, without timing anything
        return pd.DataFrame(
            {"study": [study], "run": ["r"], "method": ["act"], "set": ["test"], "batch_size": [1],
             "mode": ["early exit"], "steps": [1.0], "accuracy": [1.0], "n": [1], "ms_per_1000": [1.0],
             "time_vs_full": [0.5], "device": ["cpu"], "threads": [1], "repeats": [repeats]}
        )  # fmt: skip

    monkeypatch.setattr(halting_time, "measure_study", measured)
    path = tmp_path / "times.csv"
    halting_time.main(["--study", "one", "--repeats", "2", "--csv", str(path)])
    halting_time.main(["--study", "two", "--csv", str(path)])
    halting_time.main(["--study", "one", "--repeats", "3", "--csv", str(path)])  # measured again
    table = pd.read_csv(path)
    assert list(table["study"]) == ["two", "one"] and list(table["repeats"]) == [5, 3]


def test_a_csv_that_cannot_take_the_study_is_refused_before_anything_is_timed(tmp_path, monkeypatch, capsys):
    def measured(*args):
        raise AssertionError("timed before the --csv file was checked")

    monkeypatch.setattr(halting_time, "measure_study", measured)
    (tmp_path / "folder.csv").mkdir()  # not a regular file
    (tmp_path / "other.csv").write_text("run,steps\nr,1\n")  # no study column: not the study table
    for name in ("folder.csv", "other.csv"):
        with pytest.raises(SystemExit) as stop:
            halting_time.main(["--study", "one", "--csv", str(tmp_path / name)])
        assert stop.value.code == 2 and capsys.readouterr().err.count("\n") == 1
    assert (tmp_path / "other.csv").read_text() == "run,steps\nr,1\n"  # left as it was
