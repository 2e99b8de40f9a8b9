"""Studies: their runs, quick subsets, shared run folders, and what is shipped."""

import pytest

from pondernet_tutorial.studies import STUDIES, get_study, prune_for_shipping


def test_studies_name_distinct_runs_and_share_the_reference():
    reference = {c.run_dir for c in get_study("mnist-reference").configs()}
    grid = {c.run_dir for c in get_study("mnist-grid").configs()}
    assert len(reference) == 6 and len(grid) == 16 + 2 * 6  # β = 0 once: λ_p changes nothing there
    shared = reference & grid
    assert len(shared) == 3 and all(
        "mnist-extrapolation" in str(p) for p in shared
    )  # the grid's reference cell
    parity = get_study("parity").configs()
    assert len({c.run_dir for c in parity}) == len(parity) == 2 * 8 * 3


def test_quick_mode_takes_seed_zero_and_the_quick_subset():
    quick = get_study("mnist-grid").configs(quick=True)
    assert len(quick) == 4 and {c.seed for c in quick} == {0}
    assert all(c.quick and c.variant.endswith("-quick") for c in quick)
    assert len(get_study("parity").configs(quick=True)) == 16


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
    grid_only = [
        c.run_dir for c in grid.configs(output_dir=str(tmp_path)) if (c.lambda_p, c.beta) != (0.2, 0.01)
    ]
    assert len(grid_only) == 25
    assert all(not (d / "model.pt").exists() and not (d / "per_sample.csv.gz").exists() for d in grid_only)
    assert all((d / "summary.csv").exists() and not (d / "logs").exists() for d in grid_only)
    for config in reference.configs(output_dir=str(tmp_path)):  # shared with the grid: kept whole
        assert (config.run_dir / "model.pt").exists() and (config.run_dir / "per_sample.csv.gz").exists()
