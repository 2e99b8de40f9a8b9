"""The command line: help, user errors as one line with exit status 2, imports kept light."""

import os
import shutil
import subprocess
import sys

import pytest
import torch

from pondernet_tutorial.runs.cli import build_parser, config_names, declaration, main
from pondernet_tutorial.runs.config import PRETRAINED_DIR, WEIGHTS, TrainConfig


def test_help_explains_every_option(capsys):
    for command in ("train", "evaluate", "reproduce", "list"):
        with pytest.raises(SystemExit) as exit_info:
            main([command, "--help"])
        assert exit_info.value.code == 0 and "usage" in capsys.readouterr().out
    train_help = build_parser()._subparsers._group_actions[0].choices["train"].format_help()
    for name in config_names():  # every field and every method's option is a flag
        flag = "--step-option" if name == "step_options" else "--" + name.replace("_", "-")
        assert flag in train_help, flag
    assert "--lambda-p" in train_help and "--method-options" not in train_help


def test_help_shows_every_experiments_default():
    """Each default that a run resolves, for any experiment and method, is in its flag's help: the
    paper's set-up (λ_p 0.1, no clipping, ε 0.05, ACT's bias +1, 100 steps at evaluation) included."""
    from pondernet_tutorial.runs.registry import EXPERIMENTS, METHODS

    train = build_parser()._subparsers._group_actions[0].choices["train"]
    shown = {a.dest: " ".join(a.help.split()) for a in train._actions if a.help and "[default:" in a.help}
    for experiment in EXPERIMENTS:
        for method in METHODS:
            for name, value in TrainConfig(experiment=experiment, method=method).options().items():
                if name in shown and name not in ("experiment", "method") and not isinstance(value, dict):
                    default = shown[name][shown[name].index("[default:") :]
                    if "[default:" in declaration(name)[1]:  # written by hand (--step, --data-dir)
                        continue
                    assert f"{value}" in default, (experiment, method, name, value, default)
    assert "parity-paper*: 0.1" in shown["lambda_p"]


def test_help_names_an_experiment_whose_default_differs_from_its_set_ups(monkeypatch):
    """Where one experiment of a set-up has a default of its own for one method, the help names that
    experiment instead of the set-up, for every method alike."""
    from dataclasses import replace

    from pondernet_tutorial.runs.cli import _default_text
    from pondernet_tutorial.runs.registry import EXPERIMENTS

    own = replace(EXPERIMENTS["mnist-extrapolation"], defaults={"compile": True, "act.max_steps": 7})
    monkeypatch.setitem(EXPERIMENTS, "mnist-extrapolation", own)
    option, help = declaration("max_steps")
    text = " ".join(_default_text("max_steps", option, help).split())
    assert "act: 20 (mnist-extrapolation: 7, pointer: 10)" in text, text


def test_help_and_halting_load_no_lightning():
    probe = (
        "import sys; {}; print(sorted(m for m in sys.modules if m.split('.')[0] in ('lightning', 'torch')))"
    )
    help_only = probe.format(
        "from pondernet_tutorial.runs.cli import build_parser; build_parser().format_help()"
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
        "error: lambda_p must lie strictly between 0 and 1, got 1.5. It is the prior's per-step halting "
        "probability: the geometric prior has mean 1/lambda_p steps (0.2 gives 5 steps); for exactly one step "
        "use FixedSteps(step, max_steps=1) (--method fixed --max-steps 1)."
    ]


@pytest.mark.parametrize(
    "args, message",
    [
        (["train", "--lambda-p", "1.5"], "lambda_p must lie strictly between 0 and 1"),
        (["train", "--step-option", "hidden_size"], "KEY=VALUE"),
        (
            ["evaluate", "--checkpoint", "nowhere/model.safetensors", "--experiment", "mnist-interpolation"],
            "no model file at",
        ),
        (["evaluate", "--checkpoint", "nowhere/model.safetensors"], "no model file at"),
        (
            ["evaluate", "--pretrained", "parity-interpolation", "--method", "fixed", "--seed", "99"],
            "no shipped model",
        ),
        (["reproduce", "--jobs", "0"], "--jobs must lie in"),
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
    # the folder was given: the advice names it (--data-dir), not the environment variable
    assert code == 2 and len(lines) == 1 and "(--data-dir, data_dir=)" in lines[0] and not captured.out
    assert not (tmp_path / "runs").exists()  # nothing written


def test_programming_errors_keep_their_traceback(monkeypatch):
    from pondernet_tutorial.runs import training

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

    from pondernet_tutorial.runs.studies import get_study

    quick = ["--quick", "--experiment", "parity-interpolation", "--output-dir", str(tmp_path / "runs")]
    config = get_study("mnist-refine").configs(quick=True, output_dir=str(tmp_path / "study"))[0]
    config.run_dir.mkdir(parents=True)
    (config.run_dir / "metadata.json").write_text(json.dumps({"identity": {**config.identity(), "lr": 0.5}}))
    for args, message in (
        (["train", "--logger", "wandb", *quick], "pip install wandb"),
        (["train", "--devices", "0", *quick], "devices must be auto, a count >= 1"),
        (["train", "--accelerator", "tpu", *quick], "accelerator='tpu'"),
        (
            ["reproduce", "--study", "mnist-refine", "--quick", "--output-dir", str(tmp_path / "study")],
            "lr: saved 0.5",
        ),
        # Lightning's words, and what to change (without a GPU: "No supported gpu backend found")
        *(
            []
            if torch.cuda.is_available()
            else [(["train", "--accelerator", "gpu", *quick], "check --accelerator")]
        ),
    ):
        assert main(args) == 2, args
        lines = capsys.readouterr().err.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("error: ") and message in lines[0], lines
    assert not (tmp_path / "runs").exists()


def test_a_step_function_that_does_not_fit_the_data_is_one_line_before_any_folder(tmp_path, capsys):
    """MNIST's step on parity's vectors gave a traceback from Lightning's first training step, exit
    status 1, and an unfinished run folder. Break caught (tried): the dry forward pass left out of
    training, or its error not counted among the user errors."""
    runs = tmp_path / "runs"
    args = ["train", "--quick", "--experiment", "parity-interpolation", "--step", "mnist_mlp"]
    assert main([*args, "--output-dir", str(runs)]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: the step function mnist_mlp does not fit"), lines
    assert "(batch, 1, 28, 28), got (2, 16)" in lines[0] and "own step function, parity_gru" in lines[0]
    assert not runs.exists()


def _main(args) -> int:
    """``main(args)``'s exit status, whether argparse exits or main returns."""
    try:
        return main(args)
    except SystemExit as exit_info:
        return exit_info.code


SHIPPED_PARITY = PRETRAINED_DIR / "parity-interpolation" / "pondernet-lambda_p=0.2-beta=0.01" / "seed0"


@pytest.fixture
def nothing_runs(monkeypatch):
    """Training, loading data and evaluating fail the test: a mistake must be found before them."""
    from pondernet_tutorial.runs import build, evaluation, studies, training

    def forbidden(*args, **kwargs):
        raise AssertionError("reached training, data or evaluation before the mistake was found")

    for module, name in (
        (training, "train"),
        (training, "make_datamodule"),
        (build, "make_datamodule"),  # the evaluation's
        (studies, "run_one"),
    ):
        monkeypatch.setattr(module, name, forbidden)
    monkeypatch.setattr(evaluation, "evaluate", forbidden)


def _mistakes(tmp):
    """(arguments, what the one-line error says) for every mistake of issue 15 §4."""
    parity = ["train", "--quick", "--experiment", "parity-interpolation", "--output-dir", f"{tmp}/runs"]
    mnist = ["train", "--quick", "--output-dir", f"{tmp}/runs"]
    evaluate = ["evaluate", "--pretrained"]
    return [
        ([*parity, "--step-option", "bogus=1"], "unknown step option 'bogus' for step function parity_gru"),
        ([*parity, "--step-option", "hidden_size=abc"], "hidden_size must be an integer, got 'abc'"),
        ([*parity, "--step-option", "hidden_size=-4"], "hidden_size must be >= 1, got -4"),
        ([*parity, "--step-option", "hidden_size=2.5"], "hidden_size must be an integer, got 2.5"),
        ([*mnist, "--step-option", "dropout=2"], "dropout probability has to be between 0 and 1, but got 2"),
        (
            [*parity, "--step-option", "n_elements=8"],
            "n_elements=8 does not fit the data of parity-interpolation",
        ),
        ([*mnist, "--lr-factor", "2"], "lr_factor must lie in (0, 1), got 2.0"),
        ([*parity, "--accelerator", "bogus"], "invalid choice: 'bogus'"),
        ([*parity, "--strategy", "bogus"], "strategy must be auto or one of Lightning's strategies"),
        ([*parity, "--strategy", "ddp_spawn"], "strategy ddp_spawn trains in worker processes"),
        ([*parity, "--devices", "abc"], "devices must be auto, a count >= 1"),
        ([*parity, "--devices=-1"], "devices must be auto, a count >= 1"),
        ([*parity, "--lr", "inf"], "lr must be a finite number (at most 3.4e38 in size), got inf"),
        (
            [*parity, "--halting-bias", "nan"],
            "halting_bias must be a finite number (at most 3.4e38 in size), got nan",
        ),
        (
            [*parity, "--halting-bias", "1e39"],
            "halting_bias must be a finite number (at most 3.4e38 in size), got 1e+39",
        ),
        ([*parity, "--output-dir", f"{tmp}/a-file"], "is a file, not a folder"),
        ([*parity, "--tau", "0.01"], "--tau is an option of act, not of pondernet: add --method act."),
        ([*parity, "--method", "fixed", "--lambda-p", "0.3"], "--lambda-p is an option of pondernet"),
        ([*parity, "--output-dir", f"{tmp}/a-file/runs"], "lies under the file"),
        (
            ["reproduce", "--study", "mnist-refine", "--quick", "--output-dir", f"{tmp}/a-file"],
            "is a file, not a folder",
        ),
        ([*evaluate, "mnist-interpolation", "--angles", "nan"], "must lie in [-360, 360] degrees, got nan"),
        (
            [*evaluate, "mnist-interpolation", "--angles", "0", "inf"],
            "must lie in [-360, 360] degrees, got inf",
        ),
        ([*evaluate, "mnist-interpolation", "--uniform", "nan"], "must lie in [-360, 360] degrees, got nan"),
        # (round 7: 1e308 passed as finite, then overflowed in torch: a traceback)
        (
            [*evaluate, "mnist-interpolation", "--angles", "1e308"],
            "must lie in [-360, 360] degrees, got 1e+308",
        ),
        (
            [*evaluate, "mnist-interpolation", "--uniform", "200"],
            "half-range must lie in [0, 180] degrees, got 200",
        ),
        ([*evaluate, "parity-interpolation", "--limit", "0"], "--limit must be >= 1, got 0"),
        ([*evaluate, "parity-interpolation", "--limit", "-5"], "--limit must be >= 1, got -5"),
        ([*evaluate, "parity-interpolation", "--output", str(tmp)], "is a folder: give a file name"),
        (
            [*evaluate, "parity-interpolation", "--output", f"{tmp}/missing/t.csv"],
            "does not exist; create it",
        ),
        (
            [
                "evaluate",
                "--checkpoint",
                str(SHIPPED_PARITY / WEIGHTS),
                "--experiment",
                "mnist-interpolation",
            ],
            "is a run of parity-interpolation, another task than mnist-interpolation's",
        ),
        (
            ["evaluate", "--checkpoint", f"{tmp}"],
            "is a folder without a model.safetensors: give a run's model file",
        ),
        (  # without its metadata.json: the model itself tells its task
            ["evaluate", "--checkpoint", f"{tmp}/alone/{WEIGHTS}", "--experiment", "mnist-interpolation"],
            "predicts 2 classes but mnist-interpolation has 10",
        ),
    ]


@pytest.mark.parametrize("case", range(len(_mistakes("TMP"))))
def test_mistakes_are_one_line_errors_before_anything_is_made(case, tmp_path, nothing_runs, capsys):
    """Each mistake: exit status 2, one line ``error: ...``, no folder made, no data loaded, nothing
    trained or evaluated. Breaks tried: each check removed in turn (see the report)."""
    (tmp_path / "a-file").write_text("")
    (tmp_path / "alone").mkdir()
    shutil.copy(SHIPPED_PARITY / WEIGHTS, tmp_path / "alone" / WEIGHTS)
    args, message = _mistakes(tmp_path)[case]
    assert _main(args) == 2, args
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and message in lines[0], lines
    assert not (tmp_path / "runs").exists() and not (tmp_path / "missing").exists()


@pytest.mark.skipif(not os.access("/proc", os.F_OK), reason="needs /proc, a folder nobody can write into")
@pytest.mark.parametrize("command", ["train", "reproduce"])
def test_an_output_folder_that_cannot_be_written(command, nothing_runs, capsys):
    assert _main([command, "--quick", "--output-dir", "/proc/pondernet-runs"]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and "--output-dir /proc/pondernet-runs cannot be written" in lines[0], lines


def test_more_cpu_devices_than_cores_start_no_process(nothing_runs, capsys):
    cores = os.cpu_count()
    for args in (
        ["train", "--quick", "--accelerator", "cpu", "--devices", str(cores + 1)],
        ["reproduce", "--quick", "--accelerator", "cpu", "--devices", str(cores + 1)],
    ):
        assert _main(args) == 2
        lines = capsys.readouterr().err.strip().splitlines()
        assert len(lines) == 1 and f"this machine has {cores} cores" in lines[0], lines


@pytest.mark.parametrize("divergence", ["infinite loss", "nan weights"])
def test_a_run_that_diverges_stops_with_an_error_and_no_model(divergence, tmp_path, monkeypatch, capsys):
    """A non-finite training loss (or weights) ends the run at the end of the epoch with a one-line
    error, and neither the model file nor metadata.json is written. Breaks tried: the callback left out of
    train(); its loss test removed (the infinite loss, with finite gradients, then trains on). NaN
    weights make the next losses NaN, which the epoch's mean keeps, so the loss test stops both cases;
    the weights' own test has a test of its own (test_faults.py)."""
    import torch

    from pondernet_tutorial.methods.fixed import FixedSteps

    honest = FixedSteps.loss

    def diverging(self, out, targets):
        losses = honest(self, out, targets)
        if divergence == "infinite loss":  # the loss is inf, its gradient is the task's
            losses["loss"] = losses["loss"] + torch.tensor(float("inf"))
        else:  # the loss stays finite, its gradient is NaN: d/dw √|w − w| = ∞ at 0, times 0
            weight = next(self.parameters())
            losses["loss"] = losses["loss"] + 0.0 * (weight - weight.detach()).abs().sqrt().sum()
        return losses

    monkeypatch.setattr(FixedSteps, "loss", diverging)
    args = [
        "train",
        "--quick",
        "--experiment",
        "parity-interpolation",
        "--method",
        "fixed",
        "--max-steps",
        "2",
    ]
    args += ["--train-subset", "256", "--no-progress-bar", "--output-dir", str(tmp_path)]
    assert main(args) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert lines[-1].startswith("error: training diverged in epoch 1"), lines
    assert not list(tmp_path.rglob(WEIGHTS)) and not list(tmp_path.rglob("metadata.json"))


def test_list_into_a_closed_pipe_ends_without_a_traceback():
    """``list | head -1``: the reader goes away before the listing is written."""
    process = subprocess.Popen(
        [sys.executable, "-m", "pondernet_tutorial", "list"], stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    process.stdout.close()  # before the child writes anything: its first print meets a closed pipe
    stderr = process.stderr.read().decode()
    process.wait()
    assert "Traceback" not in stderr and "BrokenPipeError" not in stderr, stderr


def test_evaluate_on_rotated_mnist_gives_upright_accuracy_first_and_names_what_it_averages():
    import pandas as pd

    from pondernet_tutorial.runs.cli import _evaluation_summary

    def rows(name, mode, degrees, right):
        return [
            {
                "set": name,
                "mode": mode,
                "degrees": degrees,
                "prediction": int(i >= right),
                "label": 0,
                "halt_step": 2,
                "expected_steps": 2.5,
            }
            for i in range(4)
        ]

    per_sample = pd.DataFrame(
        rows("rot0", "exact", 0.0, 4)
        + rows("rot180", "exact", 180.0, 0)
        + rows("rot_pm45", "uniform", 45.0, 2)
    )
    first, upright, average = _evaluation_summary("run", per_sample).splitlines()
    assert (
        first == "run:" and upright.startswith("  upright (0°): accuracy 1.0000") and "over 4 test" in upright
    )
    assert average.startswith(
        "  averaged over 3 rotations, 2 exact angles (0°, 180°) and 1 uniform range (±45°)"
    )
    assert "accuracy 0.5000" in average and "over 12 test samples" in average
    parity = per_sample.drop(columns=["mode", "degrees"])
    assert _evaluation_summary("run", parity).startswith("run: accuracy 0.5000")


def test_list_writes_a_dictionary_option_with_its_equals_signs(capsys):
    assert main(["list"]) == 0
    shipped = capsys.readouterr().out.split("shipped runs with weights:")[1]
    assert "step_options=(exit_feature=false,n_slots=32)" in shipped
    assert "featurefalse" not in shipped


def test_a_missing_checkpoint_is_reported_before_its_missing_metadata(tmp_path, capsys):
    """A --checkpoint that is not there: its missing model file first, not the metadata.json beside it
    (before: 'no readable metadata.json beside ...: say which experiment it is with --experiment')."""
    missing = tmp_path / "run" / WEIGHTS
    assert main(["evaluate", "--checkpoint", str(missing)]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert lines == [
        f"error: no model file at {missing}; give the model.safetensors of a run, or train one "
        "with `python -m pondernet_tutorial train`."
    ]
    missing.parent.mkdir()
    missing.write_bytes(b"")  # a model file with no metadata.json beside it: --experiment is asked for
    assert main(["evaluate", "--checkpoint", str(missing)]) == 2
    err = capsys.readouterr().err
    assert "no readable metadata.json" in err and "--experiment" in err


@pytest.mark.parametrize(
    "argv0, command",
    [
        ("/venv/bin/pondernet-tutorial", "pondernet-tutorial"),
        ("/src/pondernet_tutorial/__main__.py", "python -m pondernet_tutorial"),
    ],
)
def test_messages_name_the_command_as_it_was_typed(argv0, command, tmp_path, monkeypatch, capsys):
    """The console script's user reads `pondernet-tutorial ...`, not `python -m pondernet_tutorial ...`
    (before: every message and the usage line said `python -m pondernet_tutorial`)."""
    from pondernet_tutorial.runs.studies import load_study

    monkeypatch.setattr(sys, "argv", [argv0])
    with pytest.raises(SystemExit):
        main(["--help"])
    assert capsys.readouterr().out.startswith(f"usage: {command} ")
    assert main(["evaluate", "--checkpoint", str(tmp_path / WEIGHTS)]) == 2
    assert f"`{command} train`" in capsys.readouterr().err
    with pytest.raises(FileNotFoundError, match=f"run `{command} reproduce --study nothing`"):
        load_study("nothing", tmp_path)
    wrong = "python -m pondernet_tutorial" if command == "pondernet-tutorial" else "pondernet-tutorial"
    assert main(["evaluate", "--checkpoint", str(tmp_path / WEIGHTS)]) == 2
    assert wrong not in capsys.readouterr().err


def test_a_finished_run_says_overwrite_in_the_callers_words(tmp_path, capsys):
    """Python: pass overwrite=True; the command line: pass --overwrite (before: 'pass overwrite=True
    (--overwrite)' in both)."""
    from test_faults import TINY_ARGS, tiny

    from pondernet_tutorial.runs.training import train

    config = tiny(tmp_path)
    train(config)
    with pytest.raises(FileExistsError) as caught:
        train(config)
    assert "overwrite=True" in str(caught.value) and "--overwrite" not in str(caught.value)
    capsys.readouterr()
    assert main(["train", *map(str, TINY_ARGS), "--output-dir", str(tmp_path)]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: {config.run_dir} already holds this trained run")
    assert "--overwrite" in lines[0] and "overwrite=True" not in lines[0]


@pytest.mark.slow
def test_a_method_registered_once_trains_from_the_command_line(tmp_path, monkeypatch, capsys):
    """One entry in METHODS puts a new method on the command line: its options are flags with the help of
    its docstring, its constructor checks them, and it trains, names its folder and loads like the book's
    methods."""
    from pondernet_tutorial.runs.checkpoints import load_model
    from pondernet_tutorial.runs.registry import METHODS

    monkeypatch.setitem(METHODS, "smoothed", "toy_method:SmoothedSteps")  # the one registration
    with pytest.raises(SystemExit):
        main(["train", "--help"])
    assert "label smoothing of the cross-entropy" in " ".join(capsys.readouterr().out.split())
    args = ["train", "--quick", "--experiment", "parity-interpolation", "--method", "smoothed"]
    args += ["--output-dir", str(tmp_path), "--no-progress-bar"]
    assert _main([*args, "--smoothing", "1.5"]) == 2
    assert "smoothing must lie in [0, 1), got 1.5" in capsys.readouterr().err
    assert _main([*args, "--smoothing", "0.1"]) == 0
    config = TrainConfig(
        experiment="parity-interpolation", method="smoothed", method_options={"smoothing": 0.1}, quick=True
    )
    assert config.variant == "smoothed-smoothing=0.1-quick"
    module = load_model(tmp_path / "parity-interpolation" / config.variant / "seed0" / WEIGHTS)
    assert type(module.model).__name__ == "SmoothedSteps" and module.model.smoothing == 0.1


def test_evaluate_takes_a_run_folder_for_its_model_file(capsys):
    """``evaluate --checkpoint`` given a run's folder evaluates the model file in it."""
    assert _main(["evaluate", "--checkpoint", str(SHIPPED_PARITY), "--limit", "50"]) == 0
    assert f"{SHIPPED_PARITY / WEIGHTS}: accuracy" in capsys.readouterr().out
