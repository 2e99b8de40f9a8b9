"""A run's configuration: defaults by experiment, checks, identity and folder names."""

import pytest

from pondernet_tutorial.runs.config import ConfigMismatchError, TrainConfig, check_same_identity


def test_defaults_are_the_reference_experiments():
    mnist = TrainConfig()
    assert (mnist.batch_size, mnist.lr, mnist.grad_clip, mnist.epochs) == (128, 1e-3, 0.5, 20)
    assert (mnist.max_steps, mnist.lambda_p, mnist.beta, mnist.kl_direction) == (20, 0.2, 0.01, "p_prior")
    assert mnist.step == "mnist_mlp" and mnist.step_options["hidden_size"] == 64
    parity = TrainConfig(experiment="parity-extrapolation", method="act")
    assert (parity.lr, parity.batch_size, parity.max_steps, parity.lr_schedule) == (3e-4, 128, 20, "constant")
    assert parity.step == "parity_gru" and parity.stop_at_val_acc == 0.999
    quick = TrainConfig(quick=True)
    assert quick.epochs == 1 and quick.train_subset == 2000 and quick.compile is False


def test_identity_leaves_out_where_and_how_fast():
    a = TrainConfig(accelerator="cpu", output_dir="x", compile=True, logger="tensorboard")
    b = TrainConfig(accelerator="gpu", output_dir="y", compile=False)
    assert a.identity() == b.identity() and a.variant == b.variant
    assert "tau" not in TrainConfig().identity() and "lambda_p" not in TrainConfig(method="act").identity()
    assert TrainConfig(method="act", lambda_p=0.5).variant == TrainConfig(method="act").variant


def test_variant_names():
    assert TrainConfig().variant == "pondernet-lambda_p=0.2-beta=0.01"
    assert TrainConfig(beta=0.0, lambda_p=0.05).variant == "pondernet-lambda_p=0.05-beta=0"
    assert TrainConfig(method="fixed", max_steps=5).variant == "fixed-max_steps=5"
    assert TrainConfig(method="act", tau=1e-4, halting_bias=-3.0).variant == "act-tau=0.0001-halting_bias=-3"
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
        # the step function's options, from its declaration in runs.options.STEP_OPTIONS, and the experiment's data
        ({"step_options": {"bogus": 1}}, "unknown step option 'bogus' for step function mnist_mlp"),
        ({"step_options": {"hidden_size": "abc"}}, "hidden_size must be an integer, got 'abc'"),
        ({"step_options": {"hidden_size": -4}}, "hidden_size must be >= 1"),
        ({"step_options": {"hidden_size": 2.5}}, "hidden_size must be an integer, got 2.5"),
        ({"step_options": {"dropout": 2}}, r"dropout must lie in \[0, 1\)"),
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
    with pytest.raises(ValueError, match=message):
        TrainConfig(**kwargs)


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
    assert TrainConfig(max_steps=4.0).max_steps == 4 and isinstance(TrainConfig(lr=1).lr, float)
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


def test_each_range_check_lives_where_its_equation_is_taught():
    """The configuration and the command line check an option of a halting method with the function of
    the module that teaches its equation (named by import path, so that --help loads no PyTorch), the
    function the class itself calls: one message, wherever the value comes from."""
    from pondernet_tutorial import halting
    from pondernet_tutorial.methods import pondernet
    from pondernet_tutorial.runs.options import METHOD_OPTIONS
    from pondernet_tutorial.runs.registry import import_path

    taught = {
        ("pondernet", "lambda_p"): halting.check_lambda_p,
        ("pondernet", "beta"): halting.check_weight,
        ("pondernet", "kl_direction"): pondernet.check_kl_direction,
        ("pondernet", "train_epsilon"): halting.check_epsilon,
        ("act", "tau"): halting.check_weight,
        ("act", "epsilon"): halting.check_epsilon,
    }
    for (method, name), check in taught.items():
        assert import_path(METHOD_OPTIONS[method][name].check) is check, (method, name)
    assert METHOD_OPTIONS["pondernet"]["kl_direction"].choices == pondernet.KL_DIRECTIONS  # read, not copied
    with pytest.raises(ValueError) as from_config:
        TrainConfig(lambda_p=1.5)
    with pytest.raises(ValueError) as from_loss:
        pondernet.PonderLoss(lambda_p=1.5, max_steps=20)
    assert str(from_config.value) == str(from_loss.value)


def test_each_default_is_the_constructors():
    """A method's and a step function's options are keywords of its constructor, and the defaults that the
    option tables read from the constructor's source (without importing it) are the signature's: every
    parameter of every registered class, as inspect sees it on the imported class."""
    import inspect

    from pondernet_tutorial.runs.options import (
        METHOD_OPTIONS,
        REQUIRED,
        STEP_OPTIONS,
        constructor_parameters,
    )
    from pondernet_tutorial.runs.registry import METHODS, STEPS, import_path

    assert set(STEP_OPTIONS) == set(STEPS) and set(METHOD_OPTIONS) == set(METHODS)
    for registry, tables in ((METHODS, METHOD_OPTIONS), (STEPS, STEP_OPTIONS)):
        for name, path in registry.items():
            signature = inspect.signature(import_path(path).__init__).parameters
            expected = {
                key: REQUIRED if p.default is inspect.Parameter.empty else p.default
                for key, p in signature.items()
                if key != "self"
            }
            assert constructor_parameters(path) == expected, name
            for key, option in tables[name].items():
                default = None if expected[key] is REQUIRED else expected[key]
                assert option.default == default and type(option.default) is type(default), (name, key)
    for step, declared in STEP_OPTIONS.items():  # a step function's options: all its keywords
        assert set(declared) == set(constructor_parameters(STEPS[step])) - {"n_classes"}, step


def test_the_configuration_has_a_field_for_every_method_option():
    """TrainConfig declares one plain field per option of the halting methods (METHOD_OPTIONS), of its
    type, in the order run folders name them: each method's own options, then those several share; every
    other field is a setting of its own."""
    from dataclasses import fields

    from pondernet_tutorial.runs.config import TrainConfig
    from pondernet_tutorial.runs.options import METHOD_OPTIONS

    names = [name for options in METHOD_OPTIONS.values() for name in options]
    own = [name for name in dict.fromkeys(names) if names.count(name) == 1]
    shared = [name for name in dict.fromkeys(names) if names.count(name) > 1]
    declared = [f for f in fields(TrainConfig) if "option" not in f.metadata]
    assert [f.name for f in declared] == own + shared
    for f in declared:
        kind = next(options[f.name].type for options in METHOD_OPTIONS.values() if f.name in options)
        assert f.type == f"{kind.__name__} | None" and f.default is None, f.name
