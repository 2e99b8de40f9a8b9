"""Studies: their runs, quick subsets, shared run folders, and what is shipped."""

import json

import pytest
from stand_in_tables import write_run_tables

from pondernet_tutorial.runs.config import WEIGHTS
from pondernet_tutorial.runs.studies import STUDIES, get_study, prune_for_shipping


def test_studies_name_distinct_runs_and_the_grid_has_its_own_budget():
    reference = {c.run_dir for c in get_study("mnist-reference").configs()}
    grid = {c.run_dir for c in get_study("mnist-grid").configs()}
    assert len(reference) == 6 and len(grid) == 16 + 2 * 6  # β = 0 once: λ_p changes nothing there
    assert not reference & grid  # a shorter budget is another configuration, in another folder
    cell = [
        c
        for c in get_study("mnist-grid").configs()
        if (c.method_options["lambda_p"], c.method_options["beta"]) == (0.2, 0.01)
    ]
    same = [c for c in get_study("mnist-reference").configs() if c.experiment == cell[0].experiment]
    assert [c.epochs for c in cell] == [5] * 3 and [c.epochs for c in same] == [20] * 3
    assert cell[0].identity() | {"epochs": 20} == same[0].identity()  # the budget is the only difference
    parity = get_study("parity-interpolation").configs() + get_study("parity-extrapolation").configs()
    assert len({c.run_dir for c in parity}) == len(parity) == 2 * 8 * 3


def test_quick_mode_takes_seed_zero_and_the_quick_subset():
    quick = get_study("mnist-grid").configs(quick=True)
    assert len(quick) == 4 and {c.seed for c in quick} == {0}
    assert all(c.quick and c.variant.endswith("-quick") for c in quick)
    assert len(get_study("parity-extrapolation").configs(quick=True)) == 8


def test_unknown_study():
    with pytest.raises(ValueError, match="mnist-reference"):
        get_study("everything")


def test_pruning_keeps_what_the_studies_ship(tmp_path):
    grid, reference = STUDIES["mnist-grid"], STUDIES["mnist-reference"]
    for study in (grid, reference):
        for config in study.configs(output_dir=str(tmp_path)):
            config.run_dir.mkdir(parents=True, exist_ok=True)
            for name in (WEIGHTS, "per_sample.csv.gz", "summary.csv", "metadata.json"):
                (config.run_dir / name).write_text("x")
            (config.run_dir / "logs").mkdir(exist_ok=True)
    prune_for_shipping([grid, reference], tmp_path)
    grid_only = [c.run_dir for c in grid.configs(output_dir=str(tmp_path))]
    assert len(grid_only) == 28
    assert all(not (d / WEIGHTS).exists() and not (d / "per_sample.csv.gz").exists() for d in grid_only)
    assert all((d / "summary.csv").exists() and not (d / "logs").exists() for d in grid_only)
    for config in reference.configs(output_dir=str(tmp_path)):  # shipped whole
        assert (config.run_dir / WEIGHTS).exists() and (config.run_dir / "per_sample.csv.gz").exists()


def test_a_rerun_that_trains_nothing_keeps_the_sweeps_wall_time(tmp_path, monkeypatch):
    from pondernet_tutorial.runs import studies

    seconds = {"value": 7.0}
    written = []
    monkeypatch.setattr(
        studies, "run_one", lambda c, *a: {"run_dir": str(c.run_dir), "seconds": seconds["value"]}
    )

    def write(study, root, quick, configs=None, **info):
        folder = root / "studies" / study.name
        folder.mkdir(parents=True, exist_ok=True)
        record = {"quick": quick, "n_runs": len(study.configs(quick)), **info}
        (folder / "study.json").write_text(studies.json.dumps(record))
        written.append(info)

    monkeypatch.setattr(studies, "write_study_tables", write)
    studies.reproduce(["mnist-refine"], output_dir=tmp_path)
    assert written[-1]["run_seconds"] == 21.0  # three seeds trained
    sweep = written[-1]["command_wall_time_s"]
    seconds["value"] = 0.0  # everything reused: the record of the sweep stays
    studies.reproduce(["mnist-refine"], output_dir=tmp_path)
    assert written[-1]["run_seconds"] == 21.0 and written[-1]["command_wall_time_s"] == sweep


def _fake_run(config, *args):
    """A run's folder as training and evaluation leave it, without training: its record and tables."""
    config.run_dir.mkdir(parents=True, exist_ok=True)
    (config.run_dir / "metadata.json").write_text(
        json.dumps({"identity": config.identity(), "epochs_run": 1})
    )
    write_run_tables(config.run_dir)
    return {"run_dir": str(config.run_dir), "seconds": 1.0}


def test_reproduce_builds_its_plan_once_with_the_shared_options(tmp_path, monkeypatch):
    """``reproduce(precision=...)`` trains into ``...-precision=bf16-mixed`` folders; the study's tables and
    its wall-time record must name those runs, not the runs without the shared option (a KeyError before
    the plan was built once)."""
    from pondernet_tutorial.runs import studies

    trained = []
    monkeypatch.setattr(studies, "run_one", lambda c, *a: trained.append(c) or _fake_run(c))
    tables = studies.reproduce(["mnist-refine"], output_dir=tmp_path, quick=True, precision="bf16-mixed")
    assert len(trained) == 1 and "precision=bf16-mixed" in trained[0].variant
    runs = tables["mnist-refine"]["runs"]
    assert list(runs["path"]) == [trained[0].run_dir.relative_to(tmp_path).as_posix()]
    record = json.loads((tmp_path / "studies" / "mnist-refine" / "study.json").read_text())
    assert record["run_seconds"] == 1.0 and record["n_runs"] == 1


def test_reproduce_on_the_command_line_with_a_shared_option(tmp_path, monkeypatch):
    from pondernet_tutorial.runs import studies
    from pondernet_tutorial.runs.cli import main

    monkeypatch.setattr(studies, "run_one", lambda c, *a: _fake_run(c))
    args = ["reproduce", "--study", "mnist-refine", "--quick", "--output-dir", str(tmp_path)]
    assert main([*args, "--precision", "bf16-mixed", "--devices", "1", "--accelerator", "cpu"]) == 0
    runs = (tmp_path / "studies" / "mnist-refine" / "runs.csv").read_text()
    assert "precision=bf16-mixed" in runs


def test_shipping_prunes_the_planned_runs(tmp_path):
    reference = STUDIES["mnist-reference"]
    plan = {reference.name: reference.configs(output_dir=str(tmp_path), precision="bf16-mixed")}
    for config in plan[reference.name]:
        config.run_dir.mkdir(parents=True)
        (config.run_dir / "logs").mkdir()
    prune_for_shipping([reference], tmp_path, plan)
    assert all(not (c.run_dir / "logs").exists() for c in plan[reference.name])
