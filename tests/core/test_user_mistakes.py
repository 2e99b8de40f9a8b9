"""Mistakes a user of the Python API plausibly makes, each refused in one line that says what to do
(found by a package-reuse review).

Deliberate breaks these tests catch (each was tried):
- the halting logit's shape not checked in inference (PonderNet's or ACT's): an IndexError or a
  broadcasting error instead, and ACT's training check of its logits removed:
  test_a_halting_logit_of_shape_b_1_is_named;
- PonderLitModule's check of its model removed: test_a_step_function_not_wrapped_in_a_method;
- fit's check of its data module removed: test_fit_wants_a_data_module;
- fit's check of patience or of stop_at_val_acc removed (Lightning takes patience=-1 and stops at the
  first epoch without a better accuracy): test_fit_refuses_a_negative_patience_and_an_accuracy_above_1;
- diagnose judging one input: test_diagnose_gives_no_verdict_from_one_input;
- float(lambda_p) unguarded, and training_threads' check removed:
  test_a_missing_lambda_p_and_negative_threads_are_named;
- FolderCheckpoint's check of select_by at Lightning's sanity check removed (Lightning names it after
  the first epoch): test_a_misspelt_select_by_is_named_before_the_first_training_step.
"""

import pytest
import torch
from lightning import LightningDataModule
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from pondernet_tutorial import ACT, PonderLitModule, PonderNet, StepFunction, diagnose, fit


class Step(StepFunction):
    """A small recurrent step; ``squeeze=False`` keeps the halting logit's last axis, (B, 1), as a user
    who forgot ``.squeeze(1)`` would; ``head`` names its halting layer."""

    def __init__(self, squeeze=True, head="halting_head", n_inputs=4, size=8):
        super().__init__()
        self.squeeze, self.head = squeeze, head
        self.cell = nn.GRUCell(n_inputs, size)
        self.out = nn.Linear(size, 2)
        setattr(self, head, nn.Linear(size, 1))

    def initial_state(self, x):
        return x.new_zeros(len(x), self.cell.hidden_size)

    def step(self, x, h):
        h = self.cell(x, h)
        z = getattr(self, self.head)(h)
        return self.out(h), z.squeeze(1) if self.squeeze else z, h


@pytest.mark.parametrize("method", [PonderNet, ACT])
def test_a_halting_logit_of_shape_b_1_is_named(method):
    model = method(Step(squeeze=False), max_steps=3)
    x, y = torch.randn(5, 4), torch.randint(0, 2, (5,))
    with pytest.raises(ValueError, match=r"halting_head\(h\)\.squeeze\(1\)"):
        model.loss(model(x), y)  # training
    model.eval()
    with pytest.raises(ValueError, match=r"must have shape \(5,\), got \(5, 1\).*squeeze\(1\)"):
        model.infer(x)  # inference, with early exit


def test_a_step_function_not_wrapped_in_a_method():
    with pytest.raises(TypeError, match=r"model must be a halting method, e.g. PonderNet\(Step\(...\)\)"):
        PonderLitModule(Step())
    with pytest.raises(ValueError, match="need lr > 0"):
        PonderLitModule(PonderNet(Step(), max_steps=3), lr="1e-3")


def test_fit_wants_a_data_module():
    loader = DataLoader(TensorDataset(torch.randn(8, 4), torch.randint(0, 2, (8,))), batch_size=4)
    with pytest.raises(TypeError, match="need a LightningDataModule .*got DataLoader"):
        fit(PonderLitModule(PonderNet(Step(), max_steps=3)), loader, max_epochs=1)


def test_halting_bias_names_the_class_not_the_whole_module():
    with pytest.raises(ValueError) as error:
        ACT(Step(head="halt"), max_steps=3, halting_bias=-3.0)
    assert str(error.value) == "halting_bias needs a halting_head (nn.Linear, with a bias) in Step."


def test_diagnose_gives_no_verdict_from_one_input():
    model = PonderNet(Step(), max_steps=3)
    assert (
        diagnose(model, torch.randn(1, 4), difficulty=[2], show=False).verdict
        == "no verdict from a single input"
    )
    assert (
        diagnose(model, torch.randn(2, 4), difficulty=[1, 2], show=False).verdict
        != "no verdict from a single input"
    )


@pytest.mark.parametrize("targets, shown", [([0, 1, 7, 1], "got 7"), ([0, -1, 1, 1], "got -1")])
def test_diagnose_names_targets_outside_the_models_classes(targets, shown):
    """Targets of 7 for two classes scored an accuracy of 0% and a verdict (round 11's reuse review).
    Break: remove the range check in diagnose."""
    with pytest.raises(
        ValueError, match=f"^targets must be classes from 0 to 1 \\(the model predicts 2\\), {shown}:"
    ):
        diagnose(PonderNet(Step(), max_steps=3), torch.randn(4, 4), targets=targets, show=False)


def test_a_missing_lambda_p_and_negative_threads_are_named():
    from pondernet_tutorial.threads import training_threads

    with pytest.raises(ValueError, match="lambda_p must be a number strictly between 0 and 1, got None"):
        PonderNet(Step(), max_steps=3, lambda_p=None)
    with pytest.raises(ValueError, match="threads must be a whole number >= 1"):
        with training_threads(-3):
            pass


@pytest.mark.parametrize(
    "given, message",
    [
        ({"patience": -1}, "patience must be a whole number from 0 to"),
        ({"patience": 2.5}, "patience must be a whole number from 0 to"),
        ({"stop_at_val_acc": 99}, "stop_at_val_acc must be an accuracy from 0 to 1, or None, got 99"),
        ({"stop_at_val_acc": "0.9"}, "stop_at_val_acc must be an accuracy"),
    ],
)
def test_fit_refuses_a_negative_patience_and_an_accuracy_above_1(given, message):
    datamodule = _pairs(torch.randn(8, 4), torch.randint(0, 2, (8,)))
    with pytest.raises(ValueError, match=message):
        fit(PonderLitModule(PonderNet(Step(), max_steps=3)), datamodule, max_epochs=1, **given)


# ---------------------------------------------------------------------------------------------------
# The second reuse review (stop 60): each test failed on 05bfcac, before its change.

QUIET = dict(logger=False, enable_progress_bar=False, enable_model_summary=False, accelerator="cpu")


def _pairs(x, y, batch_size=4, val_y=None):
    """A data module of the pairs ``(x, y)``, validated on ``(x, val_y)`` (by default the same)."""
    val_y = y if val_y is None else val_y
    return LightningDataModule.from_datasets(
        TensorDataset(x, y), TensorDataset(x, val_y), batch_size=batch_size
    )


def _data(batch=None, n=16):
    return _pairs(torch.randn(n, 4), torch.randint(0, 2, (n,)), batch or n)


class Triples(torch.utils.data.Dataset):
    """A dataset of (x, y, k), as the book's generators return them."""

    def __len__(self):
        return 8

    def __getitem__(self, i):
        return torch.randn(4), i % 2, i


@pytest.mark.parametrize(
    "targets, message",
    [
        (torch.rand(8), "targets must be class indices \\(an integer tensor\\), got torch.float32"),
        (torch.randint(0, 2, (8,), dtype=torch.int32), "dtype torch.long, got torch.int32: use y.long\\(\\)"),
    ],
)
def test_targets_that_are_not_class_indices_are_named(tmp_path, targets, message):
    """Float targets (a regression loss) trained and kept the best epoch by an accuracy that means
    nothing there; int32 targets failed inside the Lightning loop with torch's 'expected Long'."""
    datamodule = _pairs(torch.randn(8, 4), targets)
    module = PonderLitModule(PonderNet(Step(), max_steps=3))
    with pytest.raises(ValueError, match=message):
        fit(module, datamodule, 1, default_root_dir=tmp_path, **QUIET)


def test_a_batch_that_is_not_a_pair_is_named(tmp_path):
    """A dataset of (x, y, k) failed with 'got multiple values for argument evaluation'."""
    datamodule = LightningDataModule.from_datasets(Triples(), Triples(), batch_size=4)
    with pytest.raises(ValueError, match="a batch must be \\(inputs, targets\\), got 3 items"):
        fit(
            PonderLitModule(PonderNet(Step(), max_steps=3)), datamodule, 1, default_root_dir=tmp_path, **QUIET
        )


def test_float64_inputs_for_a_float32_model_are_named(tmp_path):
    """numpy's float64 inputs failed inside GRUCell, in Lightning's loop (inference casts them)."""
    x, y = torch.randn(8, 4, dtype=torch.float64), torch.randint(0, 2, (8,))
    datamodule = _pairs(x, y)
    with pytest.raises(
        ValueError, match="the inputs are float64 and the model's weights torch.float32: use x.float"
    ):
        fit(_module(), datamodule, 1, default_root_dir=tmp_path, **QUIET)


@pytest.mark.parametrize("where", ["train", "validation"])
@pytest.mark.parametrize("label, shown", [(2, "got 2"), (-1, "got -1")])
def test_targets_outside_the_steps_classes_are_named_before_the_step(tmp_path, where, label, shown):
    """Classes numbered from 1, or -1 for "unknown", failed in torch's words ("Target 2 is out of
    bounds"), on a GPU with a device-side assert that ends the session. Checked at the first batch of
    each loop: a validation set numbered otherwise was missed when the check ran once. Break: return
    before the range check in check_step_returns; or keep one flag for all loops in CheckBatches."""
    x, good = torch.randn(8, 4), torch.randint(0, 2, (8,))
    bad = good.clone()
    bad[3] = label
    train, val = (bad, good) if where == "train" else (good, bad)
    datamodule = _pairs(x, train, 8, val_y=val)
    with pytest.raises(
        ValueError, match=f"^targets must be classes from 0 to 1 \\(the step predicts 2\\), {shown}:"
    ):
        fit(_module(), datamodule, 1, default_root_dir=tmp_path, num_sanity_val_steps=0, **QUIET)


@pytest.mark.parametrize(
    "x_dtype, model_dtype, message",
    [
        (
            torch.float32,
            torch.float64,
            r"float32 and the model's weights torch.float64: use x.double\(\) \(or the Trainer's precision='64-true'\)",
        ),
        (torch.float16, torch.float32, r"float16 and the model's weights torch.float32: use x.float\(\)"),
    ],
)
def test_inputs_of_another_dtype_than_the_model_are_named(tmp_path, x_dtype, model_dtype, message):
    """A float64 model given float32 inputs, or float16 inputs to a float32 model, failed in torch's
    words ("mat1 and mat2 must have the same dtype"; round 11's reuse review); at precision="64-true"
    Lightning converts the inputs itself and trains. Break: check float64 inputs only in check_batch."""
    x, y = torch.randn(8, 4, dtype=x_dtype), torch.randint(0, 2, (8,))
    datamodule = _pairs(x, y)
    module = PonderLitModule(PonderNet(Step(), max_steps=3).to(model_dtype))
    with pytest.raises(ValueError, match=f"^the inputs are {message}\\.$"):
        fit(module, datamodule, 1, default_root_dir=tmp_path, **QUIET)
    if model_dtype == torch.float64:
        fit(module, datamodule, 1, default_root_dir=tmp_path, precision="64-true", **QUIET)


class Returns(Step):
    """A step that returns what a user might by mistake: its values in another order or shape, two
    values, or nothing (a forgotten ``return``)."""

    def __init__(self, mistake):
        super().__init__()
        self.mistake = mistake

    def step(self, x, h):
        y, z, h = super().step(x, h)
        return {
            "state_second": (y, h, z),
            "no_class_axis": (y[:, 0], z, h),
            "float_z": (y, 0.0, h),
            "two": (y, h),
            "none": None,
        }[self.mistake]


@pytest.mark.parametrize("mistake", ["state_second", "no_class_axis", "float_z"])
def test_a_step_that_returns_the_wrong_things_is_named_in_training(mistake):
    model = PonderNet(Returns(mistake), max_steps=3)
    with pytest.raises(ValueError, match="a step returns \\(ŷ_n, z_n, h_next\\)|halting logit z_n must have"):
        model(torch.randn(5, 4))


@pytest.mark.parametrize("returns, what", [("two", "2 values"), ("none", "NoneType")])
def test_a_step_that_returns_other_than_three_values_is_named_before_training(tmp_path, returns, what):
    """It failed in the unroll's unpacking, in Python's words ("not enough values to unpack",
    "cannot unpack non-iterable NoneType object"; round 10's reuse review)."""
    x, y = torch.randn(8, 4), torch.randint(0, 2, (8,))
    datamodule = _pairs(x, y)
    module = PonderLitModule(PonderNet(Returns(returns), max_steps=3))
    with pytest.raises(ValueError, match=f"Returns.step must return three values, .*; it returned {what}"):
        fit(module, datamodule, 1, default_root_dir=tmp_path, **QUIET)


def test_a_transposed_prediction_is_named_as_the_prediction_not_the_halting_logit():
    """A prediction of shape (classes, batch) was reported as a halting logit of the wrong shape."""

    class Transposed(Step):
        def step(self, x, h):
            y, z, h = super().step(x, h)
            return y.T, z, h

    with pytest.raises(
        ValueError, match=r"ŷ_n must have shape \(batch, classes\), \(5, ...\) here, got \(2, 5\)"
    ):
        PonderNet(Transposed(), max_steps=3)(torch.randn(5, 4))


def test_eval_max_steps_is_named_when_it_is_wrong():
    with pytest.raises(ValueError, match="^eval_max_steps must be a whole number"):
        PonderNet(Step(), max_steps=3, eval_max_steps=0)


def test_a_step_without_initial_state_says_what_to_define():
    class NoState(StepFunction):
        def step(self, x, h):
            return x, x[:, 0], h

    with pytest.raises(NotImplementedError, match="NoState must define initial_state"):
        PonderNet(NoState(), max_steps=2)(torch.randn(2, 3))


def test_a_loss_that_broadcasts_names_the_shapes():
    """MSELoss on (M, 1) predictions broadcast to (M, M), and the message only said reduction='none'."""
    with pytest.raises(ValueError, match="got \\(15, 15\\) from predictions \\(15, 1\\)"):
        from pondernet_tutorial.methods.base import per_sample_loss

        per_sample_loss(nn.MSELoss(reduction="none"), torch.randn(15, 1), torch.randn(15))


@pytest.mark.parametrize(
    "given, message",
    [
        (dict(beta="a"), "beta must be a number >= 0 and finite, got 'a'"),
        (
            dict(train_epsilon=None, halting_bias=float("nan")),
            "halting_bias must be a finite number, got nan",
        ),
        (dict(halting_bias="x"), "halting_bias must be a finite number, got 'x'"),
    ],
)
def test_parameters_that_are_not_numbers_are_named(given, message):
    with pytest.raises(ValueError, match=message):
        PonderNet(Step(), max_steps=3, **given)
    with pytest.raises(ValueError, match="epsilon must be a number strictly between 0 and 1, got None"):
        ACT(Step(), max_steps=3, epsilon=None)


@pytest.mark.parametrize(
    "given, message",
    [
        (dict(lr_factor=2), "lr_factor must lie strictly between 0 and 1"),
        (dict(lr_patience=-1), "lr_patience must be a whole number from 0 to 2\\*\\*63 - 1"),
        (dict(eval_seed="a"), "eval_seed must be a whole number from 0 to 2\\*\\*63 - 1"),
    ],
)
def test_the_modules_schedule_and_seed_are_checked_where_given(given, message):
    with pytest.raises(ValueError, match=message):
        PonderLitModule(PonderNet(Step(), max_steps=3), **given)


def test_a_seed_given_for_a_generator_is_named():
    with pytest.raises(TypeError, match="generator must be a torch.Generator"):
        PonderNet(Step(), max_steps=3).eval().infer(torch.randn(2, 4), generator=0)


@pytest.mark.parametrize(
    "call, message",
    [
        (
            lambda tmp: fit(PonderNet(Step(), max_steps=3), _data(), 1),
            "need a PonderLitModule, got PonderNet",
        ),
        (
            lambda tmp: fit(
                _module(),
                LightningDataModule.from_datasets(_data().train_dataloader().dataset),
                1,
                patience=3,
            ),
            "patience and stop_at_val_acc watch the validation accuracy",
        ),
        (
            lambda tmp: fit(_module(), _data(), 1, enable_checkpointing=False),
            "fit keeps the best epoch with a checkpoint",
        ),
        (
            lambda tmp: fit(_module(), _data(), 1, ckpt_path="last"),
            "fit keeps the best epoch's checkpoint, not the last",
        ),
    ],
    ids=["not a module", "patience without validation", "no checkpointing", "last"],
)
def test_fits_arguments_are_refused_before_training(tmp_path, call, message):
    with pytest.raises((TypeError, ValueError), match=message):
        call(tmp_path)


def _module():
    return PonderLitModule(PonderNet(Step(), max_steps=3))


def test_a_second_fit_of_the_same_module_trains_in_training_mode(tmp_path):
    """fit() leaves the module in eval mode, and Lightning keeps the modes it finds: a second fit (the
    docstring's way to continue), or one of a loaded model, trained with dropout off and every
    submodule in eval mode, with only Lightning's warning (round 11's reuse review). Break: remove
    ``module.train()`` from fit."""
    from lightning.pytorch.callbacks import Callback

    class Modes(Callback):
        def __init__(self):
            self.seen = set()

        def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
            self.seen |= {m.training for m in pl_module.modules()}

    module = _module()
    first, second = Modes(), Modes()
    trainer, _ = fit(module, _data(batch=8), 1, callbacks=first, default_root_dir=tmp_path, **QUIET)
    assert not module.training
    fit(
        module,
        _data(batch=8),
        2,
        callbacks=second,
        ckpt_path=trainer.checkpoint_callback.best_model_path,
        default_root_dir=tmp_path,
        **QUIET,
    )
    assert first.seen == second.seen == {True}


def test_fit_continues_from_last_where_a_callback_keeps_the_last_epoch(tmp_path):
    """``ckpt_path="last"`` was refused even where the caller's own ModelCheckpoint keeps a last.ckpt
    (left in stop 62; a Colab session that ends mid-training). Break: refuse "last" whatever the
    callbacks."""
    from lightning.pytorch.callbacks import Callback, ModelCheckpoint

    class Epochs(Callback):
        def __init__(self):
            self.started = []

        def on_train_epoch_start(self, trainer, pl_module):
            self.started.append(trainer.current_epoch)

    keep = dict(dirpath=tmp_path / "ck", save_last=True)
    fit(_module(), _data(batch=8), 1, callbacks=ModelCheckpoint(**keep), default_root_dir=tmp_path, **QUIET)
    epochs = Epochs()
    trainer, _ = fit(
        _module(),
        _data(batch=8),
        3,
        callbacks=[ModelCheckpoint(**keep), epochs],
        ckpt_path="last",
        default_root_dir=tmp_path,
        **QUIET,
    )
    assert epochs.started == [1, 2] and trainer.global_step == 6


def test_fit_takes_one_callback_and_plugins_of_its_own(tmp_path):
    from lightning.pytorch.callbacks import Callback

    class Count(Callback):
        epochs = 0

        def on_train_epoch_end(self, trainer, pl_module):
            Count.epochs += 1

    fit(_module(), _data(), 2, callbacks=Count(), plugins=[], default_root_dir=tmp_path, **QUIET)
    assert Count.epochs == 2


def test_a_misspelt_select_by_is_named_before_the_first_training_step(tmp_path):
    """It failed after the first epoch, in Lightning's words; a name of a training metric is not
    judged by the sanity check, which validates only."""
    from lightning.pytorch.callbacks import Callback

    class Steps(Callback):
        taken = 0

        def on_train_batch_start(self, *args):
            Steps.taken += 1

    with pytest.raises(
        ValueError, match="select_by='val/accuracy' is not logged in validation: choose one of val/acc, "
    ):
        fit(
            _module(),
            _data(batch=4),
            1,
            select_by="val/accuracy",
            callbacks=Steps(),
            default_root_dir=tmp_path,
            **QUIET,
        )
    assert Steps.taken == 0
    fit(_module(), _data(batch=4), 1, select_by="train/loss", default_root_dir=tmp_path, **QUIET)
    with pytest.raises(
        ValueError, match="select_by='val/accuracy' is not logged in validation"
    ):  # no sanity check
        fit(
            _module(),
            _data(batch=4),
            1,
            select_by="val/accuracy",
            num_sanity_val_steps=0,
            default_root_dir=tmp_path,
            **QUIET,
        )


def test_a_training_that_diverged_names_the_data_too(tmp_path):
    x, y = torch.randn(8, 4), torch.randint(0, 2, (8,))
    x[0, 0] = float("nan")
    datamodule = _pairs(x, y, 8)
    from pondernet_tutorial.fitting import TrainingDivergedError

    with pytest.raises(
        TrainingDivergedError, match="check the data and the step function for NaN or infinite values"
    ):
        fit(_module(), datamodule, 1, default_root_dir=tmp_path, **QUIET)


def test_diagnose_refuses_a_loader_and_judges_act_by_the_steps_it_takes():
    """diagnose(model, loader) failed inside the step; on ACT it reported E[n] under the mixing weights
    (1.44) while every input computed T(x) = 2 steps."""
    x = torch.randn(6, 4)
    loader = DataLoader(TensorDataset(x, torch.zeros(6, dtype=torch.long)), batch_size=3)
    with pytest.raises(TypeError, match="got a DataLoader: take one with next\\(iter\\(loader\\)\\)\\[0\\]"):
        diagnose(PonderNet(Step(), max_steps=3), loader, show=False)
    act = ACT(Step(), max_steps=4)
    taken = act.eval().answer(act(x))[1].double()
    assert diagnose(act, x, show=False).mean_steps == pytest.approx(float(taken.mean()))


def test_mnist_images_left_in_0_255_or_normalised_are_named_outside_training():
    """The shipped MNIST model took float images in 0..255 without a word: its accuracy barely moved,
    and its E[n] went from 4.6 to 19.2 of 20 steps. Inference and evaluation now check the range
    (training's step, which must not wait for the device, does not)."""
    from pondernet_tutorial import MNISTStep

    model = PonderNet(MNISTStep(), max_steps=3)
    images = torch.rand(4, 1, 28, 28)
    for wrong in (images * 255, (images - 0.1307) / 0.3081):
        with pytest.raises(ValueError, match="expected pixel intensities in \\[0, 1\\]"):
            model.eval().infer(wrong)
        model.train()(wrong)  # no check in training's step
    model.eval().infer(images)


def test_numbers_given_as_text_are_refused_and_shown_as_text():
    """PonderNet took lambda_p="0.2" where beta="0.01" was refused, and lr="1e-3" was refused as
    "got 1e-3", which reads as a valid rate (a reuse review; breaks: float() of any text, the rate
    printed without its quotes)."""
    with pytest.raises(ValueError, match="lambda_p must be a number strictly between 0 and 1, got '0.2'"):
        PonderNet(Step(), max_steps=3, lambda_p="0.2")
    with pytest.raises(ValueError, match="got '1e-3', 'plateau'"):
        PonderLitModule(PonderNet(Step(), max_steps=3), lr="1e-3")
