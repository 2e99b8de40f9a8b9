"""A run's configuration: defaults by experiment, checks, identity and folder names."""

import pytest

from pondernet_tutorial.runs.config import ConfigMismatchError, TrainConfig, check_same_identity


def test_defaults_are_the_reference_experiments():
    mnist = TrainConfig()
    assert (mnist.batch_size, mnist.lr, mnist.grad_clip, mnist.epochs) == (128, 1e-3, 0.5, 20)
    options = mnist.method_options
    assert (options["max_steps"], options["lambda_p"], options["beta"], options["kl_direction"]) == (
        20,
        0.2,
        0.01,
        "p_prior",
    )
    assert mnist.step == "mnist_mlp" and mnist.step_options["hidden_size"] == 64
    parity = TrainConfig(experiment="parity-extrapolation", method="act")
    assert (parity.lr, parity.batch_size, parity.max_steps, parity.lr_schedule) == (3e-4, 128, 20, "constant")
    assert parity.step == "parity_gru" and parity.stop_at_val_acc == 0.999
    quick = TrainConfig(quick=True)
    assert quick.epochs == 1 and quick.train_subset == 2000 and quick.compile is False


def test_experiments_own_their_defaults():
    from pondernet_tutorial.runs.registry import EXPERIMENTS

    interpolation, extrapolation = EXPERIMENTS["mnist-interpolation"], EXPERIMENTS["mnist-extrapolation"]
    for name in ("data_options", "step_options", "defaults", "quick", "evaluation"):
        assert getattr(interpolation, name) is not getattr(extrapolation, name), name
    parity = [e for e in EXPERIMENTS.values() if e.task == "parity"]
    assert len({id(e.quick) for e in parity}) == len(parity)


def test_identity_leaves_out_where_and_how_fast():
    a = TrainConfig(accelerator="cpu", output_dir="x", compile=True, logger="tensorboard")
    b = TrainConfig(accelerator="gpu", output_dir="y", compile=False)
    assert a.identity() == b.identity() and a.variant == b.variant
    assert "tau" not in TrainConfig().identity() and "lambda_p" not in TrainConfig(method="act").identity()
    with pytest.raises(ValueError, match="lambda_p is an option of pondernet, not of act"):
        TrainConfig(method="act", method_options={"lambda_p": 0.5})


def test_variant_names():
    assert TrainConfig().variant == "pondernet-lambda_p=0.2-beta=0.01"
    assert TrainConfig.from_options(beta=0.0, lambda_p=0.05).variant == "pondernet-lambda_p=0.05-beta=0"
    # -0.0 equals 0.0, so the two are one identity and must be one folder (with "-0" it was a second)
    assert TrainConfig.from_options(beta=-0.0, lambda_p=0.05).variant == "pondernet-lambda_p=0.05-beta=0"
    assert TrainConfig.from_options(method="fixed", max_steps=5).variant == "fixed-max_steps=5"
    assert (
        TrainConfig.from_options(method="act", tau=1e-4, halting_bias=-3.0).variant
        == "act-tau=0.0001-halting_bias=-3"
    )
    assert TrainConfig(step="mnist_refine").variant == "pondernet-lambda_p=0.2-beta=0.01-step=mnist_refine"
    assert TrainConfig(quick=True).variant.endswith("-quick")


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"lambda_p": 1.0}, "lambda_p"),
        ({"lambda_p": 0.0}, "lambda_p"),
        ({"beta": -1.0}, "beta"),
        ({"method": "act", "tau": -1.0}, "tau"),
        ({"method": "act", "epsilon": 1.0}, "epsilon"),
        ({"epochs": 0}, "epochs"),
        ({"max_steps": 2.5}, "max_steps"),
        ({"lr": 0.0}, "lr"),
        ({"experiment": "cifar"}, "experiment must be one of mnist-interpolation"),
        ({"method": "guess"}, "method must be one of pondernet, act, fixed"),
        ({"kl_direction": "sideways"}, "kl_direction"),
        ({"logger": "paper"}, "logger"),
        ({"precision": "8-bit"}, "precision"),
        ({"seed": -1}, "seed"),
        # non-finite numbers are refused, never trained on
        ({"lr": float("inf")}, "lr must be a finite number"),
        ({"lr": float("nan")}, "lr must be a finite number"),
        ({"halting_bias": float("nan")}, "halting_bias must be a finite number"),
        ({"method": "act", "halting_bias": float("-inf")}, "halting_bias must be a finite number"),
        ({"grad_clip": float("inf")}, "grad_clip must be a finite number"),
        ({"beta": float("inf")}, "beta must be a finite number"),
        ({"lr_factor": 2.0}, r"lr_factor must lie in \(0, 1\)"),
        ({"lr_factor": 0.0}, r"lr_factor must lie in \(0, 1\)"),
        ({"lr_patience": -1}, "lr_patience must be >= 0"),
        ({"stop_at_val_acc": 1.5}, r"stop_at_val_acc must lie in \[0, 1\]"),
        ({"epochs": True}, "epochs must be an integer"),
        ({"step": "nope"}, "step must be one of mnist_mlp, .* or an import path module:Class"),
        # the step function's options, from its constructor (runs.options.step_options), and the experiment's data
        ({"step_options": {"bogus": 1}}, "unknown step option 'bogus' for step function mnist_mlp"),
        ({"step_options": {"hidden_size": "abc"}}, "hidden_size must be an integer, got 'abc'"),
        ({"step_options": {"hidden_size": -4}}, "hidden_size must be >= 1"),
        ({"step_options": {"hidden_size": 2.5}}, "hidden_size must be an integer, got 2.5"),
        ({"step_options": {"dropout": 2}}, "dropout probability has to be between 0 and 1"),
        ({"step_options": {"dropout": float("nan")}}, "dropout must be a finite number"),
        (
            {"experiment": "parity-interpolation", "step_options": {"n_elements": 8}},
            "n_elements=8 does not fit the data of parity-interpolation",
        ),
        # where and how a run trains
        ({"accelerator": "bogus"}, "accelerator must be one of"),
        ({"strategy": "bogus"}, "strategy must be auto or one of Lightning's strategies"),
        ({"devices": "abc"}, "devices must be auto, a count >= 1"),
        ({"devices": -1}, "devices must be auto, a count >= 1"),
        ({"devices": "-1"}, "devices must be auto, a count >= 1"),
        ({"devices": 0}, "devices must be auto, a count >= 1"),
    ],
)
def test_bad_values(kwargs, message):
    """Each value is refused with a message that names it: by its declaration's type and range (a field), or
    by the constructor that uses it (a method's or step function's option: check_model)."""
    from pondernet_tutorial.runs.build import check_model

    with pytest.raises(ValueError, match=message):
        check_model(TrainConfig.from_options(**kwargs))


def test_mismatch_names_the_fields():
    with pytest.raises(
        ConfigMismatchError, match=r"lambda_p: saved 0.3, requested 0.2; beta: saved 0.1, requested 0.01"
    ):
        check_same_identity(
            {**TrainConfig().identity(), "beta": 0.1, "lambda_p": 0.3}, TrainConfig().identity(), "the run"
        )
    check_same_identity(TrainConfig().identity(), TrainConfig().identity(), "the run")


def test_checked_values_are_normalised():
    assert TrainConfig(devices="2", accelerator="cpu").devices == 2
    assert TrainConfig(devices="0,1", accelerator="gpu").devices == [0, 1]
    assert TrainConfig.from_options(max_steps=4.0).max_steps == 4 and isinstance(TrainConfig(lr=1).lr, float)
    assert TrainConfig(step_options={"dropout": 0}).step_options["dropout"] == 0.0
    assert TrainConfig(experiment="parity-interpolation", step_options={"n_elements": 16}).step_options == {
        "n_elements": 16,
        "hidden_size": 64,
    }
    assert TrainConfig(strategy="ddp", accelerator="cpu").strategy == "ddp"
    path = (
        "pondernet_tutorial.steps.parity:ParityStep"  # a step function by import path: its options unchecked
    )
    assert (
        TrainConfig(experiment="parity-interpolation", step=path, step_options={"n_elements": 16}).step
        == path
    )


def test_more_cpu_devices_than_cores_are_refused(monkeypatch):
    import os

    import torch

    cores = os.cpu_count()
    with pytest.raises(ValueError, match=f"this machine has {cores} cores"):
        TrainConfig(accelerator="cpu", devices=cores + 1)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: False)
    with pytest.raises(ValueError, match=f"this machine has {cores} cores"):
        TrainConfig(devices=cores + 1)  # auto, without a GPU: the CPU
    with pytest.raises(ValueError, match="on the CPU devices is a count"):
        TrainConfig(accelerator="cpu", devices="0,1")
    assert TrainConfig(accelerator="cpu", devices=cores).devices == cores
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert TrainConfig(devices=cores + 1).devices == cores + 1  # a GPU machine: Lightning counts the GPUs


def test_a_method_option_is_checked_by_its_constructor():
    """The range of a method's option is checked once, by the constructor that uses it: the command
    line and train() build the model on the meta device (check_model) and report the constructor's own
    message, wherever the value comes from."""
    from pondernet_tutorial.methods import pondernet
    from pondernet_tutorial.runs.build import check_model

    config = TrainConfig(method_options={"lambda_p": 1.5})  # of the right type: TrainConfig takes it
    with pytest.raises(ValueError) as from_config:
        check_model(config)
    with pytest.raises(ValueError) as from_loss:
        pondernet.PonderLoss(lambda_p=1.5, max_steps=20)
    assert str(from_loss.value).rstrip(".") in str(from_config.value)
    with pytest.raises(ValueError, match="lambda_p must be a number"):
        TrainConfig(method_options={"lambda_p": "big"})  # the type is the annotation's


def test_each_option_is_read_from_its_constructor():
    """A method's and a step function's options are the keywords of its constructor, read from its source
    without importing it: the defaults and types are the signature's as inspect sees it on the imported
    class, and each has a help line from the docstring."""
    import inspect
    import typing

    from pondernet_tutorial.runs.options import (
        METHOD_ARGUMENTS,
        REQUIRED,
        STEP_ARGUMENTS,
        constructor_options,
    )
    from pondernet_tutorial.runs.registry import METHODS, STEPS, import_path

    for registry, skip in ((METHODS, METHOD_ARGUMENTS), (STEPS, STEP_ARGUMENTS)):
        for name, path in registry.items():
            cls = import_path(path)
            signature = inspect.signature(cls.__init__).parameters
            hints = typing.get_type_hints(cls.__init__)
            read = constructor_options(path, skip)
            assert list(read) == [k for k in signature if k not in ("self", *skip)], name
            for key, parameter in read.items():
                default = signature[key].default
                assert parameter.default == (REQUIRED if default is inspect.Parameter.empty else default)
                assert type(parameter.default) is type(default) or default is inspect.Parameter.empty
                kinds = [k for k in typing.get_args(hints[key]) or [hints[key]] if k is not type(None)]
                assert [parameter.type] == kinds, (name, key)
                assert parameter.help, f"{name}: no line for {key} in the docstring's Args"


def test_no_method_option_is_declared_twice():
    """A method's option is declared once, in its constructor: TrainConfig has no field of that name
    (the options travel in method_options), and the command line's flag takes its help from the
    constructor's docstring."""
    from dataclasses import fields

    from pondernet_tutorial.runs.cli import build_parser
    from pondernet_tutorial.runs.options import all_method_options, step_options
    from pondernet_tutorial.runs.registry import STEPS

    options = {name for declared in all_method_options().values() for name in declared}
    options |= {name for step in STEPS for name in step_options(step)}
    assert not options & {f.name for f in fields(TrainConfig)}
    train = build_parser()._subparsers._group_actions[0].choices["train"]
    tau = next(a for a in train._actions if a.dest == "tau")
    assert all_method_options()["act"]["tau"].help in " ".join(tau.help.split())
