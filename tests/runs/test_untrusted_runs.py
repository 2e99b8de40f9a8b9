"""Issue 31's attacks: an unfinished run folder, a model file, a data file or an option is untrusted
input. Resuming never reaches outside its run, weights are data by construction, every read is bounded
before it is made, and the public functions guard what ``train`` guards. The rows are the issue's;
/work/notes/issue31.md says how each test was seen to fail."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
from pathlib import Path

import pytest
import test_faults
import torch
from test_resume import EPOCHS, stop_at_epoch

from pondernet_tutorial.fitting import TrainingDivergedError, fit
from pondernet_tutorial.runs import cli
from pondernet_tutorial.runs.checkpoints import CheckpointError, load_model, load_pretrained
from pondernet_tutorial.runs.config import WEIGHTS, TrainConfig
from pondernet_tutorial.runs.processes import Interrupted
from pondernet_tutorial.runs.resume import RESUME_FILE, DamagedHistoryError, KeptRunError
from pondernet_tutorial.runs.training import train


def tiny(root, **kwargs) -> TrainConfig:
    return test_faults.tiny(root, **{"epochs": EPOCHS, **kwargs})


@contextlib.contextmanager
def time_limit(seconds: float):
    """Fail (not hang) if the block is still running after ``seconds``: SIGALRM interrupts a blocking
    open or read."""

    def expire(signum, frame):
        raise AssertionError(f"still running after {seconds} s (blocked, or reading without end)")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def stopped_run(tmp_path, monkeypatch, **kwargs) -> TrainConfig:
    """A run stopped at the start of epoch 2: an unfinished folder with its last.ckpt."""
    config = tiny(tmp_path, **kwargs)
    stop_at_epoch(monkeypatch, 2, [])
    with pytest.raises(Interrupted):
        train(config)
    monkeypatch.undo()
    assert (config.run_dir / "checkpoints" / "last.ckpt").is_file()
    return config


def edit_last(config: TrainConfig, edit) -> Path:
    """Rewrite the unfinished run's last.ckpt with ``edit(checkpoint)`` applied (plain data only)."""
    last = config.run_dir / "checkpoints" / "last.ckpt"
    checkpoint = torch.load(last, weights_only=True)  # written by this test's own train()
    edit(checkpoint)
    torch.save(checkpoint, last)
    return last


def best_state(checkpoint: dict) -> dict:
    """The restored state of the callback that keeps the best epoch."""
    (key,) = [k for k in checkpoint["callbacks"] if "val/acc" in k and "Checkpoint" in k]
    return checkpoint["callbacks"][key]


def resumes_again(config: TrainConfig, capsys, reason: str) -> dict:
    """The next train() says in one line that the run cannot be continued and why, with no traceback
    and no advice to load unsafely, trains it from epoch 0, and the folder holds a finished run."""
    capsys.readouterr()
    _, metadata = train(config)
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if "cannot be continued" in line]
    assert len(lines) == 1 and reason in lines[0], err
    assert lines[0].endswith(": trained again") and "Traceback" not in err and "weights_only" not in err
    assert not metadata["resumed"] and metadata["epochs_run"] == EPOCHS
    assert not (config.run_dir / RESUME_FILE).exists() and not (config.run_dir / "checkpoints").exists()
    test_faults.assert_complete(config)
    return metadata


def folder_state(folder: Path) -> dict:
    """Every entry under ``folder`` but its folders (the logger makes an empty one for a sitting before
    the restore fails), walked without following links: a file's bytes, a link's target, else its kind
    (a FIFO is never opened)."""
    state = {}
    for here, names, files in os.walk(folder):
        for name in [*names, *files]:
            path = Path(here) / name
            if path.is_symlink():
                state[path] = ("link", os.readlink(path))
            elif path.is_file():
                state[path] = path.read_bytes()
            elif not path.is_dir():
                state[path] = "other"
    return state


def kept_then_overwritten(config: TrainConfig, capsys, reason: str) -> dict:
    """The next train() keeps the unfinished run as it is (nothing in its folder changes) and says in
    one line why and what to do; train(overwrite=True) then says in one line that it cannot be
    continued and trains it from epoch 0, and the folder holds a finished run."""
    before = folder_state(config.run_dir)
    with pytest.raises(KeptRunError) as kept:
        train(config)
    text = str(kept.value)
    assert f"the unfinished run in {config.run_dir} is kept: " in text and reason in text, text
    assert text.endswith("with --overwrite.") and "\n" not in text
    assert folder_state(config.run_dir) == before
    capsys.readouterr()
    _, metadata = train(config, overwrite=True)
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if "cannot be continued" in line]
    assert len(lines) == 1 and reason in lines[0], err
    assert not metadata["resumed"] and metadata["epochs_run"] == EPOCHS
    test_faults.assert_complete(config)
    return metadata


# ---------------------------------------------------------------------------------------------------
# Rows 1-4 and 9b: what a resumed run restores holds no path, and its folder holds no link


def test_1_a_best_path_outside_the_run_is_never_deleted(tmp_path, monkeypatch):
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "keep").write_text("mine")
    config = stopped_run(tmp_path / "runs", monkeypatch)

    checkpoints = config.run_dir / "checkpoints"
    outside = str(checkpoints / os.path.relpath(victim, checkpoints))  # .../checkpoints/../../../../victim
    assert ".." in outside and Path(outside).resolve() == victim

    def point_outside(checkpoint):
        state = best_state(checkpoint)
        state["best_model_path"] = state["kth_best_model_path"] = outside
        # the true score (a forged one is refused since round 7): a better epoch makes Lightning delete
        # the old best
        state["best_k_models"] = {outside: state["best_model_score"]}

    edit_last(config, point_outside)
    _, metadata = train(config)
    assert (victim / "keep").read_text() == "mine"
    assert metadata["resumed"]


def test_2_a_fifo_named_as_the_best_checkpoint_never_blocks(tmp_path, monkeypatch, capsys):
    config = stopped_run(tmp_path, monkeypatch)
    fifo = config.run_dir / "checkpoints" / "best-v7.ckpt"
    os.mkfifo(fifo)

    def point_at_fifo(checkpoint):
        state = best_state(checkpoint)
        state["best_model_path"] = str(fifo)
        state["best_model_score"] = torch.tensor(2.0)  # no epoch beats it: fit() reads it at the end

    edit_last(config, point_at_fifo)
    with time_limit(60):
        kept_then_overwritten(config, capsys, "best-v7.ckpt is not a regular file")


@pytest.mark.parametrize("bound, restored", [(4096, True), (1024, False)])
def test_2b_a_best_checkpoint_over_the_size_bound_is_not_restored(tmp_path, bound, restored):
    from pondernet_tutorial.checkpointing import FolderCheckpoint

    best = tmp_path / "best-v3.ckpt"
    torch.save({"epoch": 0, "state_dict": {"w": torch.zeros(200)}}, best)  # fit() would load it at the end:
    assert 1024 < best.stat().st_size < 4096  # it must be within the bound, and a checkpoint of an epoch
    callback = FolderCheckpoint(tmp_path, "best", monitor="val/acc", mode="max")
    callback.max_bytes = bound  # what setup() derives from the module's size
    callback.load_state_dict({"best_model_path": str(best), "best_model_score": torch.tensor(0.5)})
    assert callback.best_model_path == (str(best) if restored else "")


@pytest.mark.parametrize("folder", ["logs", "checkpoints"])
def test_3_4_a_linked_logs_or_checkpoints_folder_is_never_written_through(
    tmp_path, monkeypatch, capsys, folder
):
    config = stopped_run(tmp_path / "runs", monkeypatch)
    outside = tmp_path / "outside"
    shutil.copytree(config.run_dir / folder, outside)  # a copy of the run's own files, so that it resumes
    (outside / "metrics.csv").write_text("mine\n")
    before = {p: p.read_bytes() for p in outside.rglob("*") if p.is_file()}
    shutil.rmtree(config.run_dir / folder)
    (config.run_dir / folder).symlink_to(outside)
    try:
        kept_then_overwritten(config, capsys, f"{folder} is a symbolic link")
    finally:  # checked even when the line is missing: nothing outside the run was written or deleted
        assert {p: p.read_bytes() for p in outside.rglob("*") if p.is_file()} == before


def test_a_link_inside_the_logs_that_stays_in_the_run_still_resumes(tmp_path, monkeypatch):
    """wandb keeps a ``latest-run`` link in its logs, to a folder beside it: that is not an escape."""
    config = stopped_run(tmp_path, monkeypatch)
    (config.run_dir / "logs" / "wandb" / "offline-run-20261129_193624-thq0hdkt").mkdir(
        parents=True
    )  # wandb's name, as it writes it
    (config.run_dir / "logs" / "wandb" / "latest-run").symlink_to("offline-run-20261129_193624-thq0hdkt")
    _, metadata = train(config)
    assert metadata["resumed"]


def test_9b_a_run_copied_to_another_folder_resumes_as_the_run_trained_in_one_go(tmp_path, monkeypatch):
    whole, whole_meta = train(tiny(tmp_path / "whole"))
    stopped = stopped_run(tmp_path / "there", monkeypatch)
    copy = tiny(tmp_path / "here")
    shutil.copytree(stopped.run_dir, copy.run_dir)
    started = []
    stop_at_epoch(monkeypatch, -1, started)
    copied, copied_meta = train(copy)
    assert started == [2, 3] and copied_meta["resumed"]
    assert copied_meta["best_epoch"] == whole_meta["best_epoch"]
    for (name, a), (_, b) in zip(whole.state_dict().items(), copied.state_dict().items(), strict=True):
        assert torch.equal(a, b), name


# ---------------------------------------------------------------------------------------------------
# Rows 9 and 11-16: a last.ckpt that is not this run's is one line, removed, and the run trained again


def other_hparams(checkpoint):
    checkpoint["hyper_parameters"]["lr"] = 0.5
    checkpoint["datamodule_hyper_parameters"]["seed"] = 99


def other_data_hparams(checkpoint):
    checkpoint["datamodule_hyper_parameters"]["seed"] = 99


def truncate(last: Path):
    last.write_bytes(last.read_bytes()[:5000])


class Gadget:
    def __reduce__(self):
        return (os.system, ("touch should-never-exist",))


def pickle_gadget(last: Path):
    torch.save({"state_dict": {}, "payload": Gadget()}, last)


def other_shape(checkpoint):
    name = next(iter(checkpoint["state_dict"]))
    checkpoint["state_dict"][name] = torch.zeros(3, 3, 3)


def dev_zero(last: Path):
    last.unlink()
    last.symlink_to("/dev/zero")


def garbage_generator(checkpoint):
    (key,) = [k for k, v in checkpoint.items() if isinstance(v, dict) and "train_generator" in v]
    checkpoint[key]["train_generator"] = torch.zeros(7, dtype=torch.uint8)


def history_not_numbers(last: Path):
    (last.parent.parent / "logs" / "version_0" / "metrics.csv").write_text("epoch,val/acc\n0,two\n1,2\n")


def history_lost(last: Path):
    shutil.rmtree(last.parent.parent / "logs")


@pytest.mark.parametrize(
    "damage, reason",
    [
        (other_hparams, "model hyperparameters are not this configuration's"),  # row 9
        (other_data_hparams, "data hyperparameters are not this configuration's"),
        (pickle_gadget, "names posix system"),  # 11, before torch.load (round 8)
        (truncate, "not an archive that torch.save"),  # 12
        (other_shape, "is not a checkpoint of this model"),  # 13, before Lightning's restore (check_fits)
        (garbage_generator, "training batches' generator is not"),  # 15, before Lightning's restore
    ],
    ids=lambda v: getattr(v, "__name__", "reason"),
)
def test_9_11_16_a_last_checkpoint_that_is_not_this_runs_is_one_line_and_trained_again(
    tmp_path, monkeypatch, capsys, damage, reason
):
    config = stopped_run(tmp_path, monkeypatch)
    last = config.run_dir / "checkpoints" / "last.ckpt"
    if damage in (truncate, pickle_gadget):
        damage(last)
    else:
        edit_last(config, damage)
    with time_limit(120):
        resumes_again(config, capsys, reason)
    assert not Path("should-never-exist").exists()
    train(config, overwrite=True)  # and the run after it works as any other


def test_14_a_last_checkpoint_linked_to_a_device_is_never_read_and_the_run_kept(
    tmp_path, monkeypatch, capsys
):
    config = stopped_run(tmp_path, monkeypatch)
    dev_zero(config.run_dir / "checkpoints" / "last.ckpt")
    with time_limit(120):
        kept_then_overwritten(config, capsys, "checkpoints/last.ckpt is a symbolic link")


def history_cut_in_the_middle(last: Path):
    metrics = last.parent.parent / "logs" / "version_0" / "metrics.csv"
    text = metrics.read_text()
    metrics.write_text(text[: len(text) // 2] + text[-40:])  # a block lost in the middle of the file


@pytest.mark.parametrize(
    "damage, reason",
    [
        (history_not_numbers, "its history version_0/metrics.csv is not a table of numbers by epoch"),  # 16
        (history_cut_in_the_middle, "lacks values of the epochs of its last.ckpt"),
        (history_lost, "its history does not hold epochs 0 to 1, which its last.ckpt trained"),
    ],
    ids=lambda v: getattr(v, "__name__", "reason"),
)
def test_16_a_damaged_history_keeps_the_run_in_one_line_and_it_continues_once_mended(
    tmp_path, monkeypatch, capsys, damage, reason
):
    """The history logs say nothing of the last.ckpt, which may be whole: the run is kept as it is
    (nothing written or deleted), the error says what to do, and the command line exits with 2. Once
    the logs are mended from a copy, the run continues from its last epoch."""
    config = stopped_run(tmp_path / "runs", monkeypatch)
    logs = config.run_dir / "logs"
    shutil.copytree(logs, tmp_path / "copy")
    damage(config.run_dir / "checkpoints" / "last.ckpt")
    before = {p: p.read_bytes() for p in config.run_dir.rglob("*") if p.is_file()}
    with pytest.raises(DamagedHistoryError) as refused:
        train(config)
    assert str(refused.value) == (
        f"the unfinished run in {config.run_dir} is kept: {str(refused.value).split(' is kept: ')[1]}"
    )
    assert reason in str(refused.value) and str(refused.value).endswith("with --overwrite.")
    assert "\n" not in str(refused.value)
    assert {p: p.read_bytes() for p in config.run_dir.rglob("*") if p.is_file()} == before
    capsys.readouterr()  # the command line: the same run, one line, status 2, nothing changed
    argv = ["train", *map(str, test_faults.TINY_ARGS), "--epochs", str(EPOCHS)]
    assert cli.main([*argv, "--output-dir", str(tmp_path / "runs")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"{config.run_dir} is kept: " in err and "Traceback" not in err, err
    assert {p: p.read_bytes() for p in config.run_dir.rglob("*") if p.is_file()} == before
    shutil.rmtree(logs)
    shutil.copytree(tmp_path / "copy", logs)
    started = []
    stop_at_epoch(monkeypatch, -1, started)
    _, metadata = train(config)
    assert started == [2, 3] and metadata["resumed"] and metadata["epochs_run"] == EPOCHS


def test_16b_a_damaged_history_is_trained_again_with_overwrite(tmp_path, monkeypatch, capsys):
    config = stopped_run(tmp_path, monkeypatch)
    history_lost(config.run_dir / "checkpoints" / "last.ckpt")
    kept_then_overwritten(config, capsys, "its history does not hold epochs 0 to 1")


def test_a_restore_that_fails_inside_lightning_is_one_line_and_trained_again(tmp_path, monkeypatch, capsys):
    """What the checks before resuming do not see (here: the training loop's state) fails in Lightning's
    own restore: the same one line, and the run is trained again in the same call."""
    config = stopped_run(tmp_path, monkeypatch)

    def damaged_loop(checkpoint):
        checkpoint["loops"]["fit_loop"] = 5

    edit_last(config, damaged_loop)
    resumes_again(config, capsys, "(Lightning could not restore it: ")


def test_13_an_optimizer_state_of_another_shape_is_one_line_and_trained_again(tmp_path, monkeypatch, capsys):
    """Lightning restores it without a check, and the first step fails: checked before resuming."""
    config = stopped_run(tmp_path, monkeypatch)

    def other_optimizer(checkpoint):
        checkpoint["optimizer_states"][0]["state"][0]["exp_avg"] = torch.zeros(5)

    edit_last(config, other_optimizer)
    resumes_again(config, capsys, "optimizer state is not Adam's for this model's weights")


# ---------------------------------------------------------------------------------------------------
# Rows 5-8, 17-18: every read is bounded before it is made


def test_5_an_idx_file_whose_size_disagrees_with_its_header_is_never_read(tmp_path):
    from pondernet_tutorial.data.mnist import MNISTDamagedError, read_idx

    path = tmp_path / "train-images-idx3-ubyte"
    with open(path, "wb") as file:
        file.write((0x803).to_bytes(4, "big") + b"".join(n.to_bytes(4, "big") for n in (60000, 28, 28)))
        file.truncate(16 + 16 * 2**30)  # a 16 GiB hole: read whole, it would fill the memory
    with time_limit(10), pytest.raises(MNISTDamagedError, match="17,179,869,200 bytes|17179869200 bytes"):
        read_idx(path, (60000, 28, 28))


def test_17_labels_outside_0_to_9_are_a_damaged_file(tmp_path):
    from pondernet_tutorial.data.mnist import MNISTDamagedError, load_mnist

    raw = tmp_path / "MNIST" / "raw"
    raw.mkdir(parents=True)
    for prefix, count in (("train", 60000), ("t10k", 10000)):
        images, labels = raw / f"{prefix}-images-idx3-ubyte", raw / f"{prefix}-labels-idx1-ubyte"
        with open(images, "wb") as file:
            file.write(b"".join(n.to_bytes(4, "big") for n in (0x803, count, 28, 28)))
            file.truncate(16 + count * 784)
        labels.write_bytes(b"".join(n.to_bytes(4, "big") for n in (0x801, count)) + bytes([200]) * count)
    with pytest.raises(MNISTDamagedError, match="label 200"):
        load_mnist(train=True, data_dir=tmp_path)


def test_6_a_model_file_that_declares_more_weights_than_its_size_is_refused_before_allocating(
    tmp_path, monkeypatch
):
    """A 3 GiB tensor declared by a small file: refused from the header, before any weight is read; and
    a whole file of more weights than the maximum is refused from its header too."""
    from pondernet_tutorial.runs import checkpoints

    header = {
        "__metadata__": {"format": checkpoints.FORMAT, "hparams": "{}"},
        "weights": {"dtype": "F32", "shape": [3 * 2**28], "data_offsets": [0, 3 * 2**30]},
    }
    text = json.dumps(header).encode()
    path = tmp_path / WEIGHTS
    path.write_bytes(len(text).to_bytes(8, "little") + text + bytes(1000))
    with time_limit(10), pytest.raises(CheckpointError, match="not a whole model.safetensors file"):
        load_model(path)
    path = test_faults.write_weights(tmp_path / "many.safetensors", {}, {"w": torch.zeros(2000)})
    monkeypatch.setattr(checkpoints, "MAX_PARAMETERS", 1000)
    with pytest.raises(CheckpointError, match="declares 2,000 weights, more than 1,000"):
        load_model(path)


def test_7_evaluate_refuses_more_rotated_sets_than_its_maximum(capsys):
    angles = [str(a) for a in range(400)]
    argv = ["evaluate", "--pretrained", "mnist-interpolation", "--limit", "1", "--angles", *angles]
    with time_limit(30):
        assert cli.main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "at most 64 rotated test sets" in err[0]


def test_8_reproduce_jobs_are_capped_at_the_cores(tmp_path, capsys):
    assert cli.main(["reproduce", "--jobs", "10000", "--output-dir", str(tmp_path), "--quick"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"[1, {os.cpu_count()}]" in err[0]
    assert not list(tmp_path.iterdir())


def test_18_a_seed_beyond_32_bits_is_one_line(tmp_path, capsys):
    assert cli.main(["train", "--seed", str(2**32), "--output-dir", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "seed must be <= 4,294,967,295" in err[0].replace("4294967295", "4,294,967,295")
    TrainConfig(seed=2**32 - 1)  # the largest seed is fine


def test_out_of_memory_advice_names_options_of_the_command_that_ran(tmp_path, monkeypatch, capsys):
    from pondernet_tutorial.runs import checkpoints

    parser = cli.build_parser()
    commands = parser._subparsers._group_actions[0].choices
    for command, advice in cli.OUT_OF_MEMORY.items():
        flags = {flag for action in commands[command]._actions for flag in action.option_strings}
        named = {word.strip("(),.") for word in advice.split() if word.startswith(("--", "(--"))}
        assert named and named <= flags, (command, named - flags)

    def refuse(*args, **kwargs):
        raise MemoryError

    monkeypatch.setattr(checkpoints, "load_pretrained", refuse)
    argv = ["evaluate", "--pretrained", "parity-interpolation", "--limit", "4"]
    assert cli.main(argv) == 2
    err = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error:")]
    assert (
        len(err) == 1 and "out of memory" in err[0] and "--limit" in err[0] and "--batch-size" not in err[0]
    )


# ---------------------------------------------------------------------------------------------------
# Rows 10, 19, 20: the public functions guard what train() guards


def test_10_fit_stops_on_a_non_finite_loss_with_one_clear_error(tmp_path):
    from pondernet_tutorial import ParityStep, PonderLitModule, PonderNet
    from pondernet_tutorial.data.modules import ParityDataModule

    class NaNParity(ParityDataModule):
        def draw(self, batch, k_range, generator=None):
            x, y, k = super().draw(batch, k_range, generator)
            return torch.full_like(x, float("nan")), y, k

    module = PonderLitModule(PonderNet(ParityStep(n_elements=8, hidden_size=8), max_steps=3))
    data = NaNParity(n_elements=8, batch_size=32, train_subset=64, val_size=64)
    with pytest.raises(TrainingDivergedError, match="diverged in epoch 1") as error:
        fit(module, data, 2, logger=False, enable_progress_bar=False, default_root_dir=tmp_path)
    assert "\n" not in str(error.value)


def test_19_diagnose_refuses_an_empty_batch():
    from pondernet_tutorial import ParityStep, PonderLitModule, PonderNet, diagnose

    module = PonderLitModule(PonderNet(ParityStep(n_elements=16, hidden_size=8)))
    with pytest.raises(ValueError, match="at least one input"):
        diagnose(module, torch.zeros(0, 16), show=False)


def test_20_load_pretrained_refuses_an_option_that_the_method_does_not_take():
    with pytest.raises(CheckpointError, match="lambda_p is an option of pondernet, not of act"):
        load_pretrained("parity-interpolation", method="act", lambda_p=0.1)
