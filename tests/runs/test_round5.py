"""Round 5 of attacks on what the package reads (a helper session's review at b5ab042): a results
folder, a study table, a run folder, a model file or the MNIST folder that makes the package write or
read outside its folder, take gigabytes or hang, or stop with a traceback. Each test failed on the
code before the change, as the closing note of this stop tells (the round-4 tests are in
test_round4.py).
"""

from __future__ import annotations

import json
import os
import resource
import sys
from pathlib import Path

import pandas as pd
import pytest
import tiny_parity
import torch
from test_faults import reproduce_tiny, tiny_study  # noqa: F401 (a fixture)
from test_round4 import QUIET, data, one_error_line, tiny_model_file
from test_untrusted_runs import time_limit

from pondernet_tutorial.analysis.notebook import load_json, load_table
from pondernet_tutorial.checkpointing import FolderCheckpoint
from pondernet_tutorial.data.mnist import MNISTDamagedError, download_mnist
from pondernet_tutorial.fitting import fit
from pondernet_tutorial.runs import cli
from pondernet_tutorial.runs.checkpoints import load_model
from pondernet_tutorial.runs.config import identity_differences
from pondernet_tutorial.runs.files import remove_inside
from pondernet_tutorial.runs.resume import _check_unfinished_folder, read_history
from pondernet_tutorial.untrusted import CheckpointError, DamagedFileError, read_json, read_table


def nested(depth: int):
    value = 1
    for _ in range(depth):
        value = [value]
    return value


@pytest.mark.parametrize(
    "linked, refused",
    [
        # 1: reproduce wrote the study's tables, locked and unlinked files through a `studies` link
        ("studies", "study folder"),
        # 2: the run's lock and its folder were made through the link before train() refused it
        ("parity-interpolation", "run folder"),
    ],
)
def test_1_2_a_results_folder_reached_through_a_link_is_refused_before_any_run(
    tmp_path,
    tiny_study,  # noqa: F811
    linked,
    refused,
):
    results, victim = tmp_path / "results", tmp_path / "victim"
    results.mkdir()
    victim.mkdir()
    (results / linked).symlink_to(victim)
    with pytest.raises(FileExistsError, match=f"{refused} .* is a symbolic link"):
        reproduce_tiny(results)
    assert list(victim.iterdir()) == []
    if linked == "studies":  # refused before any run was trained
        assert sorted(p.name for p in results.iterdir()) == ["studies"]


@pytest.mark.parametrize("path", ["../secret", "/tmp", "a/../../secret"])
def test_3_a_runs_table_that_names_a_folder_outside_its_root_is_refused(tmp_path, path):
    (tmp_path / "secret").mkdir()
    (tmp_path / "secret" / "history.csv").write_text("user,token\nalice,SECRET\n")
    root = tmp_path / "results"
    root.mkdir()
    runs = pd.DataFrame([{"path": path, "experiment": "x", "variant": "v", "method": "m", "seed": 0}])
    with pytest.raises(DamagedFileError, match="names a run folder outside it"):
        load_table(root, runs, "history.csv")
    with pytest.raises(DamagedFileError, match="names a run folder outside it"):
        load_json(root, runs.iloc[0], "history.csv")


def test_4_records_nested_too_deep_are_damaged_not_a_recursion_error(tmp_path, capsys):
    deep = tmp_path / "metadata.json"
    deep.write_text(json.dumps({"identity": {"x": nested(700)}}))
    assert read_json(deep) is None
    model = tiny_model_file(tmp_path, lambda hparams, state: hparams["step_options"].update(x=nested(400)))
    with pytest.raises(CheckpointError, match="nested at most 32 deep"):
        load_model(model)
    assert cli.main(["evaluate", "--checkpoint", str(model), "--experiment", "parity-interpolation"]) == 2
    one_error_line(capsys)


def test_4_a_run_folder_nested_too_deep_or_looping_is_one_error(tmp_path, request):
    """os.walk and shutil.rmtree recurse once per level, and resolve() raises on a loop of links. At
    Python's default recursion limit: a process that compiled a step runs at Inductor's 2,000, where
    1,100 levels are walked and deleted (a test of the same worker had compiled, and this one failed)."""
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(1000)
    request.addfinalizer(lambda: sys.setrecursionlimit(limit))
    deep = tmp_path / "deep"
    folder = (
        deep / "logs" / "wandb" / "offline-run-20261129_193624-thq0hdkt"
    )  # a wandb run's folder: names of any kind below it
    folder.mkdir(parents=True)
    for _ in range(1100):  # one level at a time: mkdir(parents=True) recurses too
        folder = folder / "a"
        os.mkdir(folder)
    try:
        with pytest.raises(CheckpointError, match="nest too deep"):
            _check_unfinished_folder(deep)
        with pytest.raises(FileExistsError, match="nested too deep to delete"):
            remove_inside(deep, tmp_path)
    finally:  # one level at a time, deepest first: pytest's own clean-up of tmp_path would recurse
        while folder != deep / "logs" / "wandb":
            os.rmdir(folder)
            folder = folder.parent
    loop = tmp_path / "loop"
    (loop / "logs").mkdir(parents=True)
    (loop / "logs" / "loop").symlink_to(loop / "logs" / "loop")  # no link is followed, nor resolved
    with pytest.raises(CheckpointError, match="logs/loop is a symbolic link outside wandb's logs"):
        _check_unfinished_folder(loop)
    (loop / "logs" / "loop").unlink()
    (loop / "logs" / "wandb").mkdir()
    (loop / "logs" / "wandb" / "loop").symlink_to(loop / "logs" / "wandb" / "loop")
    _check_unfinished_folder(loop)  # wandb's tree: its links are wandb's, never followed


def test_6_a_model_header_whose_method_is_a_dictionary_is_one_line(tmp_path, capsys):
    model = tiny_model_file(tmp_path, lambda hparams, state: hparams.update(method={"partial": "pondernet"}))
    assert cli.main(["evaluate", "--checkpoint", str(model), "--experiment", "parity-interpolation"]) == 2
    one_error_line(capsys)


@pytest.mark.parametrize(
    "metadata",
    [{"config": {"experiment": ["x"]}}, {"config": {"experiment": "parity-interpolation"}, "hparams": [1]}],
)
def test_7_8_metadata_of_the_wrong_types_beside_a_model_is_one_line(tmp_path, metadata, capsys):
    model = tiny_model_file(tmp_path)
    (tmp_path / "metadata.json").write_text(json.dumps(metadata))
    assert cli.main(["evaluate", "--checkpoint", str(model)]) == 2
    one_error_line(capsys)


def test_9_a_saved_identity_that_is_no_dictionary_differs_in_every_field():
    assert identity_differences([1], {"lr": 0.1}) == ["lr: saved '(absent)', requested 0.1"]


def test_10_a_table_of_a_million_columns_is_refused_before_pandas_reads_it(tmp_path):
    wide = tmp_path / "wide.csv"
    wide.write_text("," * 1_000_000 + "\n")
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    with pytest.raises(DamagedFileError, match="header is longer than 1,000 columns"):
        read_table(wide)
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before < 200 * 1024  # kB: 3 GB before
    table = pd.DataFrame({"a": [1, 2], "b": ["x", "y"]})
    for name in ("t.csv", "t.csv.gz"):  # a table of a few columns reads as before, header included
        table.to_csv(tmp_path / name, index=False)
        assert read_table(tmp_path / name).equals(table)


def test_11_a_huge_sparse_archive_in_the_mnist_folder_is_refused_at_once(tmp_path):
    """torchvision read it whole for its MD5 check (a 1 TB sparse file ran for minutes)."""
    raw = tmp_path / "MNIST" / "raw"
    raw.mkdir(parents=True)
    with open(raw / "train-images-idx3-ubyte.gz", "wb") as file:
        file.truncate(2**40)
    with time_limit(30), pytest.raises(MNISTDamagedError, match="is not an MNIST file"):
        download_mnist(tmp_path)


def test_12_a_sitting_with_a_ten_digit_version_is_read(tmp_path):
    """Lightning's next sitting after version_9999999999 is version_10000000000, which the history
    skipped: its epochs were lost and the best epoch's row missing."""
    for version, epoch in (("version_9999999999", 0), ("version_10000000000", 1)):
        (tmp_path / version).mkdir()
        (tmp_path / version / "metrics.csv").write_text(f"epoch,step,val/acc\n{epoch},{epoch},0.5\n")
    assert [row["epoch"] for row in read_history(tmp_path)] == [0, 1]


def test_13_a_best_checkpoint_without_its_epoch_is_not_restored(tmp_path):
    """fit() trained the remaining epochs, then stopped with a KeyError and saved no model."""
    trainer, _ = fit(tiny_parity.module(), data(), 1, default_root_dir=tmp_path, **QUIET)
    best = Path(trainer.checkpoint_callback.best_model_path)
    checkpoint = torch.load(best, weights_only=True)
    del checkpoint["epoch"]
    torch.save(checkpoint, best)
    callback = FolderCheckpoint(dirpath=best.parent, filename="best", monitor="val/acc", mode="max")
    callback.load_state_dict({"best_model_path": str(best), "best_model_score": 2.0})
    assert callback.best_model_path == ""  # nothing restored: the next epoch is the best so far
    callback.best_model_path = str(best)
    with pytest.raises(CheckpointError, match="is not a checkpoint of an epoch"):
        callback.load_best(tiny_parity.module())


def test_3_a_table_or_record_linked_out_of_its_folder_is_not_read(tmp_path):
    """A study's or a run's table that is a link was read wherever it led (a secret outside the folder
    read as a table); the package follows no link there."""
    from pondernet_tutorial.runs.evaluation import load_run_tables
    from pondernet_tutorial.runs.resume import read_metadata
    from pondernet_tutorial.runs.studies import load_study

    secret = tmp_path / "secret.csv"
    secret.write_text("user,token\nalice,SECRET\n")
    (tmp_path / "record.json").write_text(json.dumps({"identity": {}}))
    study = tmp_path / "results" / "studies" / "mine"
    study.mkdir(parents=True)
    (study / "study.json").write_text(json.dumps({"study": "mine"}))
    (study / "summary.csv").symlink_to(secret)
    with pytest.raises(DamagedFileError, match="is a symbolic link"):
        load_study("mine", tmp_path / "results")
    (study / "study.json").unlink()
    (study / "study.json").symlink_to(tmp_path / "record.json")
    with pytest.raises(FileNotFoundError, match="no readable study.json"):
        load_study("mine", tmp_path / "results")
    run = tmp_path / "run"
    run.mkdir()
    (run / "summary.csv").symlink_to(secret)
    with pytest.raises(DamagedFileError, match="is a symbolic link"):
        load_run_tables(run)
    (run / "metadata.json").symlink_to(tmp_path / "record.json")
    assert read_metadata(run) is None
