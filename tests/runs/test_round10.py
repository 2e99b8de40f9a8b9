"""Round 10 of attacks and a reuse review, each confirmed before its fix.

Each test failed on the code before its fix (the break is named in its docstring).
"""

from pathlib import Path

import pytest
import test_faults
import torch
from test_untrusted_runs import kept_then_overwritten, stopped_run

from pondernet_tutorial.runs import cli
from pondernet_tutorial.runs.config import ConfigMismatchError, check_same_identity


def test_two_configurations_that_differ_past_six_digits_get_two_folders(tmp_path):
    """A float was named by ``%g``, six digits: lr 0.000123456 and 0.0001234564 shared a folder, and the
    second run removed the first one's unfinished epochs (break: ``f"{value:g}"`` alone)."""
    a = test_faults.tiny(tmp_path, lr=0.000123456)
    b = test_faults.tiny(tmp_path, lr=0.0001234564)
    assert a.run_dir != b.run_dir and "lr=0.0001234564" in str(b.run_dir)
    assert "lr=0.0005-" in str(test_faults.tiny(tmp_path, lr=0.0005).run_dir)  # short names stay


def test_a_file_of_the_users_in_an_unfinished_run_keeps_the_run(tmp_path, monkeypatch, capsys):
    """A Finder .DS_Store (or notes of the user's) in a stopped run made the next train() remove the
    folder, the file and last.ckpt with it, and train from epoch 0 (break: resumable's refusal turned
    back into cannot_continue without overwrite)."""
    config = stopped_run(tmp_path, monkeypatch)
    (config.run_dir / "notes.txt").write_text("what I changed\n")
    kept_then_overwritten(config, capsys, "notes.txt is not a file of an unfinished run")


def test_a_huge_value_in_a_saved_identity_makes_a_short_error():
    """A forged metadata.json with a 20 MB value made a 20 MB "one-line" error (break: the values
    quoted whole, every differing field listed)."""
    saved = {"lr": "x" * 20_000_000, **{f"field{i}": i for i in range(1000)}}
    with pytest.raises(ConfigMismatchError) as error:
        check_same_identity(saved, {"lr": 0.001}, "the run in here")
    text = str(error.value)
    assert len(text) < 1500 and "lr: saved 'xxxx" in text and "and 993 more fields" in text, text[:2000]


@pytest.mark.skipif(torch.cuda.is_available(), reason="the refusal is for a machine without a GPU")
def test_cuda_graph_without_a_gpu_is_one_line_and_status_2(tmp_path, capsys):
    """It was a 21-line traceback and status 1 (break: use_cuda_graph raising a plain ValueError)."""
    argv = [
        "train",
        "--experiment",
        "parity-interpolation",
        "--quick",
        "--cuda-graph",
        "--output-dir",
        str(tmp_path),
    ]
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: --cuda-graph needs ") and err.count("\n") == 1, err


def _per_sample(folder, halt_step) -> None:
    import gzip

    folder.mkdir(parents=True)
    rows = f"set,label,prediction,halt_step,expected_steps\nrot0,1,1,3,2.5\nrot0,1,1,{halt_step},2.5\n"
    (folder / "per_sample.csv.gz").write_bytes(gzip.compress(rows.encode()))


def _runs(*paths):
    import pandas as pd

    return pd.DataFrame({"path": paths, "experiment": "e", "variant": "v", "method": "pondernet", "seed": 0})


@pytest.mark.parametrize("halt_step", [10**12, 0, 2.5, -3])
def test_a_halting_step_outside_1_to_the_maximum_is_a_damaged_table_not_an_allocation(tmp_path, halt_step):
    """halt_step 10**12 in a per-sample table made the halting figure ask numpy for 7.28 TiB (breaks:
    read_table's step check removed; load_table not asking for it; the figure's own check removed)."""
    import matplotlib

    matplotlib.use("Agg")
    from pondernet_tutorial.analysis.notebook import load_table
    from pondernet_tutorial.analysis.plots import plot_halting_distribution
    from pondernet_tutorial.untrusted import DamagedFileError, read_table

    _per_sample(tmp_path / "run", halt_step)
    with pytest.raises(DamagedFileError, match="its column halt_step holds .*, not a step from 1 to"):
        load_table(tmp_path, _runs("run"), "per_sample.csv.gz")
    table = read_table(tmp_path / "run" / "per_sample.csv.gz")  # read without the check: the figure refuses
    with pytest.raises(ValueError, match="halt_step holds .*, not a step from 1 to 20"):
        plot_halting_distribution(table, 0.2, 20, ["rot0"])


def test_a_runs_table_that_names_a_run_twice_is_refused(tmp_path):
    """A runs.csv of 400 rows naming one run read its table 400 times, past every bound (break: the
    duplicate check removed)."""
    from pondernet_tutorial.analysis.notebook import load_table
    from pondernet_tutorial.untrusted import DamagedFileError

    _per_sample(tmp_path / "run", 4)
    assert len(load_table(tmp_path, _runs("run"), "per_sample.csv.gz")) == 2
    with pytest.raises(DamagedFileError, match="names 'run' twice"):
        load_table(tmp_path, _runs("run", "run"), "per_sample.csv.gz")


def test_a_write_never_goes_through_a_folder_swapped_for_a_link(tmp_path):
    """atomic_file wrote by path: a folder on the way swapped for a link after the checks had every
    write of a run land outside the output folder (break: ``inside`` ignored, the write by path)."""
    from pondernet_tutorial.runs.files import atomic_file, write_json

    out, victim = tmp_path / "out", tmp_path / "victim"
    write_json(out / "a" / "b" / "record.json", {"mine": 1}, out)  # made where missing, inside
    assert (out / "a" / "b" / "record.json").read_text() == '{\n  "mine": 1\n}\n'
    (victim / "b").mkdir(parents=True)
    (victim / "b" / "record.json").write_text("a user's file")
    (out / "a").rename(tmp_path / "moved")
    (out / "a").symlink_to(victim, target_is_directory=True)
    with pytest.raises(FileExistsError, match="became a link or a file .* nothing was written or deleted"):
        write_json(out / "a" / "b" / "record.json", {"theirs": 1}, out)
    with pytest.raises(FileExistsError), atomic_file(out / "a" / "b" / "new.bin", "wb", inside=out) as handle:
        handle.write(b"x")
    assert (victim / "b" / "record.json").read_text() == "a user's file"
    assert sorted(p.name for p in (victim / "b").iterdir()) == ["record.json"]


def test_a_run_folder_swapped_for_a_link_after_training_is_never_written_through(tmp_path, monkeypatch):
    """The run's parent swapped for a link between fit() and the final save: history.csv, metadata.json
    and model.safetensors replaced a victim's files of those names (break: the final writes by path)."""
    from pondernet_tutorial.runs import training

    config = test_faults.tiny(tmp_path / "out")
    victim = tmp_path / "victim" / config.run_dir.name
    victim.mkdir(parents=True)
    for name in ("history.csv", "metadata.json", "model.safetensors"):
        (victim / name).write_text("a user's file\n")
    real = training.read_history

    def swap_then_read(logs):
        rows = real(logs)
        config.run_dir.parent.rename(tmp_path / "moved")
        config.run_dir.parent.symlink_to(victim.parent, target_is_directory=True)
        return rows

    monkeypatch.setattr(training, "read_history", swap_then_read)
    with pytest.raises(FileExistsError, match="became a link or a file"):
        training.train(config)
    assert {p.name: p.read_text() for p in victim.iterdir()} == dict.fromkeys(
        ("history.csv", "metadata.json", "model.safetensors"), "a user's file\n"
    )


def test_where_folders_cannot_be_held_open_a_write_is_checked_by_path(tmp_path, monkeypatch):
    """Windows has no descriptors of folders (os.open takes no dir_fd there): atomic_file then checks
    the folder's path before it writes (break: the fallback without check_inside)."""
    from pondernet_tutorial.runs import files

    monkeypatch.setattr(files, "HELD_FOLDERS", False)
    out, victim = tmp_path / "out", tmp_path / "victim"
    files.write_json(out / "a" / "record.json", {"mine": 1}, out)
    victim.mkdir()
    (out / "a").rename(tmp_path / "moved")
    (out / "a").symlink_to(victim, target_is_directory=True)
    with pytest.raises(FileExistsError, match="symbolic link or lies outside"):
        files.write_json(out / "a" / "record.json", {"theirs": 1}, out)
    assert list(victim.iterdir()) == []
    # a kill's temporary files go by path there too, after the same check (break: open_inside called
    # without the fallback, which fails where os.open takes no dir_fd)
    gone = tmp_path / "moved" / f".metrics.csv.999999999-0a1b2c3d{files.TEMP_SUFFIX}"
    gone.write_text("left by a kill")
    monkeypatch.setattr(files, "open_inside", None)  # as unusable as on Windows
    files.remove_stale_temps(tmp_path / "moved", tmp_path)
    assert not gone.exists()
    with pytest.raises(FileExistsError, match="symbolic link or lies outside"):
        files.remove_stale_temps(out / "a", out)


def test_on_python_3_10_a_removal_also_never_goes_through_a_link(tmp_path, monkeypatch):
    """Python 3.10's rmtree takes no dir_fd: remove_inside removed by path there, so a folder on the way
    swapped for a link after the check had it delete outside (break: the by-path branch for 3.10)."""
    from types import SimpleNamespace

    from pondernet_tutorial.runs import files

    monkeypatch.setattr(files, "sys", SimpleNamespace(version_info=(3, 10)))
    out, victim = tmp_path / "out", tmp_path / "victim"
    (victim / "run" / "sub").mkdir(parents=True)
    (victim / "run" / "sub" / "precious.txt").write_text("a user's file")
    run = out / "variant" / "run"
    (run / "deep" / "deeper").mkdir(parents=True)
    (run / "deep" / "deeper" / "file").write_text("x")
    (run / "link").symlink_to(victim, target_is_directory=True)  # removed, never followed
    files.remove_inside(run, out)
    assert not run.exists() and (victim / "run" / "sub" / "precious.txt").exists()
    run.mkdir()
    (out / "variant").rename(tmp_path / "moved")
    (out / "variant").symlink_to(victim, target_is_directory=True)
    monkeypatch.setattr(files, "check_inside", lambda *args, **kwargs: None)  # the swap came after it
    with pytest.raises(FileExistsError, match="became a link or a file"):
        files.remove_inside(run, out)
    assert (victim / "run" / "sub" / "precious.txt").read_text() == "a user's file"


def test_an_output_folder_given_through_a_link_of_the_users_trains_and_resumes(tmp_path, monkeypatch):
    """Lightning names a checkpoint by its real path; measured from an output folder given through a
    link (a linked data disk; macOS's /tmp), it lay "outside", and every run failed at its first save
    (the re-check of round 10). Breaks: RunCheckpointIO writing by Lightning's real path and
    open_inside without its real-path fallback, together (either alone holds)."""
    from test_resume import stop_at_epoch

    from pondernet_tutorial.runs.processes import Interrupted
    from pondernet_tutorial.runs.training import train

    (tmp_path / "disk").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "disk", target_is_directory=True)
    config = test_faults.tiny(tmp_path / "link" / "runs", epochs=3)
    stop_at_epoch(monkeypatch, 2, [])
    with pytest.raises(Interrupted):
        train(config)
    monkeypatch.undo()
    _, metadata = train(config)
    assert metadata["resumed"] and metadata["epochs_run"] == 3
    real = tmp_path / "disk" / config.run_dir.relative_to(tmp_path / "link")
    assert (real / "model.safetensors").is_file() and not (real / "checkpoints").exists()


def test_a_folder_named_by_its_real_path_is_written_inside_an_output_folder_given_through_a_link(tmp_path):
    """Break: open_inside without its real-path fallback (the name climbed out with '..')."""
    from pondernet_tutorial.runs.files import write_json

    (tmp_path / "disk").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "disk", target_is_directory=True)
    write_json(tmp_path / "disk" / "run" / "record.json", {"a": 1}, inside=tmp_path / "link")
    assert (tmp_path / "disk" / "run" / "record.json").is_file()
    with pytest.raises(FileExistsError, match="lies outside"):
        write_json(tmp_path / "elsewhere" / "record.json", {"a": 1}, inside=tmp_path / "link")
    assert not (tmp_path / "elsewhere").exists()


def test_the_dry_step_that_checks_a_step_changes_no_draw_of_training(tmp_path, monkeypatch):
    """fit()'s one dry step (check_step_returns) drew from the global generator where a step's first
    state is random: the weights trained differed from those without the check, and a resumed run
    would draw differently from one trained in one go (break: the dry step without fork_rng)."""
    import lightning as L
    from torch.utils.data import TensorDataset

    from pondernet_tutorial import PonderLitModule, PonderNet, fit, fitting
    from pondernet_tutorial.steps.parity import ParityStep

    class NoisyStart(ParityStep):  # a small random first state, a common choice
        def initial_state(self, context):
            return 0.01 * torch.randn(context.shape[0], self.hidden_size, dtype=context.dtype)

    x = torch.randint(-1, 2, (32, 8)).float()
    y = (x == 1).sum(1) % 2

    def trained(check) -> dict:
        monkeypatch.setattr(fitting, "check_step_returns", check)
        L.seed_everything(0, verbose=False)
        module = PonderLitModule(PonderNet(NoisyStart(8, hidden_size=8), max_steps=3))
        data = L.LightningDataModule.from_datasets(TensorDataset(x, y), batch_size=8)  # no validation
        # (Lightning's sanity check isolates the random state: the first check of a training batch does not)
        quiet = dict(enable_progress_bar=False, enable_model_summary=False, logger=False)
        fit(module, data, 1, default_root_dir=tmp_path / check.__name__, **quiet)
        return module.state_dict()

    def unchecked(model, batch_inputs, targets=None):
        pass

    with_check, without = trained(fitting.check_step_returns), trained(unchecked)
    assert all(torch.equal(with_check[k], without[k]) for k in with_check)


def test_a_metrics_file_swapped_for_a_link_while_training_is_never_written_through(tmp_path, monkeypatch):
    """Lightning's csv writer appended by path: metrics.csv swapped for a link after an epoch had the
    next epochs appended to a file outside the output folder (the re-check of round 10; break: the
    plain CSVLogger in make_loggers). The history still holds every epoch: the file is written whole."""
    from pondernet_tutorial.runs import training

    victim = tmp_path / "victim.txt"
    victim.write_text("a user's file\n")
    config = test_faults.tiny(tmp_path / "runs", epochs=3)
    original = training.EpochClock.on_train_epoch_end

    def swap(self, trainer, pl_module):
        original(self, trainer, pl_module)
        if trainer.current_epoch == 0:
            metrics = config.run_dir / "logs" / "version_0" / "metrics.csv"
            metrics.unlink()
            metrics.symlink_to(victim)

    monkeypatch.setattr(training.EpochClock, "on_train_epoch_end", swap)
    _, metadata = training.train(config)
    assert victim.read_text() == "a user's file\n" and metadata["epochs_run"] == 3


def test_a_run_pruned_of_its_model_with_a_file_of_the_users_is_kept(tmp_path, capsys):
    """A finished run pruned of its model file (as shipping's "tables" level leaves it), with a notes
    file of the user's, was removed whole by the next train() and trained again, silently (the re-check
    of round 10; break: check_only_run_files left out of _train)."""
    from pondernet_tutorial.runs.resume import KeptRunError
    from pondernet_tutorial.runs.training import train

    config = test_faults.tiny(tmp_path)
    train(config)
    (config.run_dir / "model.safetensors").unlink()
    (config.run_dir / "notes.txt").write_text("what I saw\n")
    before = sorted(p.name for p in config.run_dir.iterdir())
    with pytest.raises(
        KeptRunError, match=r"the folder in .* is kept: notes.txt is not a file of a run\. Move it"
    ):
        train(config)
    assert sorted(p.name for p in config.run_dir.iterdir()) == before
    (config.run_dir / "notes.txt").unlink()  # the run's own files alone: trained again, as before
    _, metadata = train(config)
    assert metadata["epochs_run"] == 1 and (config.run_dir / "model.safetensors").is_file()


def test_the_metrics_file_is_appended_to_and_written_whole_only_when_its_header_changes(
    tmp_path, monkeypatch
):
    """The first held writer rewrote metrics.csv whole at every save: bytes growing with the square of
    the epochs, about an hour of writes over 10,000 epochs (a second re-check; break: the whole file
    at every save)."""
    from pondernet_tutorial.runs import files
    from pondernet_tutorial.runs.resume import read_history
    from pondernet_tutorial.runs.training import train

    whole, real = [], files.atomic_file

    def counted(path, *args, **kwargs):
        if Path(path).name == "metrics.csv":
            whole.append(path)
        return real(path, *args, **kwargs)

    monkeypatch.setattr(files, "atomic_file", counted)
    config = test_faults.tiny(tmp_path, epochs=6)
    train(config)
    assert 1 <= len(whole) <= 3, len(whole)  # the first save and the new columns of validation, at most
    assert [row["epoch"] for row in read_history(config.run_dir / "logs")] == list(range(6))


def test_a_kills_temporary_metrics_file_of_an_earlier_sitting_is_removed_on_resuming(tmp_path, monkeypatch):
    """A kill mid-write of metrics.csv left its temporary file in logs/version_0, which the resumed run
    (logging to version_1) never wrote again: it stayed in the finished run for good (a second
    re-check; break: the resume's remove_stale_temps left out)."""
    from test_resume import stop_at_epoch

    from pondernet_tutorial.runs.processes import Interrupted
    from pondernet_tutorial.runs.training import train

    config = test_faults.tiny(tmp_path, epochs=3)
    stop_at_epoch(monkeypatch, 2, [])
    with pytest.raises(Interrupted):
        train(config)
    monkeypatch.undo()
    stale = config.run_dir / "logs" / "version_0" / ".metrics.csv.999999999-0a1b2c3d.tmp"  # no such process
    stale.write_text("epoch,val/acc\n0,0.")
    _, metadata = train(config)
    assert metadata["resumed"] and not stale.exists()


@pytest.mark.parametrize(
    "make, reason",
    [
        (
            lambda run: (run / ".backup.tmp").mkdir(),
            ".backup.tmp is not a file of a run",
        ),  # a folder, not a temp
        (lambda run: (run / "notes\nerror: x").write_text("mine"), "notes?error: x is not a file of a run"),
    ],
    ids=["temp-named-folder", "line-break"],
)
def test_what_a_run_never_writes_keeps_a_pruned_run_in_one_line(tmp_path, make, reason):
    """A folder named like a temporary file passed as one, with all in it; a name with a line break made
    the one-line error three lines (a second re-check; breaks: any '.x.tmp' entry taken for a temp,
    the reason not made printable)."""
    from pondernet_tutorial.runs.resume import KeptRunError
    from pondernet_tutorial.runs.training import train

    config = test_faults.tiny(tmp_path)
    train(config)
    (config.run_dir / "model.safetensors").unlink()
    make(config.run_dir)
    with pytest.raises(KeptRunError) as kept:
        train(config)
    assert reason in str(kept.value) and "\n" not in str(kept.value), str(kept.value)
