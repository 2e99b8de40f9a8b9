"""Issue 22's attacks: a stop is never a success, the shipped runs cannot be overwritten, no option or
file sizes memory without bound, files are read only when they are regular and small, and folder names
stay inside the output folder. Each test failed on the code before these changes (67639c4)."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import pytest
import test_faults
from test_faults import TINY_ARGS, leftovers, tiny

from pondernet_tutorial.runs import cli, studies, training
from pondernet_tutorial.runs.config import PRETRAINED_DIR
from pondernet_tutorial.runs.processes import Interrupted
from pondernet_tutorial.runs.studies import reproduce
from pondernet_tutorial.runs.training import train

tiny_study = pytest.fixture(test_faults.tiny_study.__wrapped__)


# ---------------------------------------------------------------------------------------------------
# Rows 1-2: interrupted means failed

SIGNALS = [signal.SIGTERM, signal.SIGINT, signal.SIGHUP]


def send_at_first_epoch(monkeypatch, signum):
    def send(self, trainer, pl_module):
        os.kill(os.getpid(), signum)

    monkeypatch.setattr(training.History, "on_train_epoch_start", send)


@pytest.mark.parametrize("signum", SIGNALS, ids=lambda s: s.name)
def test_a_signal_during_train_raises_keyboard_interrupt_and_keeps_no_model(tmp_path, monkeypatch, signum):
    config = tiny(tmp_path)
    send_at_first_epoch(monkeypatch, signum)
    with pytest.raises(KeyboardInterrupt) as caught:  # never SystemExit: a caller's except sees it
        train(config)
    assert isinstance(caught.value, Interrupted) and caught.value.exit_code == 128 + signum
    assert not (config.run_dir / "model.pt").exists()
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
    assert not list(tmp_path.rglob("model.pt"))


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
