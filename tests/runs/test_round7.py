"""Round 7 of attacks on the run machinery, each confirmed before its fix.

Each test failed on the code before its fix (the break is named in its docstring).
"""

import errno

import pandas as pd
import pytest
import test_faults
import test_resume
import test_untrusted_runs
import torch
from test_faults import tiny_study  # noqa: F401 (a fixture, used by name)
from test_round6 import stopped  # noqa: F401 (a fixture, used by name)

from pondernet_tutorial import untrusted
from pondernet_tutorial.runs import cli, training
from pondernet_tutorial.runs.build import make_datamodule, make_module
from pondernet_tutorial.runs.config import WEIGHTS
from pondernet_tutorial.runs.resume import KeptRunError, trained_weights
from pondernet_tutorial.runs.training import RunExistsError, train
from pondernet_tutorial.untrusted import read_json, read_table

REFUSALS = {  # errors of the system, not verdicts on a file: a read the permissions or the disk refuse
    "no permission": lambda path=None: PermissionError(errno.EACCES, "Permission denied", path),
    "an I/O error": lambda path=None: OSError(errno.EIO, "Input/output error", path),
}


def _refuse_open(monkeypatch, name: str, error) -> list:
    """Every open of a file called ``name`` through :func:`untrusted.open_regular` raises ``error(path)``;
    the list returned records each refusal."""
    real, refused = untrusted.open_regular, []

    def refusing(path, *args, **kwargs):
        if str(path).endswith(name):
            refused.append(path)
            raise error(str(path))
        return real(path, *args, **kwargs)

    monkeypatch.setattr(untrusted, "open_regular", refusing)
    return refused


@pytest.mark.parametrize("refusal", REFUSALS)
def test_a_refused_read_of_resume_json_keeps_the_unfinished_run(stopped, monkeypatch, refusal):  # noqa: F811
    """resume.json that the permissions refuse to open says nothing of the run: the error is raised,
    and the next call continues from the last epoch. (Before, read_json took a permission error for a
    missing record: train() deleted the unfinished run and trained it from epoch 0.)"""
    with monkeypatch.context() as patch:
        refused = _refuse_open(patch, "resume.json", REFUSALS[refusal])
        with pytest.raises(OSError):
            train(stopped)
        assert refused
    assert (stopped.run_dir / "checkpoints" / "last.ckpt").is_file()
    started = []
    test_resume.stop_at_epoch(monkeypatch, -1, started)
    _, metadata = train(stopped)
    assert started == [2, 3] and metadata["resumed"]


@pytest.mark.parametrize("name", ["metadata.json", WEIGHTS])
@pytest.mark.parametrize("refusal", REFUSALS)
def test_a_refused_read_of_a_finished_run_keeps_its_model(tmp_path, monkeypatch, name, refusal):
    """A finished run whose metadata.json or model file cannot be read for a reason of the system (no
    permission, an I/O error) is kept as it is: the error is raised, nothing is trained or deleted.
    (Before, either read came back as a damaged run, "training it again": the finished model was
    deleted and trained anew, and with no permission the warning called the run damaged.)"""
    config = test_faults.tiny(tmp_path)
    train(config)
    model = (config.run_dir / WEIGHTS).read_bytes()
    with monkeypatch.context() as patch:
        refused = _refuse_open(patch, name, REFUSALS[refusal])
        with pytest.raises(OSError) as raised:
            train(config)
        assert refused and not isinstance(raised.value, untrusted.DamagedFileError)
    assert (config.run_dir / WEIGHTS).read_bytes() == model
    with pytest.raises(RunExistsError):
        train(config)


def test_read_json_says_no_record_only_of_the_record(tmp_path, monkeypatch):
    """None means "no record here": a missing file, a link, a file that is not JSON. A read that the
    system refuses is raised (before: None for a permission error)."""
    assert read_json(tmp_path / "missing.json") is None
    assert read_json(tmp_path / "no-folder" / "record.json") is None
    (tmp_path / "record.json").write_text("{not json")
    assert read_json(tmp_path / "record.json") is None
    (tmp_path / "record.json").write_text('{"a": 1}')
    (tmp_path / "link.json").symlink_to(tmp_path / "record.json")
    assert read_json(tmp_path / "link.json", follow_links=False) is None
    assert read_json(tmp_path / "link.json") == {"a": 1}
    for refusal in REFUSALS.values():
        with monkeypatch.context() as patch:
            _refuse_open(patch, "record.json", refusal)
            with pytest.raises(OSError) as raised:
                read_json(tmp_path / "record.json")
            assert raised.value.errno == refusal().errno


@pytest.mark.parametrize("refusal", REFUSALS)
def test_a_refused_read_of_a_table_is_raised_as_it_is(tmp_path, monkeypatch, refusal):
    """A table whose read the system refuses is not called "not a readable table" (which the run
    machinery answers by making it again): the error is raised as it is."""
    (tmp_path / "table.csv").write_text("a,b\n1,2\n")
    real = untrusted._Capped.read

    def refusing(self, *args):
        raise REFUSALS[refusal]()

    monkeypatch.setattr(untrusted._Capped, "read", refusing)
    with pytest.raises(OSError) as raised:
        read_table(tmp_path / "table.csv")
    assert not isinstance(raised.value, untrusted.DamagedFileError)
    monkeypatch.setattr(untrusted._Capped, "read", real)
    assert read_table(tmp_path / "table.csv").shape == (1, 2)


def test_the_command_line_says_a_failed_read_in_one_line(tmp_path, monkeypatch, capsys, tiny_study):  # noqa: F811
    """An I/O error reading a finished run's model file ends the command with one line that names the
    file and says that nothing was deleted (before: the run was taken for a damaged one, deleted and
    trained again)."""
    argv = ["reproduce", "--study", "faults", "--quick", "--output-dir", str(tmp_path)]
    assert cli.main(argv) == 0
    models = {path: path.read_bytes() for path in tmp_path.rglob(WEIGHTS)}
    capsys.readouterr()
    _refuse_open(monkeypatch, WEIGHTS, REFUSALS["an I/O error"])
    code = cli.main([*argv, "--reevaluate"])  # the model is read again
    err = capsys.readouterr().err.strip()
    assert code == 1 and len(err.splitlines()) == 1, err
    assert WEIGHTS in err and "Input/output error" in err and "nothing was deleted" in err
    assert len(models) == 2 and all(path.read_bytes() == data for path, data in models.items())


@pytest.mark.parametrize("method", ["pondernet", "act", "fixed", "hrm", "trm"])
def test_adam_state_must_cover_exactly_the_weights_a_step_trains(tmp_path, monkeypatch, capsys, method):
    """Adam's state deleted for one weight of last.ckpt made the resumed run restart Adam for that weight
    (its moments and step count from zero) without a word: the run then differed from the one trained
    in one go. The weights with state must be those a training step gives a gradient, which depend on
    the method (FixedSteps never trains its halting head): each method's own run still resumes, and the
    forged one is trained again in one line. (Before: the forged checkpoint resumed.)"""
    config = test_untrusted_runs.stopped_run(tmp_path / "kept", monkeypatch, method=method)
    started = []
    test_resume.stop_at_epoch(monkeypatch, -1, started)
    _, metadata = train(config)
    assert started == [2, 3] and metadata["resumed"]
    monkeypatch.undo()

    config = test_untrusted_runs.stopped_run(tmp_path / "forged", monkeypatch, method=method)

    def one_weight_fewer(checkpoint):
        state = checkpoint["optimizer_states"][0]["state"]
        del state[max(state)]

    test_untrusted_runs.edit_last(config, one_weight_fewer)
    test_untrusted_runs.resumes_again(config, capsys, "Adam's state for other weights than a step trains")


def test_finding_the_trained_weights_changes_nothing(tmp_path):
    """The forward and backward pass that finds the trained weights leaves the module (its weights,
    gradients and mode) and the random state as they were."""
    config = test_faults.tiny(tmp_path, experiment="mnist-interpolation", quick=True)
    module, datamodule = make_module(config), make_datamodule(config)
    datamodule.setup("fit")
    module.model.eval()
    before = {k: v.clone() for k, v in module.state_dict().items()}
    rng = torch.random.get_rng_state()
    assert trained_weights(module, datamodule) == set(range(len(list(module.parameters()))))
    assert not module.model.training and all(p.grad is None for p in module.parameters())
    assert all(torch.equal(v, before[k]) for k, v in module.state_dict().items())
    assert torch.equal(torch.random.get_rng_state(), rng)


class _Killed(BaseException):
    """A kill: nothing after it runs, as a SIGKILL leaves the folder."""


@pytest.mark.parametrize("stop", [{"stop_at_val_acc": 0.01}, {"early_stopping_patience": 1}])
def test_a_run_killed_after_early_stopping_resumes_to_the_same_run(tmp_path, monkeypatch, stop):
    """A run that early stopping ended, killed while it wrote its model file, is resumed from the last
    epoch's last.ckpt: it ends there, as the run did. (Before, Lightning restored the callback's reason
    to stop but not the Trainer's decision, and trained another epoch: a different run, its best epoch
    and weights changed.)"""
    options = {**stop, "select_by": "epoch"}  # the last epoch's weights: another epoch changes them
    whole, whole_meta = train(test_resume.tiny(tmp_path / "whole", **options))
    assert whole_meta["stopped_by"] != "max_epochs"
    config = test_resume.tiny(tmp_path / "parts", **options)
    with monkeypatch.context() as patch:
        patch.setattr(training, "save_weights", lambda *a, **k: (_ for _ in ()).throw(_Killed()))
        with pytest.raises(_Killed):
            train(config)
    parts, meta = train(config)
    assert meta["resumed"] and meta["epochs_run"] == whole_meta["epochs_run"]
    assert meta["stopped_by"] == whole_meta["stopped_by"] and meta["best_epoch"] == whole_meta["best_epoch"]
    assert all(torch.equal(a, b) for a, b in zip(whole.state_dict().values(), parts.state_dict().values()))


@pytest.mark.parametrize(
    "forge",
    [
        {"best_score": torch.tensor([0.5, 0.5, 0.5])},  # (before: every resume ended in a traceback)
        {"patience": 0, "wait_count": 10**6},  # (before: stopped after one more epoch, 'patience_exhausted')
        "history",  # the last epoch's val/acc in metrics.csv (a re-check: the run stopped at 2 of 4 epochs)
    ],
    ids=["three best scores", "patience 0", "a forged history"],
)
def test_an_early_stopping_state_that_its_history_does_not_give_is_refused(
    stopped,  # noqa: F811
    capsys,
    forge,
):
    """last.ckpt's EarlyStopping state is data that Lightning restores as it is. It must be the state
    that Lightning's own rule reaches over the run's history: a forged state, or a forged history, is
    one line, and the run is trained again."""
    if forge == "history":
        metrics = next((stopped.run_dir / "logs").rglob("metrics.csv"))
        table = pd.read_csv(metrics)
        table.loc[table["val/acc"].last_valid_index(), "val/acc"] = 1.0
        table.to_csv(metrics, index=False)
    else:
        test_untrusted_runs.edit_last(
            stopped,
            lambda c: next(
                s.update(forge) for k, s in c["callbacks"].items() if k.startswith("EarlyStopping")
            ),
        )
    test_untrusted_runs.resumes_again(
        stopped, capsys, "its early stopping's state is not the one its history gives"
    )


@pytest.mark.parametrize(
    "failure",
    [
        RuntimeError("CUDA error: uncorrectable ECC error encountered"),
        RuntimeError("NCCL error in: ProcessGroupNCCL.cpp:1970, unhandled system error"),
        type("AcceleratorError", (RuntimeError,), {})("device lost"),
        RuntimeError("CUDA driver error: unknown error"),  # (a re-check: these three were not known)
        RuntimeError("Triton Error [CUDA]: an illegal memory access was encountered"),
        RuntimeError("XPU error: device lost"),
    ],
    ids=["ECC", "NCCL", "AcceleratorError", "driver", "Triton", "XPU"],
)
def test_a_failure_of_the_device_while_resuming_keeps_the_unfinished_run(stopped, monkeypatch, failure):  # noqa: F811
    """A CUDA, ECC or NCCL error while Lightning restores an unfinished run (here: as it moves Adam's
    state to the device) says nothing of the run: it is raised, the folder is kept, and the next call
    continues. (Before, any RuntimeError of the restore was "Lightning could not restore it": the run
    was deleted and trained from epoch 0.)"""
    from lightning.pytorch.trainer.connectors import checkpoint_connector

    connector = checkpoint_connector._CheckpointConnector
    with monkeypatch.context() as patch:
        patch.setattr(
            connector, "restore_optimizers_and_schedulers", lambda self: (_ for _ in ()).throw(failure)
        )
        with pytest.raises(RuntimeError):
            train(stopped)
    assert (stopped.run_dir / "checkpoints" / "last.ckpt").is_file()
    started = []
    test_resume.stop_at_epoch(monkeypatch, -1, started)
    _, metadata = train(stopped)
    assert started == [2, 3] and metadata["resumed"]


def test_evaluate_never_replaces_a_device_or_a_fifo(tmp_path, capsys):
    """`evaluate --output PATH` wrote beside PATH and renamed its file onto it: a FIFO or a device node
    (as root, /dev/null itself) became a regular file. Now --output must name a regular file or a new
    one (one line, exit 2), and no atomic write replaces anything but a file."""
    import os
    import stat

    from pondernet_tutorial.runs.files import atomic_file

    config = test_faults.tiny(tmp_path / "runs")
    train(config)
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    code = cli.main(["evaluate", "--checkpoint", str(config.run_dir), "--limit", "5", "--output", str(fifo)])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1 and "not a regular file" in err, err
    with pytest.raises(FileExistsError, match="never replaced"):
        with atomic_file(fifo) as handle:
            handle.write("text")
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode) and not list(tmp_path.glob(".fifo*"))


def test_a_run_folders_model_file_is_never_read_through_a_link(tmp_path, capsys):
    """A run's model.safetensors that is a link out of its folder was read where it leads: the run
    counted as finished, and load_model loaded the outside file. Now, as for the run's other records,
    the link is not followed: the folder is kept in one line (a link is nothing a run writes: a DVC or
    git-annex checkout), trained again with overwrite, and the outside file is left as it was."""
    from pondernet_tutorial.runs.checkpoints import load_model
    from pondernet_tutorial.runs.resume import completed_run
    from pondernet_tutorial.untrusted import CheckpointError

    config = test_faults.tiny(tmp_path / "runs")
    train(config)
    outside = tmp_path / "outside.safetensors"
    (config.run_dir / WEIGHTS).rename(outside)
    (config.run_dir / WEIGHTS).symlink_to(outside)
    kept = outside.read_bytes()
    with pytest.raises(CheckpointError, match="symbolic link"):
        load_model(config.run_dir / WEIGHTS, config=config)
    with pytest.raises(KeptRunError, match="symbolic link"):  # kept: never taken for finished or removed
        completed_run(config.run_dir, config.identity())
    (config.run_dir / "metadata.json").rename(tmp_path / "metadata.json")  # (a re-check: then it was)
    with pytest.raises(CheckpointError, match="symbolic link"):
        load_model(config.run_dir / WEIGHTS, config=config)
    (tmp_path / "metadata.json").rename(config.run_dir / "metadata.json")
    with pytest.raises(KeptRunError, match="model.safetensors is a symbolic link, which is not followed"):
        train(config)  # (before round 7: RunExistsError; before round 10: removed and trained again)
    _, metadata = train(config, overwrite=True)
    assert not (config.run_dir / WEIGHTS).is_symlink() and outside.read_bytes() == kept
    assert metadata["epochs_run"] == 1


def test_a_row_of_a_table_is_bounded_as_its_header_is(tmp_path):
    """The header's columns were bounded, not a row's: a first row of 128 KiB of commas took 274 MiB
    and 17 s in pandas (an index of one level per extra field), 8 MiB more than 12 GiB. A row of
    MAX_COLUMNS commas is now refused before pandas reads it, whichever reads it spans."""
    import io

    from pondernet_tutorial.untrusted import MAX_COLUMNS, DamagedFileError, _Capped

    path = tmp_path / "summary.csv"
    path.write_bytes(b"set,accuracy\n" + b"," * MAX_COLUMNS + b"\n")
    with pytest.raises(DamagedFileError, match="a row of it is longer than"):
        read_table(path)
    for size in (1, 7, 4096):  # the long row read in pieces
        capped = _Capped(io.BytesIO(b"a,b\n1,2\n" + b"," * MAX_COLUMNS + b"\n"), 2**20, path)
        with pytest.raises(DamagedFileError, match="a row of it is longer than"):
            while capped.read(size):
                pass
        capped = _Capped(io.BytesIO(b"a,b\n1,2\n" + b"," * (MAX_COLUMNS - 1) + b"\n3,4\n"), 2**20, path)
        assert sum(len(capped.read(size)) for _ in range(MAX_COLUMNS + 20)) == MAX_COLUMNS + 12  # every byte


def test_fit_says_in_one_line_that_a_checkpoint_is_another_models(tmp_path):
    """fit(ckpt_path=...) with a checkpoint of another model (a GRU of 8 units, not 16), or with Adam's
    moments of other shapes, ended in PyTorch's multi-line error from inside Lightning's restore or
    from Adam's first step; fit() promises a CheckpointError. Now each is one line."""
    import lightning as L
    from tiny_parity import QUIET, loader

    from pondernet_tutorial import ParityStep, PonderLitModule, PonderNet, fit
    from pondernet_tutorial.untrusted import CheckpointError

    def data():
        train_set, val_set = loader(64).dataset, loader(64, seed=1).dataset
        return L.LightningDataModule.from_datasets(
            train_dataset=train_set, val_dataset=val_set, batch_size=32
        )

    def small(hidden):
        return PonderLitModule(PonderNet(ParityStep(n_elements=8, hidden_size=hidden), max_steps=5))

    torch.manual_seed(0)
    fit(small(8), data(), max_epochs=1, default_root_dir=str(tmp_path / "a"), **QUIET)
    written = tmp_path / "a" / "checkpoints" / "best.ckpt"
    checkpoint = torch.load(written, weights_only=True)
    checkpoint["state_dict"] = small(16).state_dict()  # the right weights, Adam's moments of others
    torch.save(checkpoint, tmp_path / "moments.ckpt")
    torch.save({**checkpoint, "state_dict": [1, 2]}, tmp_path / "list.ckpt")  # no dictionary of weights
    cases = [(written, "its weights differ"), (tmp_path / "moments.ckpt", "its optimizer's state")]
    for path, why in [*cases, (tmp_path / "list.ckpt", "not a Lightning checkpoint")]:
        with pytest.raises(CheckpointError, match=why) as raised:
            fit(
                small(16),
                data(),
                max_epochs=2,
                ckpt_path=str(path),
                default_root_dir=str(tmp_path / "b"),
                **QUIET,
            )
        assert len(str(raised.value).splitlines()) == 1


def test_a_model_file_of_float8_weights_is_one_line(tmp_path):
    """Weights stored as float8 (safetensors' F8_E4M3) made load_model's own finiteness check fail
    (isfinite has no float8 kernel): a NotImplementedError traceback. A model file holds the weights
    in the model's own type, as training writes them; any other is one line."""
    from safetensors import safe_open
    from safetensors.torch import save_file

    from pondernet_tutorial.runs.checkpoints import load_model
    from pondernet_tutorial.untrusted import CheckpointError

    config = test_faults.tiny(tmp_path)
    train(config)
    model = config.run_dir / WEIGHTS
    with safe_open(str(model), "pt") as file:
        metadata, state = file.metadata(), {k: file.get_tensor(k) for k in file.keys()}
    name = next(iter(state))
    save_file({k: v.double() for k, v in state.items()}, str(model), metadata=metadata)
    load_model(model)  # the weights of a run trained at --precision 64-true (a re-check: refused for a while)
    state[name] = state[name].to(torch.float8_e4m3fn)
    save_file(state, str(model), metadata=metadata)
    with pytest.raises(
        CheckpointError, match="as float8_e4m3fn, not floating point of a precision"
    ) as raised:
        load_model(model)
    assert len(str(raised.value).splitlines()) == 1


def test_a_weight_named_like_a_device_error_is_refused_before_lightning_restores_it(stopped, capsys):  # noqa: F811
    """An extra weight in last.ckpt named model.cublas made Lightning's restore fail with an error that
    quoted the name, which read as a failure of the device: the run was kept, and every rerun
    (--overwrite too) failed again. The weights' names are now checked first: one line, trained again."""

    def extra_weight(checkpoint):
        checkpoint["state_dict"]["model.cublas"] = torch.zeros(1)

    test_untrusted_runs.edit_last(stopped, extra_weight)
    test_untrusted_runs.resumes_again(stopped, capsys, "its last.ckpt is not a checkpoint of this model")


def test_a_forged_best_score_is_refused_and_a_true_one_resumes(tmp_path, monkeypatch, capsys):
    """last.ckpt's best-epoch score was restored if it was any one number: -1 for a loss kept an earlier
    epoch as the best, and the resumed run ended on other weights than the run trained in one go (a
    re-check found it). The score must be the history's best; a true one resumes to the same run."""
    whole, whole_meta = train(test_resume.tiny(tmp_path / "whole", select_by="val/loss"))
    config = test_untrusted_runs.stopped_run(tmp_path / "parts", monkeypatch, select_by="val/loss")
    parts, meta = train(config)
    assert meta["resumed"] and meta["best_epoch"] == whole_meta["best_epoch"]
    assert all(torch.equal(a, b) for a, b in zip(whole.state_dict().values(), parts.state_dict().values()))

    config = test_untrusted_runs.stopped_run(tmp_path / "forged", monkeypatch, select_by="val/loss")

    def forged_score(checkpoint):
        (state,) = [s for k, s in checkpoint["callbacks"].items() if "'monitor': 'val/loss'" in k]
        state["best_model_score"] = torch.tensor(-1.0)

    test_untrusted_runs.edit_last(config, forged_score)
    test_untrusted_runs.resumes_again(config, capsys, "its best epoch's score is not the best val/loss")
