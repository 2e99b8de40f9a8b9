import subprocess
import sys

import pytest

from pondernet_tutorial.__main__ import HELP, build_parser, main
from pondernet_tutorial.training import TrainConfig


def test_help_explains_every_option():
    for command in ("train", "evaluate", "reproduce"):
        out = subprocess.run(
            [sys.executable, "-m", "pondernet_tutorial", command, "--help"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        assert "usage" in out
    train_help = build_parser()._subparsers._group_actions[0].choices["train"].format_help()
    for name in HELP:
        assert "--" + name.replace("_", "-") in train_help


def test_defaults_are_the_reference_experiment():
    args = build_parser().parse_args(["train"])
    assert (args.batch_size, args.lr, args.grad_clip, args.epochs) == (128, 1e-3, 0.5, 20)
    assert (args.max_steps, args.lambda_p, args.beta, args.hidden_size) == (20, 0.2, 0.01, 64)
    assert TrainConfig().experiment == "interpolation"


def test_bad_values_are_refused(tmp_path):
    with pytest.raises(SystemExit):
        build_parser().parse_args(["train", "--experiment", "rotation"])
    with pytest.raises(ValueError, match="lambda_p"):
        main(["train", "--lambda-p", "0", "--output-dir", str(tmp_path)])
    with pytest.raises(ValueError, match="max_steps"):
        main(["train", "--max-steps", "0", "--output-dir", str(tmp_path)])
    assert not any(tmp_path.iterdir())  # nothing written for a refused configuration


def test_quick_reproduce_never_ships():
    with pytest.raises(ValueError, match="never shipped"):
        main(["reproduce", "--ship", "--train-subset", "100", "--epochs", "1"])
