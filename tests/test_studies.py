"""Studies: their runs, quick subsets, shared run folders, and what is shipped."""

import pytest

from pondernet_tutorial.studies import STUDIES, get_study, prune_for_shipping


def test_studies_name_distinct_runs_and_the_grid_has_its_own_budget():
    reference = {c.run_dir for c in get_study("mnist-reference").configs()}
    grid = {c.run_dir for c in get_study("mnist-grid").configs()}
    assert len(reference) == 6 and len(grid) == 16 + 2 * 6  # β = 0 once: λ_p changes nothing there
    assert not reference & grid  # a shorter budget is another configuration, in another folder
    cell = [c for c in get_study("mnist-grid").configs() if (c.lambda_p, c.beta) == (0.2, 0.01)]
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
            for name in ("model.pt", "per_sample.csv.gz", "summary.csv", "metadata.json"):
                (config.run_dir / name).write_text("x")
            (config.run_dir / "logs").mkdir(exist_ok=True)
    prune_for_shipping([grid, reference], tmp_path)
    grid_only = [c.run_dir for c in grid.configs(output_dir=str(tmp_path))]
    assert len(grid_only) == 28
    assert all(not (d / "model.pt").exists() and not (d / "per_sample.csv.gz").exists() for d in grid_only)
    assert all((d / "summary.csv").exists() and not (d / "logs").exists() for d in grid_only)
    for config in reference.configs(output_dir=str(tmp_path)):  # shipped whole
        assert (config.run_dir / "model.pt").exists() and (config.run_dir / "per_sample.csv.gz").exists()


def test_a_rerun_that_trains_nothing_keeps_the_sweeps_wall_time(tmp_path, monkeypatch):
    from pondernet_tutorial import studies

    seconds = {"value": 7.0}
    written = []
    monkeypatch.setattr(
        studies, "run_one", lambda c, *a: {"run_dir": str(c.run_dir), "seconds": seconds["value"]}
    )

    def write(study, root, quick, **info):
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
