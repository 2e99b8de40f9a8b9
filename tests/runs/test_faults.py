"""Fault injection: checkpoints that try to run code, processes killed or out of disk in the middle of a
write, damaged runs, two processes in one results folder, multi-process runs, and paths of the machine
in the results (issue 15, sections 1, 2, 3 and 5).

Processes are killed, or their disk fills up, at the moment they start writing a chosen file, by
:mod:`fault_injection` (an audit hook that drops the file-size limit to 0: the next byte kills the
process with SIGXFSZ, or fails as on a full disk). In-process runs are forked children of the test
process (no second import of PyTorch); the command-line tests run real subprocesses.

Each test failed on the code before these changes (commit d236966), each for the reason it names:
files written in place (0-byte or empty ``metadata.json``/``model.pt``/tables after a kill or a full
disk, then a finished-looking run or a ``JSONDecodeError``), no lock (two ``reproduce`` deleting each
other's folders), a ``model.pt`` trusted without comparing its hyperparameters, checkpoints allowed to
name any import path, torch's multi-line advice in the unsafe-pickle refusal, every DDP rank writing
and printing, DDP children and ``reproduce --jobs`` workers outliving a killed parent, and absolute
paths in ``metadata.json``.
"""

from __future__ import annotations

import contextlib
import gzip
import json
import multiprocessing
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import fault_injection
import filelock
import pandas as pd
import pytest
import torch

import pondernet_tutorial
from pondernet_tutorial.runs import studies
from pondernet_tutorial.runs.checkpoints import FORMAT, CheckpointError, load_model, load_pretrained
from pondernet_tutorial.runs.config import PRETRAINED_DIR, WEIGHTS, TrainConfig
from pondernet_tutorial.runs.evaluation import evaluate_run
from pondernet_tutorial.runs.resume import KeptRunError
from pondernet_tutorial.runs.studies import Study, load_study, reproduce, run_one
from pondernet_tutorial.runs.training import train

# the checkout whose package the tests import: subprocesses run the same one
ROOT = Path(pondernet_tutorial.__file__).resolve().parents[1]
HARNESS = Path(__file__).resolve().parent / "fault_harness"
TINY = dict(
    experiment="parity-interpolation",
    progress_bar=False,
    epochs=1,
    train_subset=256,
    step_options={"hidden_size": 16},
    max_steps=4,
    compile=False,
)


TINY_ARGS = ["--experiment", "parity-interpolation", "--epochs", 1, "--train-subset", 256, "--max-steps", 4]
TINY_ARGS += ["--step-option", "hidden_size=16", "--no-compile", "--no-progress-bar"]


def tiny(root, **kwargs) -> TrainConfig:
    return TrainConfig.from_options(**{**TINY, "output_dir": str(root), **kwargs})


def env(**extra) -> dict:
    """The environment of a subprocess: this checkout first on the path, one thread."""
    variables = dict(os.environ, OMP_NUM_THREADS="1", **extra)
    paths = [str(ROOT)] + ([variables["PYTHONPATH"]] if variables.get("PYTHONPATH") else [])
    if "PONDERNET_FAULT_MODE" in extra:
        paths.insert(0, str(HARNESS))
    variables["PYTHONPATH"] = os.pathsep.join(paths)
    return variables


def cli(*args, timeout=240, **extra) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "pondernet_tutorial", *map(str, args)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=env(**extra),
        timeout=timeout,
    )


def in_child(target, *args, fault: tuple | None = None, timeout: float = 120) -> int:
    """Run ``target(*args)`` in a forked child (quiet), with a fault armed; its exit code (negative:
    killed by that signal)."""

    def child():
        torch.set_num_threads(1)  # the parent's OpenMP pool does not survive a fork: one thread, no pool
        quiet = os.open(os.devnull, os.O_WRONLY)
        os.dup2(quiet, 1)
        os.dup2(quiet, 2)
        if fault:
            fault_injection.install(*fault)
        target(*args)

    process = multiprocessing.get_context("fork").Process(target=child)
    process.start()
    process.join(timeout)
    if process.exitcode is None:
        process.kill()
        process.join()
        raise AssertionError("the child did not end")
    return process.exitcode


def assert_whole(folder: Path) -> None:
    """Every file under its own name is whole: not empty, and it parses (json, csv, csv.gz, safetensors).
    Temporary files (``.name.*.tmp``), locks and Lightning's folders are not results."""
    for path in sorted(Path(folder).rglob("*")):
        parts = path.relative_to(folder).parts
        if path.is_dir() or path.name.startswith(".") or path.suffix == ".lock":
            continue
        if "logs" in parts or "checkpoints" in parts:
            continue
        assert path.stat().st_size > 0, f"{path} is empty"
        if path.suffix == ".json":
            json.loads(path.read_text())
        elif path.name.endswith((".csv", ".csv.gz")):
            pd.read_csv(path)
        elif path.suffix == ".safetensors":
            read_weights(path)


def is_complete(config: TrainConfig) -> bool:
    """Its metadata parses and records this configuration, and its model file loads."""
    try:
        metadata = json.loads((config.run_dir / "metadata.json").read_text())
        load_model(config.run_dir / WEIGHTS)
    except (OSError, ValueError, CheckpointError):
        return False
    return metadata["identity"] == json.loads(json.dumps(config.identity()))


def assert_complete(config: TrainConfig) -> None:
    assert is_complete(config), f"{config.run_dir} is not complete"


def held(lock: Path) -> bool:
    """Whether some process (this one included) holds the operating-system lock on ``lock``."""
    probe = filelock.FileLock(lock)
    try:
        probe.acquire(timeout=0)
    except filelock.Timeout:
        return True
    probe.release()
    return False


def leftovers(folder: Path) -> list[Path]:
    """Temporary files left behind, and locks still held (an empty lock file that nobody holds is how
    the operating system's locks work: every process locks the same file)."""
    return [p for p in Path(folder).rglob("*") if p.suffix == ".tmp" or (p.suffix == ".lock" and held(p))]


@pytest.fixture
def tiny_study(monkeypatch):
    """A study of two tiny parity runs (PonderNet and ACT), quick: tables in seconds."""
    study = Study(
        "faults",
        "two tiny parity runs",
        ({**TINY, "seeds": (0,)}, {**TINY, "method": "act", "seeds": (0,)}),
        ship="all",
    )
    monkeypatch.setitem(studies.STUDIES, "faults", study)
    return study


def reproduce_tiny(root):
    reproduce(["faults"], output_dir=root, quick=True)


# ---------------------------------------------------------------------------------------------------
# 1. A checkpoint is data, never code


def read_weights(path: Path) -> tuple[dict, dict]:
    """The hyperparameters and the tensors of a model file, read without the package's checks."""
    from safetensors import safe_open

    with safe_open(str(path), "pt") as file:
        return json.loads(file.metadata()["hparams"]), {k: file.get_tensor(k) for k in file.keys()}


def write_weights(path: Path, hparams: dict, state: dict, format: str = FORMAT) -> Path:
    """A model file of any hyperparameters and tensors, written without the package's checks."""
    from safetensors.torch import save_file

    path.parent.mkdir(parents=True, exist_ok=True)
    save_file(state, str(path), metadata={"format": format, "hparams": json.dumps(hparams)})
    return path


def gadget_checkpoint(path: Path, **hparams) -> Path:
    """A model file with PonderNet's layout whose hyperparameters name a gadget."""
    values = {
        "step": "parity_gru",
        "n_classes": 2,
        "method": "pondernet",
        "step_options": {"n_elements": 16, "hidden_size": 8},
        "method_options": {"max_steps": 3},
        "loss_fn": "cross_entropy",
    }
    values.update(hparams)
    return write_weights(path, values, {})


@pytest.mark.slow  # a subprocess that imports PyTorch: over 5 s on 2 shared cores
def test_a_checkpoint_naming_torch_hub_load_runs_nothing(tmp_path, monkeypatch):
    """``torch.hub:load`` with a local hubconf.py that writes a marker: refused, in load_model, in
    load_pretrained on a tampered shipped folder and in ``evaluate --checkpoint`` (one line, exit 2)."""
    marker = tmp_path / "marker"
    hub = tmp_path / "hub"
    hub.mkdir()
    (hub / "hubconf.py").write_text(
        f"open({str(marker)!r}, 'w').write('ran')\n\ndef entry(**kwargs):\n    return None\n"
    )
    gadget = {
        "step": "torch.hub:load",
        "step_options": {"repo_or_dir": str(hub), "model": "entry", "source": "local", "trust_repo": True},
    }
    path = gadget_checkpoint(tmp_path / "evil" / WEIGHTS, **gadget)

    result = cli("evaluate", "--checkpoint", path, "--experiment", "parity-interpolation", "--limit", 2)
    assert not marker.exists(), "the checkpoint ran hubconf.py"
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 2 and len(lines) == 1, result.stderr
    assert "'torch.hub:load' is not registered" in lines[0] and "--trust-code" in lines[0]

    with pytest.raises(CheckpointError, match="torch.hub:load' is not registered") as error:
        load_model(path)
    assert "\n" not in str(error.value) and "trust_code=True" in str(error.value)
    assert not marker.exists()

    # a shipped folder whose model file (and metadata) were replaced by the gadget
    from pondernet_tutorial.runs import checkpoints

    monkeypatch.setattr(checkpoints, "PRETRAINED_DIR", tmp_path / "pretrained")
    config = tiny(tmp_path / "pretrained")
    train(config)
    metadata = json.loads((config.run_dir / "metadata.json").read_text())
    hparams, state = read_weights(config.run_dir / WEIGHTS)
    hparams.update(gadget)
    write_weights(config.run_dir / WEIGHTS, hparams, state)
    metadata["hparams"] = hparams
    (config.run_dir / "metadata.json").write_text(json.dumps(metadata))
    options = {k: v for k, v in TINY.items() if k not in ("experiment", "progress_bar")}
    with pytest.raises(CheckpointError, match="not the model of the requested configuration"):
        load_pretrained("parity-interpolation", **options)
    assert not marker.exists()


@pytest.mark.slow  # a subprocess that imports PyTorch: over 5 s on 2 shared cores
def test_a_checkpoint_naming_logging_basicconfig_writes_nothing(tmp_path):
    """``logging:basicConfig(filename=..., filemode="w")`` as the step function emptied any file."""
    victim = tmp_path / "precious.txt"
    victim.write_text("precious\n")
    path = gadget_checkpoint(
        tmp_path / "evil.safetensors",
        step="logging:basicConfig",
        step_options={"filename": str(victim), "filemode": "w"},
    )
    result = cli("evaluate", "--checkpoint", path, "--experiment", "parity-interpolation", "--limit", 2)
    assert victim.read_text() == "precious\n", "the checkpoint emptied a file"
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 2 and len(lines) == 1, result.stderr
    assert "'logging:basicConfig' is not registered" in lines[0]
    # the loss, or a partial of an unregistered function: refused as well, nothing imported
    for hparams in (
        {"loss_fn": "logging:basicConfig"},
        {"loss_fn": {"partial": "logging:basicConfig", "keywords": {"filename": str(victim)}}},
        {"step": {"partial": "logging:basicConfig", "keywords": {"filename": str(victim)}}},
    ):
        with pytest.raises(CheckpointError, match="basicConfig.* is not registered"):
            load_model(gadget_checkpoint(tmp_path / "evil2.safetensors", **hparams))
    assert victim.read_text() == "precious\n"


def test_registered_components_take_only_the_options_they_declare(tmp_path):
    """No ``**kwargs`` surprises: an option that a registered component does not declare is refused
    (a component with ``**kwargs`` would otherwise receive anything a file gives it)."""
    from pondernet_tutorial.runs.registry import UnregisteredComponentError, check_registered

    def permissive(n_classes, hidden_size=4, **anything):
        return None

    registry = {"permissive": f"{__name__}:PERMISSIVE"}
    globals()["PERMISSIVE"] = permissive
    check_registered("permissive", registry, "step function", {"hidden_size": 3}, skip=("n_classes",))
    with pytest.raises(UnregisteredComponentError, match="takes no option 'filename'"):
        check_registered("permissive", registry, "step function", {"filename": "/etc/passwd"})
    with pytest.raises(UnregisteredComponentError, match="not plain data"):
        check_registered("permissive", registry, "step function", {"hidden_size": torch.ones(1)})
    for hparams, message in (
        ({"step_options": {"n_elements": 16, "hidden_size": 8, "colour": 1}}, "takes no option 'colour'"),
        ({"method_options": {"max_steps": 3, "tau": 0.1}}, "takes no option 'tau'"),
        ({"loss_fn": {"partial": "cross_entropy", "keywords": {"weight": 2}}}, "takes no option 'weight'"),
        ({"method": "os:system"}, "'os:system' is not registered"),
    ):
        with pytest.raises(CheckpointError, match=message):
            load_model(gadget_checkpoint(tmp_path / "options.safetensors", **hparams))


@pytest.mark.slow  # a subprocess that imports PyTorch: over 5 s on 2 shared cores
def test_trust_code_opts_in_to_a_checkpoint_that_names_a_component_by_its_path(tmp_path):
    """A shipped model whose step function is named by its import path, not its registered name:
    ``evaluate --checkpoint`` refuses it in one line (exit 2) and evaluates it with ``--trust-code``
    (exit 0, the table printed). Break tried: the command line ignoring the flag."""
    from pondernet_tutorial.runs.registry import STEPS

    shipped = PRETRAINED_DIR / "parity-interpolation"
    hparams, state = read_weights(shipped / "pondernet-lambda_p=0.2-beta=0.01" / "seed0" / WEIGHTS)
    hparams["step"] = STEPS[hparams["step"]]  # "module:Name"
    path = write_weights(tmp_path / "by-path" / WEIGHTS, hparams, state)
    args = ("evaluate", "--checkpoint", path, "--experiment", "parity-interpolation", "--limit", 2)

    refused = cli(*args)
    lines = refused.stderr.strip().splitlines()
    assert refused.returncode == 2 and len(lines) == 1 and "is not registered" in lines[0], refused.stderr
    trusted = cli(*args, "--trust-code")
    assert trusted.returncode == 0, trusted.stderr
    assert "accuracy" in trusted.stdout, trusted.stdout


class Gadget:
    def __reduce__(self):
        return (os.system, ("touch should-never-exist",))


def test_an_unsafe_pickle_is_refused_in_one_line(tmp_path):
    """A pickle is never unpickled: a model file is safetensors, and a PyTorch file is refused by its
    first bytes (zip or pickle), in one line, without PyTorch's advice to load it unsafely."""
    for zipped in (True, False):
        path = tmp_path / f"pickle-{zipped}.pt"
        torch.save(
            {"state_dict": {}, "hparams": {}, "payload": Gadget()},
            path,
            _use_new_zipfile_serialization=zipped,
        )
        with pytest.raises(CheckpointError) as error:
            load_model(path)
        message = str(error.value)
        assert "\n" not in message and "weights_only" not in message
        if zipped:  # torch.save's archive (a Lightning .ckpt): named, with what to do with it instead
            assert "is a PyTorch archive (a checkpoint of fit()" in message and "ckpt_path=path" in message
        else:
            assert "PyTorch pickles, which this package never loads" in message
    assert not Path("should-never-exist").exists()


# ---------------------------------------------------------------------------------------------------
# 2. Crashes, full disks and a second process


@pytest.mark.parametrize("experiment", ["parity-interpolation", "mnist-interpolation"])
@pytest.mark.parametrize("name", ["history.csv", "metadata.json", WEIGHTS])
def test_a_run_killed_in_its_final_save_is_resumed_not_lost(tmp_path, name, experiment):
    """SIGKILL-like death at the first byte of each file of the final save: nothing partial under its
    own name, and the next ``train`` continues from the run's last checkpoint and trains nothing again
    (before: a 0-byte model file made a finished-looking run; then the checkpoints and resume.json were
    deleted before the model file was written, and the rerun trained from scratch). MNIST's data module
    keeps no state of its batches, yet its run continues too: its loop had ended (round 12: it was
    trained again from epoch 0). Break: drop the "trained" mark of resume.json, or its reading in
    resumable()."""
    config = tiny(tmp_path, experiment=experiment)
    assert in_child(train, config, fault=("kill", name)) == -signal.SIGXFSZ
    assert_whole(tmp_path)
    assert not is_complete(config)
    assert (config.run_dir / "checkpoints" / "last.ckpt").is_file()
    _, metadata = train(config)
    assert_complete(config)
    assert metadata["resumed"] and metadata["epochs_run"] == config.epochs
    assert not (config.run_dir / "checkpoints").exists() and not (config.run_dir / "resume.json").exists()
    assert not leftovers(tmp_path)


@pytest.mark.parametrize(
    "name, under",
    [
        ("summary.csv", "seed0"),
        ("per_sample.csv.gz", ""),
        ("evaluation.json", ""),
        ("runs.csv", "studies"),
        ("study.json", "studies"),
    ],
)
def test_a_study_killed_while_writing_its_tables_is_finished_by_the_next_reproduce(
    tiny_study, tmp_path, name, under
):
    assert in_child(reproduce_tiny, tmp_path, fault=("kill", name, under)) == -signal.SIGXFSZ
    assert_whole(tmp_path)
    reproduce_tiny(tmp_path)
    tables = load_study("faults", tmp_path)
    assert len(tables["runs"]) == 2 and len(tables["summary"]) == 2 * 16  # one row per k and run
    for config in tiny_study.configs(quick=True, output_dir=str(tmp_path)):
        assert_complete(config)
        assert json.loads((config.run_dir / "evaluation.json").read_text())["limit"] == 50
    assert_whole(tmp_path)
    assert not leftovers(tmp_path)


@pytest.mark.parametrize("name", ["metadata.json", WEIGHTS, "study.json"])
def test_a_full_disk_leaves_no_empty_file_and_the_next_run_completes(tiny_study, tmp_path, name):
    """A write that fails (full disk) while a file is written: the old file or none, never an empty one;
    later ``train`` and ``reproduce``, ``--overwrite`` too, complete (before: JSONDecodeError forever)."""
    if name == "study.json":
        assert in_child(reproduce_tiny, tmp_path, fault=("full", name)) == 1
        assert_whole(tmp_path)
        reproduce_tiny(tmp_path)
        assert len(load_study("faults", tmp_path)["runs"]) == 2
    else:
        config = tiny(tmp_path)
        assert in_child(train, config, fault=("full", name)) == 1  # the OSError ends it
        assert_whole(tmp_path)
        train(config)
        assert_complete(config)
        train(config, overwrite=True)
        assert_complete(config)
    assert_whole(tmp_path)
    assert not leftovers(tmp_path)


def damage(config: TrainConfig, how: str) -> None:
    run = config.run_dir
    if how == "empty metadata.json":
        (run / "metadata.json").write_text("")
    elif how == "empty model file":
        (run / WEIGHTS).write_bytes(b"")
    elif how == "half a model file":
        data = (run / WEIGHTS).read_bytes()
        (run / WEIGHTS).write_bytes(data[: len(data) // 2])
    elif how == "metadata.json of no run":
        (run / "metadata.json").write_text('["not", "a", "record"]')
    elif how == "a model file of other hyperparameters":  # whole, but not the model its metadata records
        metadata = json.loads((run / "metadata.json").read_text())
        metadata["hparams"]["n_classes"] += 1
        (run / "metadata.json").write_text(json.dumps(metadata))


@pytest.mark.parametrize(
    "how",
    [
        "empty metadata.json",
        "empty model file",
        "half a model file",
        "metadata.json of no run",
        "a model file of other hyperparameters",
    ],
)
def test_a_damaged_finished_run_is_kept_in_one_line_and_trained_again_with_overwrite(tmp_path, how):
    """Before stop 62: FileExistsError (a 0-byte model file looked finished) or JSONDecodeError. Until
    round 11: removed and trained again with a warning, the training in a whole model file lost for a
    hand-edited metadata.json. Its model file is written last, so a kill never leaves this: the run is
    kept, by train() and by reproduce, until overwrite. Break: warn and return None in completed_run."""
    from pondernet_tutorial.runs.resume import KeptRunError

    config = tiny(tmp_path)
    train(config)
    damage(config, how)
    files = {p: p.read_bytes() for p in config.run_dir.rglob("*") if p.is_file()}
    for again in (
        lambda: train(config),
        lambda: run_one(config, limit=4, overwrite=False, reevaluate=False, threads=None),
    ):
        with pytest.raises(KeptRunError, match=r"^the finished run in .* is kept: .*\. Mend it from a copy"):
            again()
        assert {p: p.read_bytes() for p in config.run_dir.rglob("*") if p.is_file()} == files
    train(config, overwrite=True)
    assert_complete(config)


@pytest.mark.slow  # a subprocess that imports PyTorch: over 5 s on 2 shared cores
def test_a_damaged_finished_run_is_one_line_and_status_2_on_the_command_line(tmp_path):
    config = tiny(tmp_path)
    train(config)
    damage(config, "empty metadata.json")
    model = (config.run_dir / WEIGHTS).read_bytes()
    result = cli("train", *TINY_ARGS, "--output-dir", tmp_path)
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr
    assert [line for line in result.stderr.splitlines() if "is kept" in line][0].startswith(
        "error: the finished run"
    )
    assert (config.run_dir / WEIGHTS).read_bytes() == model


@pytest.mark.slow  # a subprocess that imports PyTorch: over 5 s on 2 shared cores
def test_a_model_file_of_another_run_is_refused(tmp_path, monkeypatch):
    """A model file carries its own hyperparameters: compared with its folder's record and with the
    request in load_model, load_pretrained, evaluate_run (reproduce's tables), run_one (retrained),
    the notebooks' loading and ``evaluate --checkpoint``. Before: λ_p = 0.2 asked, 0.1 returned."""
    from pondernet_tutorial.analysis import notebook
    from pondernet_tutorial.runs import checkpoints

    monkeypatch.setattr(checkpoints, "PRETRAINED_DIR", tmp_path)
    asked, other = tiny(tmp_path, lambda_p=0.2), tiny(tmp_path, lambda_p=0.1)
    train(asked)
    train(other)
    shutil.copy(other.run_dir / WEIGHTS, asked.run_dir / WEIGHTS)
    path = asked.run_dir / WEIGHTS
    with pytest.raises(
        CheckpointError, match="not the model that its folder's metadata.json records.*lambda_p"
    ):
        load_model(path)
    options = {k: v for k, v in TINY.items() if k not in ("experiment", "progress_bar")}
    with pytest.raises(CheckpointError, match="lambda_p"):
        load_pretrained("parity-interpolation", lambda_p=0.2, **options)
    with pytest.raises(CheckpointError, match="lambda_p"):
        evaluate_run(asked, limit=4)
    run = {"path": asked.run_dir.relative_to(tmp_path).as_posix()}
    with pytest.raises(CheckpointError, match="lambda_p"):
        notebook.load_model(tmp_path, run)
    result = cli("evaluate", "--checkpoint", path, "--limit", 2)
    assert result.returncode == 2 and len(result.stderr.strip().splitlines()) == 1, result.stderr
    # the folder's record forged too: the request still tells them apart
    metadata = json.loads((other.run_dir / "metadata.json").read_text())
    saved = json.loads((asked.run_dir / "metadata.json").read_text())
    saved["hparams"] = metadata["hparams"]
    (asked.run_dir / "metadata.json").write_text(json.dumps(saved))
    with pytest.raises(CheckpointError, match="not the model of the requested configuration.*lambda_p"):
        load_pretrained("parity-interpolation", lambda_p=0.2, **options)
    with pytest.raises(CheckpointError, match="lambda_p"):
        evaluate_run(asked, limit=4)
    # the run is kept (round 11: a finished run's training is never removed unasked), retrained with overwrite
    with pytest.raises(KeptRunError, match="is not the model of this configuration"):
        run_one(asked, limit=4, overwrite=False, reevaluate=False, threads=None)
    assert run_one(asked, limit=4, overwrite=True, reevaluate=False, threads=None)["done"] == "trained"
    assert load_model(path).hparams.method_options["lambda_p"] == 0.2


def hold_lock(folder: Path) -> subprocess.Popen:
    """Another process that holds ``folder``'s lock until it is killed (it has taken it on return)."""
    lock = folder.with_name(folder.name + ".lock")
    lock.parent.mkdir(parents=True, exist_ok=True)
    code = "import filelock, sys, time; lock = filelock.FileLock(sys.argv[1]); lock.acquire(); print('held', flush=True); time.sleep(120)"
    holder = subprocess.Popen([sys.executable, "-c", code, str(lock)], stdout=subprocess.PIPE, text=True)
    assert holder.stdout.readline().strip() == "held"
    return holder


@pytest.mark.slow  # waits on other processes while it trains: over 5 s on 2 shared cores
def test_a_run_that_another_process_trains_is_refused_or_waited_for_in_one_line(tmp_path, capsys):
    config = tiny(tmp_path)
    holder = hold_lock(config.run_dir)
    try:
        with pytest.raises(FileExistsError, match="another process is training it") as error:
            train(config)
        assert "\n" not in str(error.value) and not config.run_dir.exists()
        result = cli("train", *TINY_ARGS, "--output-dir", tmp_path)
        assert result.returncode == 2 and result.stderr.strip().splitlines() == [f"error: {error.value}"]
        record = run_one(config, limit=4, overwrite=False, reevaluate=False, threads=None, wait=False)
        assert record["done"] == "busy"
        out = capsys.readouterr().out.splitlines()
        assert len(out) == 1 and out[0].startswith("== later:") and "another process" in out[0]
        threading.Timer(2.0, holder.kill).start()  # the holder ends while the next one waits
        record = run_one(config, limit=4, overwrite=False, reevaluate=False, threads=None, wait=True)
        assert record["done"] == "trained"
        err = capsys.readouterr().err.splitlines()
        assert sum(line.startswith("== waiting for") for line in err) == 1
        assert_complete(config)
        assert not leftovers(tmp_path)
    finally:
        holder.kill()
        holder.wait()


def test_the_lock_of_a_killed_process_is_free_at_once(tmp_path, capsys):
    """The operating system releases the lock of a process killed with SIGKILL: no stale lock to take
    over, no waiting (the hand-written lock needed a PID check and a takeover for this)."""
    config = tiny(tmp_path)
    holder = hold_lock(config.run_dir)
    holder.kill()
    holder.wait()
    train(config)
    assert_complete(config)
    assert "waiting" not in capsys.readouterr().err and not leftovers(tmp_path)


@pytest.mark.slow
def test_two_reproduce_processes_into_one_folder_both_finish_every_run(tmp_path):
    """Before: both crashed (one deleted the folder the other trained into) and 0 of 8 runs finished."""
    args = [sys.executable, "-m", "pondernet_tutorial", "reproduce", "--study", "parity-interpolation"]
    args += ["--quick", "--output-dir", str(tmp_path)]
    logs = [tmp_path.with_name(f"{tmp_path.name}-{i}.log") for i in range(2)]
    processes = []
    for log in logs:
        with open(log, "w") as handle:
            processes.append(
                subprocess.Popen(args, stdout=handle, stderr=subprocess.STDOUT, cwd=ROOT, env=env())
            )
        time.sleep(1.0)
    codes = [p.wait(timeout=300) for p in processes]
    texts = [log.read_text() for log in logs]
    assert codes == [0, 0], texts
    assert not any("Traceback" in text for text in texts)
    configs = studies.get_study("parity-interpolation").configs(quick=True, output_dir=str(tmp_path))
    trained = [line for text in texts for line in text.splitlines() if line.startswith("== training")]
    assert sorted(trained) == sorted(f"== training {c.run_dir}" for c in configs)  # each run once
    for config in configs:
        assert_complete(config)
    assert len(load_study("parity-interpolation", tmp_path)["runs"]) == 8
    assert_whole(tmp_path)
    assert not leftovers(tmp_path)


@pytest.mark.slow  # a subprocess that imports PyTorch: over 5 s on 2 shared cores
@pytest.mark.skipif((os.cpu_count() or 1) < 2, reason="two CPU processes need two cores")
def test_only_rank_zero_prints_and_writes_in_a_ddp_run(tmp_path):
    log = tmp_path / "writes.log"
    result = cli(
        "train",
        "--experiment",
        "parity-interpolation",
        "--quick",
        "--step-option",
        "hidden_size=16",
        "--accelerator",
        "cpu",
        "--devices",
        2,
        "--strategy",
        "ddp",
        "--output-dir",
        tmp_path / "runs",
        "--no-progress-bar",
        PONDERNET_FAULT_MODE="log",
        PONDERNET_FAULT_LOG=str(log),
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.count("best val accuracy") == 1, result.stdout
    results = ("history.csv", "metadata.json", WEIGHTS)
    writers = set()
    for line in log.read_text().splitlines():
        pid, path = line.split(" ", 1)
        name = Path(path).name
        if any(name == r or name.startswith(f".{r}.") for r in results):
            writers.add(pid)
    assert len(writers) == 1, log.read_text()
    assert_whole(tmp_path / "runs")


# ---------------------------------------------------------------------------------------------------
# 3. The children of a multi-process run end with their parent


def children(pid: int) -> list[int]:
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            found.append(int(stat.parent.name))
    return found


def cmdline(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""


def running(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state not in ("Z", "X")


def end(parent: subprocess.Popen, kids: list[int]) -> None:
    """Kill what a test started, whatever happened."""
    parent.kill()
    parent.wait()
    for kid in kids:
        if running(kid):
            os.kill(kid, signal.SIGKILL)


def wait_until(condition, timeout: float, step: float = 0.2) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if condition():
            return True
        time.sleep(step)
    return condition()


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads the process table in /proc")
def test_ddp_children_end_with_their_parent(tmp_path):
    """Before: a DDP child whose parent was killed waited for it for half an hour."""
    args = ["train", "--experiment", "parity-interpolation", "--quick", "--epochs", 50]
    args += ["--accelerator", "cpu", "--devices", 2, "--strategy", "ddp", "--no-progress-bar"]
    parent = subprocess.Popen(
        [sys.executable, "-m", "pondernet_tutorial", *map(str, args), "--output-dir", str(tmp_path)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        cwd=ROOT,
        env=env(),
    )
    kids = []
    try:
        assert wait_until(lambda: children(parent.pid), 120), "no child started"
        kids = children(parent.pid)
        parent.kill()
        parent.wait()
        assert wait_until(lambda: not any(running(k) for k in kids), 40), "children outlived their parent"
    finally:
        end(parent, kids)


LONG_STUDY = """
import sys
from pondernet_tutorial.runs import cli, studies
run = {"experiment": "parity-interpolation", "epochs": 200, "early_stopping_patience": 0, "stop_at_val_acc": 0}
runs = (run, {**run, "lambda_p": 0.1}, {**run, "lambda_p": 0.3})  # two train, one waits queued
studies.STUDIES["long"] = studies.Study("long", "three long runs", runs)
sys.exit(cli.main(["reproduce", "--study", "long", "--quick", "--jobs", "2", "--output-dir", sys.argv[1]]))
"""


@contextlib.contextmanager
def long_study(tmp_path):
    """``reproduce --jobs 2`` of three long runs in a subprocess, once its two workers train: yields
    the parent process and the workers' pids, and ends whichever of them are left afterwards."""
    parent = subprocess.Popen(
        [sys.executable, "-c", LONG_STUDY, str(tmp_path)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        cwd=ROOT,
        env=env(),
    )
    workers = []
    try:
        two = lambda: len(list(tmp_path.glob("parity-interpolation/*/seed*/logs"))) == 2  # noqa: E731
        assert wait_until(two, 180), "the workers did not start training"
        workers = [k for k in children(parent.pid) if b"spawn_main" in cmdline(k)]
        assert workers, [cmdline(k) for k in children(parent.pid)]
        yield parent, workers
    finally:
        end(parent, workers)


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads the process table in /proc")
def test_reproduce_workers_end_with_their_parent(tmp_path):
    """Before: ``reproduce --jobs`` workers trained on after their parent was killed."""
    with long_study(tmp_path) as (parent, workers):
        parent.kill()
        parent.wait()
        assert wait_until(lambda: not any(running(w) for w in workers), 15), "workers outlived their parent"


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads the process table in /proc")
def test_sigterm_stops_reproduce_with_jobs_and_its_workers(tmp_path):
    """Before: a SIGTERM to ``reproduce --jobs 2`` stopped the two runs, but each worker then started
    the run already queued for it, and the command trained on (found stopping the long parity runs).
    Break tried: the workers running ``run_one`` directly, as before."""
    with long_study(tmp_path) as (parent, workers):
        parent.send_signal(signal.SIGTERM)
        assert parent.wait(timeout=60) == 128 + signal.SIGTERM
        assert wait_until(lambda: not any(running(w) for w in workers), 15), "workers trained on"
        folders = [p for p in tmp_path.glob("parity-interpolation/*/seed*") if p.is_dir()]  # not the locks
        assert len(folders) == 2, "the queued run started"


# ---------------------------------------------------------------------------------------------------
# 4. Silent garbage refused


def test_non_finite_weights_under_a_finite_loss_stop_the_run():
    """The callback's own test of the weights: an epoch whose mean loss is finite but whose weights
    hold a NaN stops with the one-line error (the end-to-end divergence tests reach the loss test first).
    Break tried: the weights left out of the callback's test."""
    from types import SimpleNamespace

    from pondernet_tutorial.fitting import StopOnNonFinite, TrainingDivergedError

    module = torch.nn.Linear(2, 2)
    module.hparams = {"lr": 0.1}
    trainer = SimpleNamespace(callback_metrics={"train/loss": torch.tensor(0.5)}, current_epoch=2)
    StopOnNonFinite().on_train_epoch_end(trainer, module)  # finite loss, finite weights: trains on
    with torch.no_grad():
        module.weight[0, 0] = float("nan")
    with pytest.raises(TrainingDivergedError, match=r"diverged in epoch 3 \(non-finite weights\)"):
        StopOnNonFinite().on_train_epoch_end(trainer, module)


@pytest.mark.parametrize("method", ["pondernet", "act"])
def test_inputs_are_checked_at_inference(method):
    """NaN or inf in an input is a clear error, never a prediction; float64 and half inputs give the
    float32 model's own answer. Breaks tried: the finiteness check removed; no cast (float64 and half
    inputs then fail inside the first layer)."""
    options = {"tau": 1e-3, "halting_bias": -3.0} if method == "act" else {}
    model = load_pretrained("parity-interpolation", method, seed=0, **options).model
    x = torch.zeros(4, 16)
    x[:, :3] = torch.tensor([1.0, -1.0, 1.0])

    def answer(x):  # deterministic: PonderNet's coins from a seeded generator, ACT's mean-field output
        return model.infer(x, torch.Generator().manual_seed(0))[0]

    with torch.no_grad():
        expected = answer(x)
        for dtype in (torch.float64, torch.half):
            assert torch.allclose(answer(x.to(dtype)), expected, atol=1e-3)
        for bad in (float("nan"), float("inf")):
            y = x.clone()
            y[1, 5] = bad
            with pytest.raises(ValueError, match=r"the input holds NaN or infinite values \(1 of 64\)"):
                model.infer(y)


# ---------------------------------------------------------------------------------------------------
# 5. Nothing of this machine in a result


def strings(value):
    if isinstance(value, dict):
        for v in value.values():
            yield from strings(v)
    elif isinstance(value, list):
        for v in value:
            yield from strings(v)
    elif isinstance(value, str):
        yield value


def test_results_record_no_path_of_the_machine(tiny_study, tmp_path):
    """metadata.json recorded output_dir and data_dir as given (absolute ones too)."""
    root = tmp_path / "results"
    config = tiny(root, data_dir=str(tmp_path / "data"))
    train(config)
    reproduce_tiny(root)
    for path in [*root.rglob("*.json"), *root.rglob("*.csv"), *root.rglob("*.csv.gz")]:
        text = gzip.decompress(path.read_bytes()).decode() if path.suffix == ".gz" else path.read_text()
        assert str(tmp_path) not in text, path
    metadata = json.loads((config.run_dir / "metadata.json").read_text())
    assert not [s for s in strings(metadata) if os.path.isabs(s)]
    # and the shipped results hold none either
    from pondernet_tutorial.runs.config import PRETRAINED_DIR

    for path in [*PRETRAINED_DIR.rglob("*.json"), *PRETRAINED_DIR.glob("studies/*/*.csv")]:
        text = path.read_text()
        if path.suffix == ".json":
            assert not [s for s in strings(json.loads(text)) if os.path.isabs(s)], path
        assert str(ROOT) not in text and "/home/" not in text and "/work/" not in text, path


def test_only_a_child_of_the_recorded_parent_is_tied_to_it():
    """An inherited record of a parent (a notebook kernel that trained, then ran a command) must not end
    a process that is not that parent's child; a rank whose parent has ended ends at once."""
    probe = "from pondernet_tutorial.runs.processes import end_with_parent; end_with_parent(); print('alive')"
    stranger = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    try:
        for rank, parent, alive in (("1", stranger.pid, True), ("0", dead.pid, True), ("1", dead.pid, False)):
            result = subprocess.run(
                [sys.executable, "-c", probe],
                capture_output=True,
                text=True,
                env=env(LOCAL_RANK=rank, PONDERNET_PARENT_PID=str(parent)),
                timeout=60,
            )
            assert (result.stdout.strip() == "alive") == alive, (rank, parent, result)
    finally:
        stranger.kill()
        stranger.wait()
