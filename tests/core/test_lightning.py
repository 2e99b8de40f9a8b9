"""The generic LightningModule and the weights-only checkpoints, on small synthetic data.

Deliberate breaks these tests catch (each was tried):
- a lambda as the default loss (the module no longer pickles): test_module_pickles_for_ddp_spawn;
- configure_optimizers always monitoring val/acc: test_fit_without_validation;
- predict_step seeding its coins once per predict epoch, not per set: test_named_test_sets_and_predict;
- the plateau schedule cutting the rate when val/acc rises (``mode="min"``): test_fit_without_validation;
- evaluation's E[n] taken from the loss's p (training's ε rule, N steps):
  test_evaluation_reads_e_n_over_every_step_unrolled;
- the training accuracy averaged over the steps instead of weighted by p (``.mean(0)``):
  test_training_accuracy_is_the_expectation_over_the_halting_distribution;
- fit() without validation keeping the epoch after the last (``current_epoch``), or EarlyStopping
  ignoring ``patience``: test_fit_keeps_the_last_epoch_without_validation,
  test_fit_stops_after_patience_epochs_without_progress.
"""

import functools
import pickle

import lightning as L
import pytest
import torch
from tiny_parity import QUIET, loader, module, parity, quiet_trainer, weighted_cross_entropy

from pondernet_tutorial import PonderLitModule
from pondernet_tutorial.fitting import fit
from pondernet_tutorial.methods.base import expected_steps


def trainer(**kwargs):
    return quiet_trainer(**{"max_epochs": 1, "gradient_clip_val": 0.5, **kwargs})


@pytest.mark.parametrize("method", ["pondernet", "act", "fixed"])
@pytest.mark.parametrize("precision", ["32-true", "bf16-mixed"])
def test_fit_logs_every_metric_without_nan(method, precision):
    m = module(method)
    t = trainer(precision=precision, limit_train_batches=2, limit_val_batches=1)
    t.fit(m, loader(), loader())
    names = ("acc", "halt_step", "expected_steps", "loss", *m.model.loss_terms)
    for stage in ("train", "val"):
        for name in names:
            if stage == "train" and name == "halt_step" and method == "pondernet":  # no coin in training:
                assert "train/halt_step" not in t.callback_metrics  # E[n] is train/expected_steps alone
                continue
            assert torch.isfinite(t.callback_metrics[f"{stage}/{name}"]), f"{stage}/{name}"
    assert all(torch.isfinite(p).all() for p in m.parameters())
    assert 1.0 <= t.callback_metrics["val/halt_step"] <= 5.0


def test_max_steps_one_and_a_batch_of_one():
    m = module(max_steps=1)
    t = trainer(limit_train_batches=2, limit_val_batches=1)
    t.fit(m, loader(2, batch_size=1), loader(2, batch_size=1))
    assert t.callback_metrics["val/halt_step"] == 1.0
    assert t.callback_metrics["val/expected_steps"] == 1.0


def test_fit_without_validation():
    class TrainOnly(L.LightningDataModule):
        def train_dataloader(self):
            return loader()

    m = module()
    t = trainer(limit_train_batches=2)
    t.fit(m, datamodule=TrainOnly())  # a data module without validation: no scheduler waits for val/acc
    assert "train/acc" in t.callback_metrics and "val/acc" not in t.callback_metrics
    assert not t.lr_scheduler_configs
    m = module()
    with pytest.warns(RuntimeWarning, match="val/acc which is not available"):  # no validation loader
        trainer(max_epochs=2, limit_train_batches=2).fit(m, loader())
    t = trainer(limit_train_batches=2, limit_val_batches=1)
    m = module()
    t.fit(m, loader(), loader())
    assert t.lr_scheduler_configs and t.lr_scheduler_configs[0].monitor == "val/acc"
    assert t.lr_scheduler_configs[0].scheduler.mode == "max"  # a rising accuracy is progress


def test_named_test_sets_and_predict(tmp_path):
    from pondernet_tutorial.data.modules import ParityDataModule

    dm = ParityDataModule(n_elements=8, train_k=(1, 4), test_k=(5, 8), test_per_k=16, batch_size=32)
    m = module()
    t = trainer()
    results = t.test(m, datamodule=dm, verbose=False)
    assert "test/test/acc" in results[0] and "test/test/halt_step" in results[0]
    predictions = t.predict(m, datamodule=dm)
    first = predictions[0][0] if isinstance(predictions[0], list) else predictions[0]
    assert set(first) == {"prediction", "halt_step"} and first["prediction"].shape == (32,)
    loader = dm.test_dataloader()
    loader = loader[0] if isinstance(loader, list) else loader
    twice = t.predict(m, dataloaders=[loader, loader])  # each set draws the same coins
    assert torch.equal(twice[0][0]["halt_step"], twice[1][0]["halt_step"])


def test_hyperparameters_are_plain_data_and_checked():
    m = PonderLitModule(module().model, lr=3e-4, lr_schedule="constant")
    assert dict(m.hparams) == {
        "lr": 3e-4,
        "lr_schedule": "constant",
        "lr_patience": 2,
        "lr_factor": 0.5,
        "eval_seed": 0,
    }
    with pytest.raises(ValueError, match="lr"):
        PonderLitModule(module().model, lr=0.0)
    with pytest.raises(ValueError, match="lr_schedule"):
        PonderLitModule(module().model, lr_schedule="cosine")
    with pytest.raises(ValueError, match="lambda_p"):
        module(method_options={"lambda_p": 0.0})
    with pytest.raises(ValueError, match="max_steps"):
        module(max_steps=0)
    with pytest.raises(ValueError, match="beta"):
        module(method_options={"beta": -0.1})
    with pytest.raises(TypeError, match="lambda_p"):
        module(method="act", method_options={"lambda_p": 0.2})


def test_module_pickles_for_ddp_spawn():
    m = module(loss_fn=functools.partial(weighted_cross_entropy, weight=2.0))
    copy = pickle.loads(pickle.dumps(m))
    x, y = next(iter(loader()))
    torch.testing.assert_close(
        copy.model.loss_fn(torch.zeros(2, 2), y[:2]), torch.full((2,), 2 * 0.6931), atol=1e-4, rtol=0
    )
    pickle.dumps(module())  # the default loss too


def test_evaluation_reads_e_n_over_every_step_unrolled():
    """In evaluation E[n] is read from p over every step unrolled (eval_max_steps), without training's
    ε rule: the distribution that inference samples from."""
    m = module(max_steps=5, method_options={"train_epsilon": 0.05, "eval_max_steps": 8}).eval()
    x, y = parity(16, 1)
    with torch.no_grad():
        values = m.step_values(x, y, evaluation=True)
        expected = expected_steps(m.model.weights(m.model(x)))
    assert m.model(x).logits.shape[0] == 8
    torch.testing.assert_close(values["expected_steps"], expected)


def test_training_accuracy_is_the_expectation_over_the_halting_distribution():
    """PonderNet's training flips no coin: its accuracy is Σ_n p_n 1[argmax ŷ_n = y], per sample."""
    m = module(max_steps=5).train()
    x, y = parity(16, 2)
    with torch.no_grad():
        values = m.step_values(x, y)
        out = m.model(x)
        p = m.model.weights(out)
    by_hand = torch.zeros(16)
    for n in range(5):
        by_hand += p[n] * (out.logits[n].argmax(-1) == y).float()
    torch.testing.assert_close(values["acc"], by_hand)


class TrainOnly(L.LightningDataModule):
    def train_dataloader(self):
        return loader()


def test_fit_keeps_the_last_epoch_without_validation(tmp_path):
    _, best_epoch = fit(module(), TrainOnly(), 3, default_root_dir=tmp_path, **QUIET)
    assert best_epoch == 2


def test_fit_stops_after_patience_epochs_without_progress(tmp_path):
    """With a learning rate of 1e-12 the validation accuracy never improves: patience 1 stops the run
    after its second epoch (epochs 0 and 1), long before the limit."""
    data = L.LightningDataModule.from_datasets(loader().dataset, loader().dataset)
    trainer, _ = fit(module(lr=1e-12), data, 6, patience=1, default_root_dir=tmp_path, **QUIET)
    assert trainer.current_epoch == 2


def test_the_docstrings_way_to_load_a_checkpoints_weights_gives_the_trained_module(tmp_path):
    """PonderLitModule's docstring: build the module again and load a checkpoint's weights as data (the
    reuse review found that load_from_checkpoint needs model=, which no page said). Compared with the
    weights at the end of training, taken before fit loads its best epoch through the same reader.
    Break: zero the state dict's tensors in read_checkpoint_file."""
    from lightning.pytorch.callbacks import Callback
    from torch.utils.data import TensorDataset

    from pondernet_tutorial.checkpointing import checkpoint_bound, read_checkpoint_file

    class Last(Callback):
        def on_train_end(self, trainer, pl_module):
            self.weights = {k: v.detach().clone() for k, v in pl_module.state_dict().items()}

    data = TensorDataset(*parity(64, 0))
    last = Last()
    trainer, _ = fit(
        module(),
        L.LightningDataModule.from_datasets(data, data, batch_size=32),
        2,
        select_by="epoch",  # the best epoch is the last
        callbacks=last,
        default_root_dir=tmp_path,
        **QUIET,
    )
    again = module()
    path = trainer.checkpoint_callback.best_model_path
    again.load_state_dict(read_checkpoint_file(path, checkpoint_bound(again))["state_dict"])
    assert all(torch.equal(last.weights[k], v) for k, v in again.state_dict().items())
