"""Round 11 of attacks (stop 63). Each test failed on the code before its fix; the break is named in its
docstring."""

from __future__ import annotations

from pathlib import Path

import pytest

from pondernet_tutorial.runs import files
from pondernet_tutorial.untrusted import DamagedFileError


def test_a_lock_file_swapped_for_a_link_after_its_check_leaves_the_target_whole(tmp_path, monkeypatch):
    """The lock file is checked (a regular file or none) and then opened by filelock, by its path. A link
    put in its place between the two was followed by filelock before 3.20.1, which opened it with O_TRUNC
    and emptied the file it named (CVE-2025-68146): a user's file outside the output folder. From
    3.20.1 filelock opens it with O_NOFOLLOW, and the lock is refused as damaged. Break: install
    filelock 3.20.0 (``pip install filelock==3.20.0``)."""
    victim = tmp_path / "outside" / "thesis.tex"
    victim.parent.mkdir()
    victim.write_text("three years of work\n")
    output = tmp_path / "runs"
    output.mkdir()
    check = files._check_lock_file

    def check_then_swap(lock):
        check(lock)
        lock.symlink_to(victim)  # the race: after the check, before filelock opens it

    monkeypatch.setattr(files, "_check_lock_file", check_then_swap)
    with pytest.raises(DamagedFileError) as caught:
        with files.folder_lock(output / "seed0"):
            pass
    assert victim.read_text() == "three years of work\n"
    assert "damaged" in str(caught.value) and "\n" not in str(caught.value)


def test_a_crafted_checkpoint_cannot_make_a_callback_of_the_users_remove_outside_its_folder(tmp_path):
    """fit() keeps its own best epoch with a FolderCheckpoint, which trusts no restored path; a plain
    ``ModelCheckpoint`` that the caller adds restores the paths recorded in the checkpoint fit continues
    from, and Lightning removed the recorded "best" (``<folder>/../victim``, a folder, recursively) when
    the next epoch came. Now the checkpoint input and output removes only a regular file named without
    ``..``, and Lightning's own removals still happen. Break: ``remove_checkpoint`` of
    CheckedCheckpointIO deleted (Lightning's ``fs.rm(path, recursive=True)`` comes back)."""
    import torch
    from tiny_parity import fit_with_callback

    (tmp_path / "victim").mkdir()
    (tmp_path / "victim" / "thesis.tex").write_text("three years of work\n")
    (tmp_path / "victim.txt").write_text("notes\n")
    folder = tmp_path / "ck"
    fit_with_callback(folder, 1, tmp_path)
    checkpoint = torch.load(next(folder.glob("epoch=*.ckpt")), weights_only=True)
    for target, name in (("victim", "best_model_path"), ("victim.txt", "kth_best_model_path")):
        for key, state in checkpoint["callbacks"].items():
            if key.startswith("ModelCheckpoint"):
                state[name] = f"{folder.resolve()}/../{target}"
    torch.save(checkpoint, tmp_path / "crafted.ckpt")

    with pytest.warns(UserWarning, match="left '.*/ck/../victim' where it is"):
        fit_with_callback(folder, 3, tmp_path, ckpt_path=tmp_path / "crafted.ckpt")
    assert (tmp_path / "victim" / "thesis.tex").read_text() == "three years of work\n"
    assert (tmp_path / "victim.txt").read_text() == "notes\n"
    # epoch 1's file was removed when epoch 2 came; epoch 0's stays, its record replaced by the victim's
    assert sorted(p.name for p in folder.iterdir()) == ["epoch=0-step=2.ckpt", "epoch=2-step=6.ckpt"]


def test_a_record_whose_field_names_hold_escapes_is_named_on_one_printable_line():
    """A field name with a terminal's escape and a line break, from an untrusted resume.json or
    metadata.json, set the window's title, cleared the screen and forged a second line of the error.
    Break: drop the printable filter in untrusted.shown."""
    from pondernet_tutorial.runs.config import ConfigMismatchError, check_same_identity

    key = "\x1b]0;PWNED\x07\x1b[2J\nforged second line: run rm -rf ~"
    with pytest.raises(ConfigMismatchError) as caught:
        check_same_identity({key: 1, "lr": 0.1}, {"lr": 0.2}, "the run in x")
    message = str(caught.value)
    assert message.isprintable() and "lr: saved 0.1, requested 0.2" in message


# ---------------------------------------------------------------------------------------------------
# Round 11's run folders: nothing of a run or of its user removed unasked; reads stay inside


@pytest.fixture
def stopped(tmp_path, monkeypatch):
    from test_untrusted_runs import stopped_run

    return stopped_run(tmp_path / "runs", monkeypatch)


def test_a_constant_schedule_run_asked_for_with_another_plateau_setting_is_the_same_run(tmp_path):
    """Under a constant rate the plateau's settings are no part of the run (its identity and folder
    leave them out), but the module saved them: asking again with --lr-factor 0.3 found the finished run
    "damaged" and trained it again. Break: pass config.lr_factor to the module in build.make_module."""
    from test_untrusted_runs import tiny

    from pondernet_tutorial.runs.training import RunExistsError, train

    first = tiny(tmp_path, lr_schedule="constant")
    train(first)
    model = (first.run_dir / "model.safetensors").read_bytes()
    again = tiny(tmp_path, lr_schedule="constant", lr_factor=0.3, lr_patience=7)
    with pytest.raises(RunExistsError):
        train(again)
    assert (first.run_dir / "model.safetensors").read_bytes() == model


@pytest.mark.parametrize("record", ['{"identity": 5}', "", "{}"])
def test_an_unfinished_run_whose_resume_record_names_no_configuration_is_kept(stopped, record, capsys):
    """resume.json is written whole: one that names no configuration was edited, and its run was
    removed and trained from epoch 0 without a word. Break: drop the refusal in resumable."""
    from test_untrusted_runs import kept_then_overwritten

    (stopped.run_dir / "resume.json").write_text(record)
    kept_then_overwritten(stopped, capsys, "its resume.json records no configuration")


@pytest.mark.parametrize(
    "entry, named",
    [
        ("logs/analysis.ipynb", "logs/analysis.ipynb"),
        ("logs/plots/fig1.png", "logs/plots"),
        ("logs/version_0/notes.txt", "logs/version_0/notes.txt"),
        ("history.csv/mine.txt", "history.csv is not a regular file"),
    ],
)
def test_a_users_file_under_the_logs_or_a_folder_named_as_a_run_file_is_kept(stopped, entry, named, capsys):
    """Below logs/ any name passed, so a user's notebook there was removed with the run; a folder named
    history.csv passed as the run's file and failed the final save on every try. Break: accept any
    entry under logs/ in _check_entries (``_a_log`` returning True), or any type at the top level."""
    from test_untrusted_runs import kept_then_overwritten

    path = stopped.run_dir / entry
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("mine")
    kept_then_overwritten(stopped, capsys, named)


def test_a_hard_linked_backup_of_a_stopped_run_lets_it_continue_and_never_changes(stopped, tmp_path):
    """cp -al of a stopped run gave each of its files a second name; every one was refused, and the
    advice, to remove it, lost the run. A resumed sitting writes every file whole or new, and appends
    only to its own metrics.csv, which it writes whole where that file has other names. Break: refuse
    a hard link in _check_entries, or append whatever st_nlink in build.held_csv_logger."""
    import os
    import shutil

    from pondernet_tutorial.runs.training import train

    backup = tmp_path / "backup"
    shutil.copytree(stopped.run_dir, backup, copy_function=os.link)
    kept = {p: p.read_bytes() for p in backup.rglob("*") if p.is_file()}
    _, metadata = train(stopped)
    assert metadata["resumed"]
    assert {p: p.read_bytes() for p in backup.rglob("*") if p.is_file()} == kept


def test_a_metrics_file_hard_linked_during_training_is_written_whole_not_through(tmp_path):
    """A backup (cp -al) taken while a run trains shares its metrics.csv: the next epoch's rows were
    appended into the backup too. Break: append whatever st_nlink in build.held_csv_logger."""
    import os

    from pondernet_tutorial.runs.build import held_csv_logger

    logger = held_csv_logger(tmp_path / "logs", tmp_path)
    logger.log_metrics({"loss": 1.0}, step=0)
    logger.save()
    metrics = Path(logger.experiment.metrics_file_path)
    os.link(metrics, tmp_path / "backup.csv")
    backup = (tmp_path / "backup.csv").read_bytes()
    logger.log_metrics({"loss": 0.5}, step=1)
    logger.save()
    assert (tmp_path / "backup.csv").read_bytes() == backup
    assert metrics.read_text().count("\n") == 3 and os.stat(metrics).st_nlink == 1


def test_evaluation_refuses_a_run_folder_reached_through_a_link_before_any_lock_or_read(tmp_path):
    """evaluate_run and evaluate_halting took the run's lock and read its model through a link out of
    the output folder before their first write was refused. Break: drop check_inside in both."""
    from test_untrusted_runs import tiny

    from pondernet_tutorial.runs.evaluation import evaluate_halting, evaluate_run
    from pondernet_tutorial.runs.training import train

    outside = tiny(tmp_path / "outside")
    train(outside)
    for lock in (tmp_path / "outside").rglob("*.lock"):  # train() leaves its lock file: a new one would show
        lock.unlink()
    before = sorted(p for p in (tmp_path / "outside").rglob("*"))
    config = tiny(tmp_path / "runs")
    Path(config.output_dir).mkdir(parents=True)
    (Path(config.output_dir) / config.experiment).symlink_to(tmp_path / "outside" / config.experiment)
    for evaluate in (evaluate_run, evaluate_halting):
        with pytest.raises(FileExistsError, match="is a symbolic link or lies outside"):
            evaluate(config, limit=4)
    assert sorted(p for p in (tmp_path / "outside").rglob("*")) == before


def test_a_runs_table_that_names_one_run_through_links_is_refused(tmp_path):
    """Links inside the results root to one run folder read its table once per link (200 links, 200
    reads of up to 64 MiB). Break: key the duplicates on the path as named, not as resolved."""
    from test_round10 import _per_sample, _runs

    from pondernet_tutorial.analysis.notebook import load_table
    from pondernet_tutorial.untrusted import DamagedFileError

    _per_sample(tmp_path / "run", 4)
    (tmp_path / "again").symlink_to(tmp_path / "run")
    with pytest.raises(DamagedFileError, match="names 'again' twice"):
        load_table(tmp_path, _runs("run", "again"), "per_sample.csv.gz")


def test_an_unfinished_run_of_a_data_module_without_state_says_it_starts_again(tmp_path, capsys):
    """An unfinished MNIST run was removed and trained from epoch 0 without a line, and one holding a
    user's file was kept with the advice to remove that file "to continue it", which MNIST never does.
    Break: return False without cannot_continue in resumable, or keep the one remedy."""
    import json

    import lightning as L

    from pondernet_tutorial.runs.resume import KeptRunError, resumable

    run = tmp_path / "seed0"
    (run / "checkpoints").mkdir(parents=True)
    (run / "checkpoints" / "last.ckpt").write_bytes(b"PK")
    (run / "resume.json").write_text(json.dumps({"identity": {"lr": 0.1}}))
    stateless = L.LightningDataModule()  # as MNIST's: no state of its batches
    assert resumable(run, {"lr": 0.1}, stateless) is False
    assert "cannot be continued (its data module keeps no state of its batches" in capsys.readouterr().err
    (run / "notes.txt").write_text("mine")
    with pytest.raises(KeptRunError, match="Move that entry away to train the run here, or pass --overwrite"):
        resumable(run, {"lr": 0.1}, stateless)


def test_a_constant_schedule_run_of_the_engine_before_saved_the_requested_plateau_settings(
    tmp_path, monkeypatch
):
    """Before this stop the module saved the plateau's settings as asked, also under a constant rate;
    such a finished run, asked for again with the same command, was found "not the model of this
    configuration" and kept as damaged (the re-check). The plateau's settings are compared only where a
    plateau schedule reads them. Break: compare the whole hyperparameters in completed_run."""
    from test_untrusted_runs import tiny

    from pondernet_tutorial.runs import build, training
    from pondernet_tutorial.runs.checkpoints import load_model
    from pondernet_tutorial.runs.training import RunExistsError, train

    config = tiny(tmp_path, lr_schedule="constant", lr_factor=0.3)
    made = build.make_module

    def as_before(config, graphed=False):  # the engine before: the requested settings saved
        module = made(config, graphed)
        module.hparams.update(lr_factor=config.lr_factor, lr_patience=config.lr_patience)
        return module

    monkeypatch.setattr(training, "make_module", as_before)
    train(config)
    monkeypatch.undo()
    assert load_model(config.run_dir / "model.safetensors").hparams["lr_factor"] == 0.3
    with pytest.raises(RunExistsError):
        train(config)
    load_model(config.run_dir / "model.safetensors", config=config)


def test_a_callbacks_own_removals_still_happen_remotely_and_for_last_links(tmp_path):
    """The first fix of remove_checkpoint kept every file of a top-k callback on an fsspec path
    (memory://, s3://) and every old link of save_last="link" under a templated name, with a warning
    that blamed a crafted checkpoint (the re-check). Break: refuse '://' paths or links in
    CheckedCheckpointIO.remove_checkpoint."""
    import uuid
    import warnings

    import fsspec
    from lightning.pytorch.callbacks import ModelCheckpoint
    from tiny_parity import QUIET, datamodule, module

    from pondernet_tutorial import fit

    remote = f"memory://ck-{uuid.uuid4().hex}"
    top = ModelCheckpoint(dirpath=remote, filename="{epoch}", monitor="epoch", mode="max", save_top_k=1)

    class Links(ModelCheckpoint):
        CHECKPOINT_NAME_LAST = "last-{epoch}"

    links = Links(dirpath=tmp_path / "ck", filename="{epoch}", save_last="link")
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)  # no "left ... where it is"
        warnings.filterwarnings("ignore", message="(?!left )")
        fit(
            module(),
            datamodule(),
            3,
            select_by="epoch",
            callbacks=[top, links],
            default_root_dir=tmp_path,
            **QUIET,
        )
    assert [p.rsplit("/", 1)[-1] for p in fsspec.filesystem("memory").ls(remote[9:], detail=False)] == [
        "epoch=2.ckpt"
    ]
    assert sorted(p.name for p in (tmp_path / "ck").iterdir()) == ["epoch=2.ckpt", "last-epoch=2.ckpt"]


@pytest.mark.parametrize(
    "restored",
    [
        "local://{outside}/precious.ckpt",  # Lightning confines only paths of the "file" protocol
        "memory://elsewhere/precious.ckpt",
        "{folder}/other_run/best.ckpt",  # another run's file below the callback's folder
        "{folder}/notes.txt",  # not a checkpoint
        "{folder}/a\x00.ckpt",  # raised "embedded null byte" out of fit()
        "{folder}/" + "a" * 300 + ".ckpt",  # raised "File name too long"
    ],
)
def test_a_restored_path_outside_the_folders_saved_into_is_never_removed(tmp_path, restored):
    """The second re-check: a crafted checkpoint's best_model_path of local:// (fsspec's local file
    system) or any remote protocol deleted a .ckpt file anywhere; one of another run below the folder,
    or a non-checkpoint file, went too; odd names crashed fit(). A removal now takes only a .ckpt in a
    folder this checkpoint input and output saved into. Break: drop the has_saved condition in
    CheckedCheckpointIO.remove_checkpoint, or its except clause."""
    import warnings

    import fsspec

    from pondernet_tutorial.checkpointing import CheckedCheckpointIO

    folder, outside = tmp_path / "ck", tmp_path / "outside"
    (folder / "other_run").mkdir(parents=True)
    outside.mkdir()
    victims = [outside / "precious.ckpt", folder / "other_run" / "best.ckpt", folder / "notes.txt"]
    for victim in victims:
        victim.write_text("mine")
    fsspec.filesystem("memory").pipe("/elsewhere/precious.ckpt", b"mine")
    io = CheckedCheckpointIO(2**20)
    io.save_checkpoint({"epoch": 0}, folder / "epoch=0.ckpt")
    with pytest.warns(UserWarning, match="where it is"):
        io.remove_checkpoint(restored.format(outside=outside, folder=folder))
    assert all(victim.read_text() == "mine" for victim in victims)
    assert fsspec.filesystem("memory").cat("/elsewhere/precious.ckpt") == b"mine"
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        io.remove_checkpoint(folder / "epoch=0.ckpt")  # its own: removed, without a word
    assert not (folder / "epoch=0.ckpt").exists()


def _errors():
    import errno

    from pondernet_tutorial.fitting import TrainingDivergedError
    from pondernet_tutorial.runs.config import ConfigMismatchError
    from pondernet_tutorial.runs.files import FolderLockedError, write_failed
    from pondernet_tutorial.runs.resume import DamagedHistoryError, KeptRunError
    from pondernet_tutorial.runs.training import RunExistsError
    from pondernet_tutorial.untrusted import CheckpointError, DamagedFileError

    run = Path("runs/seed0")
    return [
        KeptRunError(run, "notes.txt is not a file of a run", "Move it away."),
        DamagedHistoryError(run, "its history lacks epoch 2"),
        RunExistsError(run, "already holds this trained run"),
        ConfigMismatchError("runs/seed0 holds another configuration (lr: saved 0.1, requested 0.2)."),
        FolderLockedError("runs/seed0 is in use."),
        write_failed(OSError(errno.ENOSPC, "No space left on device"), run / "model.safetensors", whole=True),
        DamagedFileError(0, "runs/seed0/metadata.json is damaged."),
        CheckpointError("runs/seed0/checkpoints/last.ckpt is not a checkpoint."),
        TrainingDivergedError("training diverged in epoch 3."),
    ]


@pytest.mark.parametrize("error", _errors(), ids=lambda e: type(e).__name__)
def test_an_error_raised_in_a_worker_of_reproduce_reaches_its_parent_whole(error):
    """reproduce --jobs runs each run in a process pool, which sends a worker's error to the parent by
    pickling. KeptRunError, DamagedHistoryError and RunExistsError take other arguments than their
    message and failed to unpickle: the pool broke ("A process in the process pool was terminated
    abruptly") instead of giving their one line. Break: drop PicklableError from KeptRunError's or
    RunExistsError's bases."""
    import pickle

    again = pickle.loads(pickle.dumps(error))
    assert type(again) is type(error) and str(again) == str(error)
    assert getattr(again, "command_line", None) == getattr(error, "command_line", None)
