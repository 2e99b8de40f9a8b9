"""Issue 22's attacks: a stop is never a success, the shipped runs cannot be overwritten, no option or
file sizes memory without bound, files are read only when they are regular and small, and folder names
stay inside the output folder. Each test failed on the code before these changes (67639c4)."""

from __future__ import annotations

import errno
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import test_faults
from stand_in_tables import write_run_tables
from test_faults import TINY_ARGS, gadget_checkpoint, leftovers, tiny

from pondernet_tutorial.runs import checkpoints, cli, studies, training
from pondernet_tutorial.runs.checkpoints import CheckpointError, load_model
from pondernet_tutorial.runs.config import PRETRAINED_DIR, WEIGHTS
from pondernet_tutorial.runs.processes import Interrupted
from pondernet_tutorial.runs.studies import reproduce
from pondernet_tutorial.runs.training import train
from pondernet_tutorial.steps.parity import ParityStep

tiny_study = pytest.fixture(test_faults.tiny_study.__wrapped__)


# ---------------------------------------------------------------------------------------------------
# Rows 1-2: interrupted means failed

SIGNALS = [signal.SIGTERM, signal.SIGINT, signal.SIGHUP]


@pytest.fixture(autouse=True)
def signals_at_their_default():
    """SIGHUP and SIGINT at their defaults, as in a terminal: under ``nohup`` the runner ignores SIGHUP,
    and a shell without job control starts a background runner with SIGINT ignored; the handler rightly
    leaves an ignored signal alone (the tests of that signal then test nothing, or fail)."""
    previous = {
        signal.SIGHUP: signal.signal(signal.SIGHUP, signal.SIG_DFL),
        signal.SIGINT: signal.signal(signal.SIGINT, signal.default_int_handler),
    }
    yield
    for number, handler in previous.items():
        signal.signal(number, handler)


def send_at_first_epoch(monkeypatch, signum):
    start = training.EpochClock.on_train_epoch_start

    def send(self, trainer, pl_module):
        start(self, trainer, pl_module)  # the epoch starts as it would (the clock is read at its end)
        os.kill(os.getpid(), signum)

    monkeypatch.setattr(training.EpochClock, "on_train_epoch_start", send)


@pytest.mark.parametrize("signum", SIGNALS, ids=lambda s: s.name)
def test_a_signal_during_train_raises_keyboard_interrupt_and_keeps_no_model(tmp_path, monkeypatch, signum):
    config = tiny(tmp_path)
    send_at_first_epoch(monkeypatch, signum)
    with pytest.raises(KeyboardInterrupt) as caught:  # never SystemExit: a caller's except sees it
        train(config)
    assert isinstance(caught.value, Interrupted) and caught.value.exit_code == 128 + signum
    assert not (config.run_dir / WEIGHTS).exists()
    assert leftovers(tmp_path) == []  # the lock is released
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL  # the caller's handlers come back


@pytest.mark.parametrize("signum", SIGNALS, ids=lambda s: s.name)
def test_a_signal_during_the_train_command_exits_128_plus_it_in_one_line(
    tmp_path, monkeypatch, capsys, signum
):
    send_at_first_epoch(monkeypatch, signum)
    code = cli.main(["train", *map(str, TINY_ARGS), "--output-dir", str(tmp_path)])
    assert code == 128 + signum
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith(f"error: interrupted by {signum.name}") and "rerun" in err[-1]
    assert not list(tmp_path.rglob(WEIGHTS))


def test_sigterm_during_reproduce_exits_143_and_the_rerun_finishes(tmp_path, monkeypatch, capsys, tiny_study):
    send_at_first_epoch(monkeypatch, signal.SIGTERM)
    code = cli.main(["reproduce", "--study", "faults", "--quick", "--output-dir", str(tmp_path)])
    assert code == 143
    line = capsys.readouterr().err.strip().splitlines()[-1]
    assert line.startswith("error: interrupted by SIGTERM") and "rerun" in line
    assert not (tmp_path / "studies" / "faults" / "study.json").exists()
    assert leftovers(tmp_path) == []
    monkeypatch.undo()
    monkeypatch.setitem(studies.STUDIES, "faults", tiny_study)
    reproduce(["faults"], output_dir=tmp_path, quick=True)
    assert json.loads((tmp_path / "studies" / "faults" / "study.json").read_text())["n_runs"] == 2


# ---------------------------------------------------------------------------------------------------
# Row 3: the shipped runs are read-only without --ship


def snapshot(folder: Path) -> dict:
    return {str(p): (p.stat().st_size, p.stat().st_mtime_ns) for p in folder.rglob("*")}


def shipped_spellings(tmp_path) -> list[str]:
    """The shipped folder as itself, below it, relative with ``..``, and through a symbolic link."""
    link = tmp_path / "link"
    link.symlink_to(PRETRAINED_DIR)
    relative = os.path.relpath(PRETRAINED_DIR / "parity-interpolation", Path.cwd())
    return [
        str(PRETRAINED_DIR),
        str(PRETRAINED_DIR / "new" / "deeper"),
        str(PRETRAINED_DIR / ".." / "pretrained"),
        relative,
        str(link),
        str(link / "studies"),
    ]


def every_command(folder: str) -> list[list[str]]:
    return [
        ["train", *map(str, TINY_ARGS), "--output-dir", folder],
        ["train", "--quick", "--overwrite", "--output-dir", folder],
        ["reproduce", "--quick", "--output-dir", folder],
        ["reproduce", "--study", "all", "--overwrite", "--output-dir", folder],
        ["evaluate", "--pretrained", "parity-interpolation", "--output", str(Path(folder) / "x.csv")],
    ]


def test_no_command_writes_into_the_shipped_folder_without_ship(tmp_path, monkeypatch, capsys):
    def no_work(*args, **kwargs):
        raise AssertionError("work started")

    monkeypatch.setattr(training, "train", no_work)
    monkeypatch.setattr(studies, "reproduce", no_work)
    before = snapshot(PRETRAINED_DIR)
    for folder in shipped_spellings(tmp_path):
        for argv in every_command(folder):
            assert cli.main(argv) == 2, argv
            err = capsys.readouterr().err.strip().splitlines()
            assert len(err) == 1 and "read-only" in err[0], (argv, err)
    assert snapshot(PRETRAINED_DIR) == before


def test_reproduce_from_python_refuses_the_shipped_folder(tmp_path):
    link = tmp_path / "link"
    link.symlink_to(PRETRAINED_DIR)
    for folder in (PRETRAINED_DIR, link / "x"):
        with pytest.raises(ValueError, match="read-only"):
            reproduce(["mnist-reference"], output_dir=folder, quick=True)


def test_train_and_evaluate_from_python_write_into_the_shipped_folder_only_when_shipping(
    tmp_path, monkeypatch
):
    """train(), evaluate_run() and evaluate_halting() with overwrite replaced a shipped run's model
    file and tables when given the shipped folder as output_dir (the command line refused it; Python
    did not). Now only reproduce --ship (ship=True, through run_one) writes there; reading a shipped
    run's tables stays allowed. Break: drop the ``if not ship`` check from _train, or from
    evaluate_run's or evaluate_halting's writing path."""
    from pondernet_tutorial.runs import config as config_module
    from pondernet_tutorial.runs.evaluation import evaluate_halting, evaluate_run
    from pondernet_tutorial.runs.studies import run_one

    shipped = tmp_path / "pretrained"  # the shipped folder, as the package sees it
    run = tiny(shipped, epochs=1)
    monkeypatch.setattr(config_module, "PRETRAINED_DIR", shipped)
    assert (
        run_one(run, limit=8, overwrite=False, reevaluate=False, threads=None, ship=True)["done"] == "trained"
    )
    before = snapshot(shipped)
    with pytest.raises(ValueError, match="read-only"):
        train(run, overwrite=True)
    with pytest.raises(ValueError, match="read-only"):
        evaluate_run(run, limit=8, overwrite=True)
    with pytest.raises(ValueError, match="read-only"):
        evaluate_halting(run, limit=8, overwrite=True)
    with pytest.raises(ValueError, match="read-only"):
        run_one(run, limit=8, overwrite=True, reevaluate=False, threads=None)
    assert snapshot(shipped) == before
    assert "summary" in evaluate_run(run, limit=8)  # reading is allowed
    assert snapshot(shipped) == before


# ---------------------------------------------------------------------------------------------------
# Rows 4-7: bounds on every size


def no_allocation(monkeypatch):
    """Building a real (not ``meta``) model fails the test: the refusal must come before."""
    import torch

    real = torch.nn.Linear.__init__

    def guarded(self, *args, **kwargs):
        if kwargs.get("device") is None and torch.get_default_device().type != "meta":
            if any(isinstance(a, int) and a > 100_000 for a in args):
                raise AssertionError("a huge layer was allocated")
        return real(self, *args, **kwargs)

    monkeypatch.setattr(torch.nn.Linear, "__init__", guarded)


@pytest.mark.parametrize(
    "hparams",
    [
        {"step_options": {"n_elements": 16, "hidden_size": 10**11}},
        {"step_options": {"n_elements": 16, "hidden_size": 40_000}},
        {"step_options": {"n_elements": 10**9, "hidden_size": 8}},
        {"method_options": {"max_steps": 10**12}},
        {"method_options": {"max_steps": 3, "eval_max_steps": 10**12}},
        {"method": "act", "method_options": {"max_steps": 3, "eval_max_steps": 10**9}},
        {"n_classes": 10**11},
        {"step": "mnist_mlp", "n_classes": 10, "step_options": {"embedding_size": 10**6}},
        {"step": "pointer_attention", "n_classes": 8, "step_options": {"n_slots": 8, "key_size": 10**7}},
    ],
)
@pytest.mark.parametrize("trust_code", [False, True])
def test_a_checkpoint_with_a_huge_size_is_refused_before_anything_is_allocated(
    tmp_path, monkeypatch, hparams, trust_code
):
    path = gadget_checkpoint(tmp_path / WEIGHTS, **hparams)
    no_allocation(monkeypatch)
    with pytest.raises(CheckpointError) as caught:
        load_model(path, trust_code=trust_code)
    assert "\n" not in str(caught.value)


def test_a_model_with_too_many_weights_is_refused_even_within_each_maximum(tmp_path, monkeypatch):
    """A step named by its import path (trust_code) takes no declared options: the weights estimated
    on the meta device decide."""
    import pondernet_tutorial.runs.options as options

    monkeypatch.setattr(options, "MAX_PARAMETERS", 1000)
    monkeypatch.setattr(checkpoints, "MAX_PARAMETERS", 1000)
    path = gadget_checkpoint(tmp_path / WEIGHTS, step="pondernet_tutorial.steps.parity:ParityStep")
    with pytest.raises(CheckpointError, match="weights"):
        load_model(path, trust_code=True)


def test_an_allocator_error_while_building_is_one_line(tmp_path, monkeypatch):
    path = gadget_checkpoint(tmp_path / WEIGHTS)

    def refuse(*args, **kwargs):
        raise RuntimeError("[enforce fail at alloc_cpu.cpp:117] DefaultCPUAllocator: not enough memory")

    import torch

    monkeypatch.setattr(checkpoints, "_check_sizes", lambda *a: None)
    monkeypatch.setattr(torch.nn.Linear, "__init__", refuse)
    with pytest.raises(CheckpointError, match="does not fit in memory"):
        load_model(path)


@pytest.mark.parametrize(
    "argv",
    [
        ["--step-option", "hidden_size=1000000"],
        [
            "--step",
            "mnist_mlp",
            "--experiment",
            "mnist-interpolation",
            "--step-option",
            "embedding_size=10**6",
        ],
        ["--batch-size", str(10**12)],
        ["--max-steps", str(10**12)],
        ["--method", "act", "--eval-max-steps", str(10**12)],
        ["--eval-max-steps", str(10**5)],
        ["--epochs", str(10**12)],
        ["--experiment", "pointer-extrapolation", "--step-option", "key_size=99999"],
    ],
)
def test_a_huge_size_on_the_command_line_is_one_line(tmp_path, capsys, argv):
    assert cli.main(["train", *argv, "--output-dir", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error:"), err


def test_out_of_memory_while_training_is_one_line(tmp_path, monkeypatch, capsys):
    def refuse(*args, **kwargs):
        raise MemoryError

    monkeypatch.setattr(training, "make_module", refuse)
    assert cli.main(["train", *map(str, TINY_ARGS), "--output-dir", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "out of memory" in err[0]


# ---------------------------------------------------------------------------------------------------
# Rows 8-11: files are read only when regular and small; a damaged lock is reported, never spun on


@pytest.mark.parametrize("how", ["dangling", "folder", "fifo", "devzero"])
def test_a_lock_that_cannot_be_read_is_damaged_in_one_line_without_spinning(tmp_path, how):
    import threading

    from pondernet_tutorial.runs.files import folder_lock
    from pondernet_tutorial.untrusted import DamagedFileError

    folder = tmp_path / "seed0"
    lock = tmp_path / "seed0.lock"
    if how == "dangling":
        lock.symlink_to(tmp_path / "nowhere")
    elif how == "folder":
        lock.mkdir()
    elif how == "fifo":
        os.mkfifo(lock)
    else:
        lock.symlink_to("/dev/zero")
    outcome = []

    def take():
        try:
            with folder_lock(folder, wait=True, doing="training it"):
                outcome.append("taken")
        except DamagedFileError as error:
            outcome.append(str(error))

    thread = threading.Thread(target=take, daemon=True)
    thread.start()
    thread.join(5)
    assert not thread.is_alive(), "the lock loop spins or blocks"
    assert len(outcome) == 1 and "damaged" in outcome[0] and "\n" not in outcome[0]


@pytest.mark.parametrize("how", ["fifo", "devzero", "folder", "nested", "huge"])
def test_metadata_that_is_not_a_small_regular_json_file_is_damaged_at_once(tmp_path, how, capsys):
    import threading

    from pondernet_tutorial.untrusted import read_json

    meta = tmp_path / "metadata.json"
    if how == "fifo":
        os.mkfifo(meta)
    elif how == "devzero":
        meta.symlink_to("/dev/zero")
    elif how == "folder":
        meta.mkdir()
    elif how == "nested":
        meta.write_text("[" * 100_000)
    else:
        with open(meta, "wb") as file:
            file.truncate(2**31)  # sparse: 2 GB that read whole would be held in memory
    result = []
    thread = threading.Thread(target=lambda: result.append(read_json(meta)), daemon=True)
    thread.start()
    thread.join(5)
    assert result == [None]
    (tmp_path / WEIGHTS).write_bytes(b"")
    assert cli.main(["evaluate", "--checkpoint", str(tmp_path / WEIGHTS)]) == 2
    assert len(capsys.readouterr().err.strip().splitlines()) == 1


# ---------------------------------------------------------------------------------------------------
# Row 12: a run folder that is a symbolic link is refused


def test_a_run_folder_that_is_a_symlink_outside_is_refused_and_nothing_outside_is_touched(tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "keep").write_text("mine")
    config = tiny(tmp_path / "runs")
    config.run_dir.parent.mkdir(parents=True)
    config.run_dir.symlink_to(outside)
    with pytest.raises(FileExistsError, match="symbolic link"):
        train(config)
    assert (outside / "keep").read_text() == "mine" and not (outside / WEIGHTS).exists()


# ---------------------------------------------------------------------------------------------------
# Row 13: folder names are safe


class KwargsStep(ParityStep):
    """A user's step function, named by import path (``test_attacks:KwargsStep``), that takes any
    option: nothing declares its options, so only the folder naming can keep them safe."""

    def __init__(self, n_elements: int = 16, n_classes: int = 2, hidden_size: int = 16, **extra):
        super().__init__(n_elements, n_classes, hidden_size)


ESCAPES = ["../../../../escaped", "/tmp/absolute", "..", "a\\b", "x" * 400, "é/../ü"]


@pytest.mark.parametrize("value", ESCAPES, ids=["dotdot", "absolute", "parent", "backslash", "long", "utf8"])
def test_a_string_option_of_a_step_named_by_path_stays_one_folder_name(tmp_path, value):
    root = tmp_path / "runs"
    config = tiny(root, step="test_attacks:KwargsStep", step_options={"hidden_size": 16, "name": value})
    run_dir = config.run_dir
    assert run_dir.parent.parent.parent == root  # <root>/<experiment>/<variant>/seed0, nothing more
    assert run_dir.resolve().is_relative_to(root.resolve())
    name = run_dir.parent.name
    assert "/" not in name and "\\" not in name and name not in ("", ".", "..")
    assert len(name.encode()) <= 255
    # a key is as dangerous as a value
    keyed = tiny(root, step="test_attacks:KwargsStep", step_options={"hidden_size": 16, value: 1})
    assert keyed.run_dir.parent.parent.parent == root


def test_folder_names_are_distinct_for_distinct_options(tmp_path):
    names = {
        tiny(tmp_path, step="test_attacks:KwargsStep", step_options={"hidden_size": 16, "name": v}).variant
        for v in ["a/b", "a%2Fb", "a_b", "x" * 400, "x" * 401]
    }
    assert len(names) == 5


def test_training_with_an_escaping_option_writes_only_inside_the_output_folder(tmp_path, capsys):
    root = tmp_path / "a" / "b" / "c" / "d" / "runs"
    argv = ["train", *map(str, TINY_ARGS), "--output-dir", str(root), "--step", "test_attacks:KwargsStep"]
    assert cli.main([*argv, "--step-option", "name=../../../../escaped"]) == 0
    outside = [p for p in tmp_path.rglob("*") if not p.is_relative_to(root) and not root.is_relative_to(p)]
    assert outside == []
    assert len(list(root.rglob(WEIGHTS))) == 1


def test_every_shipped_run_keeps_its_folder_name():
    """Every shipped run's name is already safe, so safe_name leaves it as it is."""
    from pondernet_tutorial.runs.config import safe_name

    shipped = [p.parent.parent.name for p in PRETRAINED_DIR.glob(f"*/*/seed*/{WEIGHTS}")]
    assert len(shipped) > 100 and all(safe_name(n) == n for n in shipped)


# ---------------------------------------------------------------------------------------------------
# A full disk, no permission: one line that names the file and the free space, nothing half-written

REFUSALS = [(errno.ENOSPC, "No space left on device"), (errno.EACCES, "Permission denied")]


def refuse_fsync(monkeypatch, code, text):
    def fsync(fd):
        raise OSError(code, text)

    monkeypatch.setattr(os, "fsync", fsync)


def refuse_temp_files(monkeypatch, code, text):
    real = os.open

    def open_(path, *args, **kwargs):
        if str(path).endswith(".tmp"):
            raise OSError(code, text, str(path))
        return real(path, *args, **kwargs)

    monkeypatch.setattr(os, "open", open_)


@pytest.mark.parametrize("code,text", REFUSALS, ids=["ENOSPC", "EACCES"])
@pytest.mark.parametrize("where", ["fsync", "open", "write"])
def test_a_refused_write_is_one_line_with_the_file_and_free_space_and_leaves_the_old_file(
    tmp_path, monkeypatch, code, text, where
):
    from pondernet_tutorial.runs.files import WriteFailedError, atomic_file, write_text

    path = tmp_path / "metadata.json"
    path.write_text("old")
    if where == "fsync":
        refuse_fsync(monkeypatch, code, text)
    elif where == "open":
        refuse_temp_files(monkeypatch, code, text)
    with pytest.raises(WriteFailedError) as caught:
        if where == "write":  # the writer itself (pandas, torch) hits the full disk
            with atomic_file(path) as handle:
                handle.write("new")
                raise OSError(code, text)
        else:
            write_text(path, "new")
    line = str(caught.value)
    assert "\n" not in line and str(path) in line and "MiB free" in line
    assert path.read_text() == "old" and sorted(p.name for p in tmp_path.iterdir()) == ["metadata.json"]


@pytest.mark.parametrize("code,text", REFUSALS, ids=["ENOSPC", "EACCES"])
def test_a_full_disk_or_no_permission_during_train_is_one_error_line(
    tmp_path, monkeypatch, capsys, code, text
):
    refuse_fsync(monkeypatch, code, text)
    status = cli.main(["train", *map(str, TINY_ARGS), "--output-dir", str(tmp_path)])
    err = capsys.readouterr().err
    assert status == 1
    assert "Traceback" not in err
    last = err.strip().splitlines()[-1]
    assert last.startswith("error: could not write ") and "MiB free" in last and str(tmp_path) in last
    assert not list(tmp_path.rglob(WEIGHTS)) and not [p for p in tmp_path.rglob("*") if p.suffix == ".tmp"]
    assert leftovers(tmp_path) == []


# ---------------------------------------------------------------------------------------------------
# Files the package reads: checkpoints and tables too are read only when regular and small


def make_unreadable(path: Path, how: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.unlink(missing_ok=True)
    if how == "fifo":
        os.mkfifo(path)
    elif how == "devzero":
        path.symlink_to("/dev/zero")
    else:
        path.mkdir()


def finishes_within(seconds, function, *args):
    """``function(*args)``'s result or exception, failing the test if it has not finished in time."""
    import threading

    outcome = []

    def call():
        try:
            outcome.append(function(*args))
        except BaseException as error:  # noqa: BLE001 - handed to the test
            outcome.append(error)

    thread = threading.Thread(target=call, daemon=True)
    thread.start()
    thread.join(seconds)
    assert outcome, f"{function.__name__} still runs after {seconds} s (blocked or reading without end)"
    return outcome[0]


@pytest.mark.parametrize("how", ["fifo", "devzero", "folder"])
def test_a_checkpoint_that_is_not_a_regular_file_is_one_line_at_once(tmp_path, how, capsys):
    # a link to /dev/zero under another name: a file named model.safetensors is never read through a
    # link (round 7), so the device itself is met only through a link the user names otherwise
    path = tmp_path / ("exported.safetensors" if how == "devzero" else WEIGHTS)
    make_unreadable(path, how)
    error = finishes_within(10, load_model, path)
    assert isinstance(error, CheckpointError) and "\n" not in str(error) and "regular file" in str(error)
    status = finishes_within(
        10, cli.main, ["evaluate", "--checkpoint", str(path), "--experiment", "parity-interpolation"]
    )
    assert status == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: ") and str(path) in err[0]


@pytest.mark.parametrize("how", ["fifo", "devzero", "folder"])
@pytest.mark.parametrize("name", ["per_sample.csv.gz", "summary.csv"])
def test_a_run_table_that_is_not_a_regular_file_is_one_line_at_once(tmp_path, how, name):
    from pondernet_tutorial.analysis.notebook import load_table
    from pondernet_tutorial.runs.evaluation import load_run_tables
    from pondernet_tutorial.untrusted import DamagedFileError

    run = tmp_path / "exp" / "variant" / "seed0"
    run.mkdir(parents=True)
    write_run_tables(run)
    make_unreadable(run / name, how)
    error = finishes_within(10, load_run_tables, run, True)
    assert isinstance(error, DamagedFileError) and "\n" not in str(error) and name in str(error)
    import pandas as pd

    runs = pd.DataFrame(
        [{"path": "exp/variant/seed0", "experiment": "e", "variant": "v", "method": "m", "seed": 0}]
    )
    error = finishes_within(10, load_table, tmp_path, runs, name)
    assert isinstance(error, DamagedFileError)


def test_a_study_table_that_is_a_fifo_is_one_line_at_once(tmp_path):
    from pondernet_tutorial.runs.files import write_json
    from pondernet_tutorial.untrusted import DamagedFileError

    folder = tmp_path / "studies" / "faults"
    folder.mkdir(parents=True)
    write_json(folder / "study.json", {"study": "faults"})
    make_unreadable(folder / "summary.csv", "fifo")
    error = finishes_within(10, studies.load_study, "faults", tmp_path)
    assert isinstance(error, DamagedFileError) and "summary.csv" in str(error)


def test_a_table_that_unpacks_beyond_the_cap_is_refused(tmp_path):
    """A gzip bomb: a few kB on the disk, far more once unpacked."""
    import gzip

    from pondernet_tutorial.untrusted import DamagedFileError, read_table

    path = tmp_path / "per_sample.csv.gz"
    path.write_bytes(gzip.compress(b"a,b\n" + b"1,2\n" * 500_000))
    assert path.stat().st_size < 100_000
    with pytest.raises(DamagedFileError, match="more than"):
        read_table(path, cap=100_000)
    assert len(read_table(path, cap=10_000_000)) == 500_000


# ---------------------------------------------------------------------------------------------------
# The command line says what happened

ACT_RUN = ["--pretrained", "parity-interpolation", "--method", "act", "--tau", "0.01", "--halting-bias", "-3"]


def test_evaluate_pretrained_names_the_run_by_its_options_and_ends_with_a_summary_line(tmp_path, capsys):
    import pandas as pd

    out = tmp_path / "per_sample.csv"
    assert cli.main(["evaluate", *ACT_RUN, "--seed", "1", "--limit", "40", "--output", str(out)]) == 0
    captured = capsys.readouterr()
    last = captured.out.strip().splitlines()[-1]
    run = "parity-interpolation/act-tau=0.01-halting_bias=-3"
    assert run in captured.err  # which run it evaluates, before the work
    assert (PRETRAINED_DIR / run / "seed1" / WEIGHTS).is_file()
    per_sample = pd.read_csv(out)
    accuracy = (per_sample["prediction"] == per_sample["label"]).mean()
    assert last.startswith(
        f"{run} seed 1: accuracy {accuracy:.4f}, mean steps {per_sample['halt_step'].mean():.2f}"
    )


def test_pretrained_offers_only_the_experiments_with_shipped_runs(capsys, monkeypatch):
    from pondernet_tutorial.runs.registry import EXPERIMENTS

    shipped = {p.parts[-4] for p in PRETRAINED_DIR.glob(f"*/*/seed*/{WEIGHTS}")}
    unshipped = sorted(set(EXPERIMENTS) - shipped)
    assert unshipped  # parity-paper32-interpolation, for one
    evaluate = cli.build_parser()._subparsers._group_actions[0].choices["evaluate"]
    offered = next(a.choices for a in evaluate._actions if a.dest == "pretrained")
    assert sorted(offered) == sorted(shipped)
    with pytest.raises(SystemExit) as caught:
        cli.main(["evaluate", "--pretrained", unshipped[0]])
    assert caught.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "invalid choice" in err[0] and all(e in err[0] for e in shipped)


def test_a_run_that_is_not_shipped_is_refused_at_once_with_a_short_list(capsys, monkeypatch):
    def never(*args, **kwargs):
        raise AssertionError("nothing is loaded for a run that is not shipped")

    monkeypatch.setattr(checkpoints, "load_pretrained", never)
    assert cli.main(["evaluate", *ACT_RUN[:4], "--tau", "0.5"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "act-tau=0.01-halting_bias=-3 (seeds 0, 1, 2)" in err[0]
    assert "pondernet-" not in err[0] and len(err[0]) < 700  # that method's runs only
    assert cli.main(["evaluate", "--pretrained", "parity-interpolation", "--tau", "0.01"]) == 2
    assert "add --method act" in capsys.readouterr().err


def test_train_prints_none_of_the_noise_the_package_causes_and_keeps_real_warnings(tmp_path, capsys, caplog):
    import logging
    import warnings

    start = training.EpochClock.on_train_epoch_start

    def warn(self, trainer, pl_module):
        warnings.warn("a real warning", UserWarning, stacklevel=2)
        start(self, trainer, pl_module)

    before = list(warnings.filters)
    with warnings.catch_warnings(record=True) as caught, pytest.MonkeyPatch.context() as patch:
        warnings.simplefilter("always")
        patch.setattr(training.EpochClock, "on_train_epoch_start", warn)
        caplog.set_level(logging.INFO)
        train(tiny(tmp_path))
    messages = [str(w.message) for w in caught]
    assert "a real warning" in messages
    assert not [m for m in messages if "LeafSpec" in m or "log_every_n_steps" in m], messages
    assert "litlogger" not in caplog.text + capsys.readouterr().err
    assert "GPU available" not in caplog.text and "TPU available" not in caplog.text
    assert "max_epochs" in caplog.text  # Lightning's other messages stay ("`Trainer.fit` stopped: ...")
    assert list(warnings.filters) == before  # the filters are the caller's again


def test_a_refusal_outside_the_package_writes_is_one_line_too(tmp_path, monkeypatch, capsys):
    """Lightning's own files (its logs) are not written by atomic_file: the line names the file."""
    from pondernet_tutorial.runs import training as module

    def refuse(*args, **kwargs):
        raise PermissionError(errno.EACCES, "Permission denied", str(tmp_path / "logs" / "metrics.csv"))

    monkeypatch.setattr(module, "train", refuse)
    assert cli.main(["train", *map(str, TINY_ARGS), "--output-dir", str(tmp_path)]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"error: could not use {tmp_path / 'logs' / 'metrics.csv'}")
    assert "MiB free" in err[0] and "Traceback" not in err[0]


# A full disk names the file the user chose, never a staging file in $TMPDIR, never "could not use ."

FULL_DISK = """
import resource, signal, sys
import lightning, torch  # noqa: F401 (imported before the limit)
from pondernet_tutorial.runs.cli import main
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails with EFBIG, as Python does
resource.setrlimit(resource.RLIMIT_FSIZE, (int(sys.argv[1]), resource.getrlimit(resource.RLIMIT_FSIZE)[1]))
sys.exit(main(sys.argv[2:]))
"""


@pytest.mark.slow
def test_a_file_size_limit_while_checkpointing_names_the_checkpoint_not_a_staging_file(tmp_path):
    """Files of at most 16 KiB (RLIMIT_FSIZE): the logs, resume.json and metadata fit, Lightning's
    checkpoints do not. Before: Lightning staged each checkpoint in $TMPDIR (fsspec's transaction) and the
    line said 'could not use . (File too large; ...)'."""
    staging, out = tmp_path / "staging", tmp_path / "runs"
    staging.mkdir()
    result = subprocess.run(
        [sys.executable, "-c", FULL_DISK, str(16 * 2**10), "train", *map(str, TINY_ARGS)]
        + ["--output-dir", str(out)],
        capture_output=True,
        text=True,
        env=test_faults.env(TMPDIR=str(staging)),
        timeout=240,
    )
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 1 and "Traceback" not in result.stderr, result.stderr
    assert lines[-1].startswith(f"error: could not write {out}") and "MiB free" in lines[-1], lines[-1]
    assert "/checkpoints/" in lines[-1] and lines[-1].split(" (")[0].endswith(".ckpt"), lines[-1]
    assert str(staging) not in lines[-1] and "could not use ." not in lines[-1]
    assert list(staging.iterdir()) == [] and leftovers(tmp_path) == []


def test_a_logger_write_that_names_no_file_names_its_file_in_the_run_folder(tmp_path, monkeypatch, capsys):
    """The csv logger hits the full disk while it writes its rows: the OSError names no file. Before:
    'could not use .'. The run's logger writes metrics.csv whole (build.held_csv_logger), so the line
    names the file and says that nothing was left half-written."""
    import csv

    def refuse(self, *args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(csv.DictWriter, "writerows", refuse)
    assert cli.main(["train", *map(str, TINY_ARGS), "--output-dir", str(tmp_path)]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    metrics = test_faults.tiny(tmp_path).run_dir / "logs" / "version_0" / "metrics.csv"
    assert err[-1].startswith(f"error: could not write {metrics} (No space left on device; "), err[-1]
    assert "nothing was left half-written" in err[-1]
    assert "MiB free" in err[-1] and leftovers(tmp_path) == []


def test_a_refusal_that_names_no_file_names_the_output_folder(tmp_path, monkeypatch, capsys):
    """A write refusal with no file name anywhere else: the folder the user chose (before: '.')."""

    def refuse(*args, **kwargs):
        raise OSError(errno.EFBIG, "File too large")

    monkeypatch.setattr(training, "train", refuse)
    assert cli.main(["train", *map(str, TINY_ARGS), "--output-dir", str(tmp_path / "out")]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"error: could not use {tmp_path / 'out'} (File too large; ")
    assert "MiB free" in err[0]


def test_a_checkpoint_left_half_written_by_a_killed_process_keeps_the_run_resumable(tmp_path):
    """Lightning's checkpoints are now written whole beside their name (.last.ckpt.<pid>-<hex>.tmp, not
    in $TMPDIR): one left by a killed process is a file of an unfinished run, not a stranger."""
    from pondernet_tutorial.runs.resume import _check_unfinished_folder

    checkpoints = tmp_path / "run" / "checkpoints"
    checkpoints.mkdir(parents=True)
    (checkpoints / "last.ckpt").write_bytes(b"x")
    (checkpoints / ".last.ckpt.999999999-0a1b2c3d.tmp").write_bytes(b"x")
    _check_unfinished_folder(tmp_path / "run")  # raises CheckpointError for a stranger
    (checkpoints / ".other.ckpt.1-0a.tmp").write_bytes(b"x")
    with pytest.raises(CheckpointError, match="not a checkpoint of the run"):
        _check_unfinished_folder(tmp_path / "run")


def test_an_unfinished_folder_with_a_stranger_or_too_many_entries_is_not_resumed(tmp_path):
    """A file that no run writes (a planted evaluation.json would outlive the resumed run as its
    result), or more entries than a run writes (a walk without end), is refused before resuming."""
    from pondernet_tutorial.runs.resume import MAX_ENTRIES, _check_unfinished_folder

    run = tmp_path / "run"
    (run / "logs").mkdir(parents=True)
    _check_unfinished_folder(run)
    (run / "evaluation.json").write_text("{}")
    with pytest.raises(CheckpointError, match="evaluation.json is not a file of an unfinished run"):
        _check_unfinished_folder(run)
    (run / "evaluation.json").unlink()
    files = (
        run / "logs" / "wandb" / "offline-run-20261129_193624-thq0hdkt" / "files"
    )  # a wandb run's folder: names of any kind
    files.mkdir(parents=True)
    for i in range(MAX_ENTRIES + 1):
        (files / str(i)).touch()
    with pytest.raises(CheckpointError, match="more than 10,000 files"):
        _check_unfinished_folder(run)
