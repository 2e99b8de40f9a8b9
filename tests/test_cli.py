"""The command line: help, user errors as one line with exit status 2, imports kept light."""

import subprocess
import sys

import pytest

from pondernet_tutorial.__main__ import HELP, build_parser, main


def test_help_explains_every_option(capsys):
    for command in ("train", "evaluate", "reproduce", "list"):
        with pytest.raises(SystemExit) as exit_info:
            main([command, "--help"])
        assert exit_info.value.code == 0 and "usage" in capsys.readouterr().out
    train_help = build_parser()._subparsers._group_actions[0].choices["train"].format_help()
    for name in HELP:
        flag = "--step-option" if name == "step_options" else "--" + name.replace("_", "-")
        assert flag in train_help, flag


def test_help_and_halting_load_no_lightning():
    probe = (
        "import sys; {}; print(sorted(m for m in sys.modules if m.split('.')[0] in ('lightning', 'torch')))"
    )
    help_only = probe.format(
        "from pondernet_tutorial.__main__ import build_parser; build_parser().format_help()"
    )
    result = subprocess.run([sys.executable, "-c", help_only], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "[]"  # neither Lightning nor PyTorch for --help
    result = subprocess.run(
        [sys.executable, "-c", probe.format("import pondernet_tutorial.halting")],
        capture_output=True,
        text=True,
        check=True,
    )
    assert "lightning" not in result.stdout and "'torch'" in result.stdout


def test_a_user_error_exits_with_status_2_and_one_line():
    result = subprocess.run(
        [sys.executable, "-m", "pondernet_tutorial", "train", "--lambda-p", "1.5"],
        capture_output=True,
        text=True,
    )
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert result.stderr.strip().splitlines() == [
        "error: lambda_p must lie strictly between 0 and 1, got 1.5 (the prior's mean is 1/lambda_p steps; "
        "for exactly one step use --method fixed --max-steps 1)."
    ]


@pytest.mark.parametrize(
    "args, message",
    [
        (["train", "--lambda-p", "1.5"], "lambda_p must lie strictly between 0 and 1"),
        (["train", "--step-option", "hidden_size"], "KEY=VALUE"),
        (
            ["evaluate", "--checkpoint", "nowhere/model.pt", "--experiment", "mnist-interpolation"],
            "no checkpoint at",
        ),
        (["evaluate", "--checkpoint", "nowhere/model.pt"], "--experiment"),
        (
            ["evaluate", "--pretrained", "parity-interpolation", "--method", "fixed", "--seed", "99"],
            "no shipped model",
        ),
        (["reproduce", "--jobs", "0"], "--jobs must be >= 1"),
        (["reproduce", "--ship", "--quick"], "never shipped"),
    ],
)
def test_user_errors(args, message, capsys):
    assert main(args) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and message in lines[0], lines


def test_argument_errors_are_one_line_too(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["train", "--experiment", "rotation"])
    lines = capsys.readouterr().err.strip().splitlines()
    assert exit_info.value.code == 2 and len(lines) == 1 and "invalid choice: 'rotation'" in lines[0]


def test_missing_mnist_offline_is_a_user_error(monkeypatch, tmp_path, capsys):
    import torchvision.datasets.mnist as tv_mnist

    def offline(*args, **kwargs):
        raise RuntimeError("no network")

    monkeypatch.setattr(tv_mnist, "download_and_extract_archive", offline)
    monkeypatch.setattr(tv_mnist.MNIST, "resources", [("https://invalid.invalid/x.gz", None)])
    code = main(
        ["train", "--data-dir", str(tmp_path / "empty"), "--output-dir", str(tmp_path / "runs"), "--quick"]
    )
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and "PONDERNET_DATA_DIR" in lines[0] and not captured.out
    assert not (tmp_path / "runs").exists()  # nothing written


def test_programming_errors_keep_their_traceback(monkeypatch):
    from pondernet_tutorial import training

    def broken(*args, **kwargs):
        raise ZeroDivisionError("a bug")

    monkeypatch.setattr(training, "train", broken)
    with pytest.raises(ZeroDivisionError):
        main(["train", "--quick"])


def test_more_user_errors_are_one_line(without_wandb, tmp_path, capsys):
    """A missing logger package, a bad device count, an accelerator whose package is missing (torch_xla
    for ``tpu``), a run folder of another configuration.

    Breaks caught (each was tried): the logger check raising a plain ValueError, run_one raising a plain
    ValueError for a folder of another configuration, Lightning's MisconfigurationException left out of
    the user errors, the Trainer built without turning ModuleNotFoundError into a user error.
    """
    import json

    from pondernet_tutorial.studies import get_study

    quick = ["--quick", "--experiment", "parity-interpolation", "--output-dir", str(tmp_path / "runs")]
    config = get_study("mnist-refine").configs(quick=True, output_dir=str(tmp_path / "study"))[0]
    config.run_dir.mkdir(parents=True)
    (config.run_dir / "metadata.json").write_text(json.dumps({"identity": {**config.identity(), "lr": 0.5}}))
    for args, message in (
        (["train", "--logger", "wandb", *quick], "pip install wandb"),
        (["train", "--devices", "0", *quick], "devices=0"),
        (["train", "--accelerator", "tpu", *quick], "accelerator='tpu'"),
        (
            ["reproduce", "--study", "mnist-refine", "--quick", "--output-dir", str(tmp_path / "study")],
            "lr: saved 0.5",
        ),
    ):
        assert main(args) == 2, args
        lines = capsys.readouterr().err.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("error: ") and message in lines[0], lines
    assert not (tmp_path / "runs").exists()
