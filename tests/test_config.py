"""A run's configuration: defaults by experiment, checks, identity and folder names."""

import warnings

import pytest

from pondernet_tutorial.config import ConfigMismatchError, TrainConfig, check_same_identity


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
        ({"tau": -1.0}, "tau"),
        ({"epsilon": 1.0}, "epsilon"),
        ({"epochs": 0}, "epochs"),
        ({"max_steps": 2.5}, "max_steps"),
        ({"lr": 0.0}, "lr"),
        ({"experiment": "cifar"}, "unknown experiment"),
        ({"method": "guess"}, "unknown method"),
        ({"kl_direction": "sideways"}, "kl_direction"),
        ({"logger": "paper"}, "logger"),
        ({"precision": "8-bit"}, "precision"),
        ({"seed": -1}, "seed"),
    ],
)
def test_bad_values(kwargs, message):
    with pytest.raises(ValueError, match=message):
        TrainConfig(**kwargs)


def test_old_kl_names_translated():
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert TrainConfig(kl_direction="reverse").kl_direction == "prior_p"
    assert any(issubclass(w.category, DeprecationWarning) for w in caught)


def test_mismatch_names_the_fields():
    with pytest.raises(
        ConfigMismatchError, match=r"lambda_p: saved 0.3, requested 0.2; beta: saved 0.1, requested 0.01"
    ):
        check_same_identity(
            {**TrainConfig().identity(), "beta": 0.1, "lambda_p": 0.3}, TrainConfig().identity(), "the run"
        )
    check_same_identity(TrainConfig().identity(), TrainConfig().identity(), "the run")
