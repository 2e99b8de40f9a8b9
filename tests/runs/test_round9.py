"""Round 9 of attacks, each confirmed before its fix.

Each test failed on the code before its fix (the break is named in its docstring).
"""

import os
from pathlib import Path
from types import SimpleNamespace

import pytest
import test_faults
import tiny_parity
import torch
from test_round4 import QUIET, data

from pondernet_tutorial.fitting import fit
from pondernet_tutorial.lightning_module import PonderLitModule
from pondernet_tutorial.runs import checkpoints, cli, config, evaluation, files, studies, training
from pondernet_tutorial.runs.resume import read_history
from pondernet_tutorial.untrusted import MAX_COLUMNS, CheckpointError, DamagedFileError, read_table


def _forged(tmp_path: Path, edit) -> Path:
    """The best epoch's checkpoint of one epoch of fit(), edited by ``edit(checkpoint)``, saved as plain
    data: what a user could be handed and continue from with fit(ckpt_path=...)."""
    trainer, _ = fit(tiny_parity.module(), data(), 1, default_root_dir=tmp_path / "first", **QUIET)
    checkpoint = torch.load(trainer.checkpoint_callback.best_model_path, weights_only=True)
    edit(checkpoint)
    shared = tmp_path / "shared.ckpt"
    torch.save(checkpoint, shared)
    return shared


def _group(checkpoint) -> dict:
    return checkpoint["optimizer_states"][0]["param_groups"][0]


def _generator(checkpoint, state=None) -> None:
    (key,) = [k for k, v in checkpoint.items() if isinstance(v, dict) and "train_generator" in v]
    checkpoint[key]["train_generator"] = torch.zeros(3, dtype=torch.uint8) if state is None else state


@pytest.mark.parametrize(
    "edit, message",
    [
        (lambda c: _group(c).update(maximize=True), "its optimizer's maximize is True"),
        (lambda c: _group(c).update(lr=1e6), "its learning rate 1000000.0 is not in"),
        (lambda c: _group(c).update(lr="fast"), "its learning rate 'fast' is not in"),
        (lambda c: _group(c).update(betas=(5.0, 5.0)), "its optimizer's betas is"),
        (lambda c: c["lr_schedulers"][0].update(step=1), "schedule is not this module's plateau schedule"),
        (lambda c: c.update({"pytorch-lightning_version": "0.0.1"}), "Lightning version is '0.0.1'"),
        (_generator, "training batches' generator is not"),
        # the re-check's: a schedule that never cuts the rate, or cuts it at the wrong time; a release
        # candidate before 2.0 and a version after the installed one; a tensor rate; a zeroed generator
        (lambda c: c["lr_schedulers"][0].update(cooldown_counter=10**9), "schedule is not this module's"),
        (lambda c: c["lr_schedulers"][0].update(best=float("inf")), "schedule is not this module's"),
        (lambda c: c.update({"pytorch-lightning_version": "2.0.0rc1"}), "Lightning version is '2.0.0rc1'"),
        (lambda c: c.update({"pytorch-lightning_version": "10.0"}), "Lightning version is '10.0'"),
        (lambda c: _group(c).update(lr=torch.tensor(1e-4)), "its learning rate tensor"),
        (
            lambda c: _generator(c, torch.zeros_like(torch.Generator().get_state())),
            "training batches' generator is not",
        ),
    ],
    ids=[
        "maximize",
        "lr 1e6",
        "lr text",
        "betas",
        "schedule",
        "lightning 0.0.1",
        "generator",
        "cooldown",
        "best",
        "rc1",
        "10.0",
        "lr tensor",
        "zero generator",
    ],
)
def test_a_checkpoint_given_to_fit_restores_no_training_state_of_another_module(tmp_path, edit, message):
    """maximize=True and lr=1e6 were restored silently (the training climbed the loss); the others
    ended in a traceback from torch or Lightning. Break: check_fits without check_training_state
    (and ParityDataModule.load_state_dict without its check)."""
    shared = _forged(tmp_path, edit)
    with pytest.raises(CheckpointError, match=message):
        fit(tiny_parity.module(), data(), 2, ckpt_path=shared, default_root_dir=tmp_path / "second", **QUIET)


def test_a_fit_continued_twice_keeps_its_schedule_acceptable(tmp_path):
    """A fit continued from its best epoch skips that epoch's plateau step (Lightning saves before it):
    the schedule of a continued fit is behind its epoch, and is still this module's. Break: require
    last_epoch == epoch in check_training_state."""
    shared = _forged(tmp_path, lambda c: None)
    trainer, _ = fit(
        tiny_parity.module(), data(), 3, ckpt_path=shared, default_root_dir=tmp_path / "b", **QUIET
    )
    again = trainer.checkpoint_callback.best_model_path
    fit(tiny_parity.module(), data(), 4, ckpt_path=again, default_root_dir=tmp_path / "c", **QUIET)


def test_a_row_split_by_quoted_newlines_is_bounded_as_one_row(tmp_path):
    """A quoted field holding a newline split one row of 20,000 fields into lines of fewer than
    MAX_COLUMNS commas: a 40 kB file became an index of 19,998 levels (+93 MB); then a quote inside an
    unquoted field flipped the count of quotes. Break: count the commas of physical lines, or open a
    quoted field at any quote (untrusted._rows)."""
    fields = ['"\n"' if i % 900 == 899 else "1" for i in range(20_000)]
    path = tmp_path / "summary.csv"
    path.write_text("a,b\n" + ",".join(fields) + "\n")
    with pytest.raises(DamagedFileError, match=f"longer than {MAX_COLUMNS:,} columns"):
        read_table(path)
    header = ",".join(f'"c\n{i}"' for i in range(MAX_COLUMNS + 1))  # the header split alike
    path.write_text(header + "\n")
    with pytest.raises(DamagedFileError, match=f"longer than {MAX_COLUMNS:,} columns"):
        read_table(path)
    path.write_text('a,b\nx"y' + ',"\n"' * 2000 + "\n")  # re-check: a quote inside an unquoted field is text
    with pytest.raises(DamagedFileError, match=f"longer than {MAX_COLUMNS:,} columns"):
        read_table(path)
    path.write_text('name,value\n"PonderNet, KL(p_G\n‖p)",1\n"a ""quoted"" one",2\n')  # quoted commas too
    assert read_table(path)["value"].tolist() == [1, 2]


def test_a_row_the_logger_did_not_finish_is_not_read(tmp_path):
    """A full disk, or a kill, while Lightning's csv logger appended left an empty metrics.csv or a
    last row cut short ("7.5e"): the history was refused, and the next train() deleted the unfinished
    run whose last.ckpt was whole. Break: read_table(whole_lines=True) keeping the line cut short."""
    logs = tmp_path / "logs"
    (logs / "version_0").mkdir(parents=True)
    (logs / "version_1").mkdir()
    (logs / "version_0" / "metrics.csv").write_text(
        "epoch,lr,val/acc\n0,0.001,0.5\n1,0.001,0.6\n2,0.014,7.5e"
    )
    (logs / "version_1" / "metrics.csv").write_bytes(b"")
    assert [(row["epoch"], row["val/acc"]) for row in read_history(logs)] == [(0, 0.5), (1, 0.6)]
    # re-check: a blank line made pandas' rows one fewer than the lines counted, and the cut row was read
    (logs / "version_0" / "metrics.csv").write_text(
        "epoch,lr,val/acc\n0,0.001,0.5\n\n1,0.001,0.6\n2,0.014,0.7"
    )
    assert [(row["epoch"], row["val/acc"]) for row in read_history(logs)] == [(0, 0.5), (1, 0.6)]


def test_a_folder_on_the_way_swapped_for_a_link_after_the_check_deletes_nothing(tmp_path, monkeypatch):
    """train() checked the run folder's path once, then built the data and the model (or waited for a
    lock), then removed the folder by its path: a folder on the way swapped for a link meanwhile had a
    folder outside the output folder deleted and trained into. Break: shutil.rmtree(folder) by path in
    remove_inside (its check_inside is skipped here, as if the swap came right after it)."""
    out, victim = tmp_path / "out", tmp_path / "victim"
    (victim / "seed0").mkdir(parents=True)
    (victim / "seed0" / "precious.txt").write_text("a user's file")
    (out / "experiment").mkdir(parents=True)
    (out / "experiment" / "variant").symlink_to(victim, target_is_directory=True)
    monkeypatch.setattr(files, "check_inside", lambda *args, **kwargs: None)
    with pytest.raises(
        FileExistsError, match="became a link or a file .*: nothing was (written or )?deleted"
    ):
        files.remove_inside(out / "experiment" / "variant" / "seed0", out)
    assert (victim / "seed0" / "precious.txt").read_text() == "a user's file"
    (out / "experiment" / "other" / "seed0").mkdir(parents=True)  # a plain folder: removed
    files.remove_inside(out / "experiment" / "other" / "seed0", out)
    assert not (out / "experiment" / "other" / "seed0").exists()


def test_an_evaluation_seed_torch_cannot_take_is_refused_where_it_is_given():
    """eval_seed=2**70 loaded from a model file, then failed at the first validation in torch's
    'Overflow when unpacking long long'. Break: check_module without the upper bound."""
    with pytest.raises(ValueError, match=r"eval_seed must be a whole number from 0 to 2\*\*63 - 1"):
        PonderLitModule(tiny_parity.module().model, eval_seed=2**70)


def test_an_odd_folder_among_the_shipped_runs_is_skipped(tmp_path, monkeypatch):
    """A folder seed² ("²".isdigit() is true) made every command end in a traceback, --help included;
    seedx broke available_pretrained; a metadata.json whose config is a list broke `list`. Break:
    seed.isdigit() alone in shipped_runs, int() unchecked in available_pretrained, no type check in
    cli's variant name."""
    for seed in ("seed0", "seed²", "seedx", "seed00"):  # seed00: a second seed 0 (the re-check)
        (tmp_path / "parity-interpolation" / "variant" / seed).mkdir(parents=True)
        (tmp_path / "parity-interpolation" / "variant" / seed / config.WEIGHTS).write_bytes(b"")
    monkeypatch.setattr(config, "PRETRAINED_DIR", tmp_path)
    assert config.shipped_runs() == {"parity-interpolation": {"variant": [0]}}
    assert [run["seed"] for run in checkpoints.available_pretrained(tmp_path)] == [0]
    run_dir = tmp_path / "parity-interpolation" / "variant"
    (run_dir / "seed0" / "metadata.json").write_text('{"config": [1]}')
    assert cli._readable_run_name(run_dir) == "parity-interpolation/variant"


def test_a_folder_swapped_for_a_link_while_training_deletes_nothing_outside(tmp_path, monkeypatch):
    """Re-check of round 9: after the model file was written, train() removed checkpoints/ and
    resume.json by path, and prune_for_shipping removed logs/ with no check at all: a folder on the way
    swapped for a link during the hours of training had them delete a folder outside the output folder.
    Break: shutil.rmtree(run_dir / "checkpoints") back in _train, or in prune_for_shipping."""
    run = test_faults.tiny(tmp_path / "out", epochs=1)
    victim = tmp_path / "victim" / run.run_dir.name
    for sub in ("checkpoints", "logs"):
        (victim / sub).mkdir(parents=True)
        (victim / sub / "precious.txt").write_text("a user's file")
    real = training.save_weights

    def save_then_swap(module, path, *inside):  # what another process may do meanwhile
        real(module, path, *inside)
        os.rename(run.run_dir.parent, tmp_path / "moved")
        run.run_dir.parent.symlink_to(victim.parent, target_is_directory=True)

    monkeypatch.setattr(training, "save_weights", save_then_swap)
    with pytest.raises(FileExistsError, match="symbolic link or lies outside"):
        training.train(run)
    plan = {"s": [SimpleNamespace(run_dir=run.run_dir)]}
    with pytest.raises(FileExistsError, match="symbolic link or lies outside"):
        studies.prune_for_shipping([SimpleNamespace(name="s", ship="weights")], tmp_path / "out", plan)
    assert all((victim / sub / "precious.txt").exists() for sub in ("checkpoints", "logs"))


def test_an_output_folder_given_with_a_tilde_is_the_one_checked(tmp_path, monkeypatch):
    """--output-dir=~/o reaches the package as it is (the shell expands no ~ after '='): check_inside
    read $HOME/o while the run was written in ./~/o, where a link was never checked. Break: run_dir
    without expanduser()."""
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    run = test_faults.tiny("~/o", epochs=1)
    assert run.run_dir.is_relative_to(tmp_path / "home" / "o")


def test_an_evaluation_through_a_folder_swapped_for_a_link_deletes_nothing_outside(tmp_path, monkeypatch):
    """evaluate_run removed evaluation.json and the decisions table by path before writing the new
    ones: a folder on the way swapped for a link while the model was evaluated had it delete them in a
    folder outside. Break: (run_dir / "evaluation.json").unlink(missing_ok=True) in evaluate_run."""
    run = test_faults.tiny(tmp_path / "out", epochs=1)
    training.train(run)
    victim = tmp_path / "victim" / run.run_dir.name
    victim.mkdir(parents=True)
    (victim / "evaluation.json").write_text("a user's file")
    real = evaluation.summarize

    def swap_then_summarize(*args, **kwargs):  # what another process may do while the model is evaluated
        os.rename(run.run_dir.parent, tmp_path / "moved")
        run.run_dir.parent.symlink_to(victim.parent, target_is_directory=True)
        return real(*args, **kwargs)

    monkeypatch.setattr(evaluation, "summarize", swap_then_summarize)
    with pytest.raises(FileExistsError, match="symbolic link or lies outside"):
        evaluation.evaluate_run(run, limit=8, overwrite=True)
    assert (victim / "evaluation.json").read_text() == "a user's file"


def test_a_table_of_more_quotes_than_the_bound_is_refused_before_they_are_listed(tmp_path, monkeypatch):
    """The quotes are walked one by one in Python: their count is bounded before the list of their
    places is built (a 64 MiB table of quotes listed first would take gigabytes). Break: drop the
    bound in untrusted._rows."""
    from pondernet_tutorial import untrusted

    monkeypatch.setattr(untrusted, "MAX_QUOTES", 10)
    path = tmp_path / "table.csv"
    path.write_text("a,b\n" + '"x",1\n' * 6)  # 12 quotes
    with pytest.raises(DamagedFileError, match="more than 10 quotes"):
        read_table(path)
    path.write_text("a,b\n" + '"x",1\n' * 5)  # 10 quotes: read
    assert len(read_table(path)) == 5
