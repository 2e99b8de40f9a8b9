"""Training picks its threads: one on a machine of at most two cores, PyTorch's own number on a bigger
one, and the caller's number back afterwards (issue 44: on a loaded 2-core machine own_model took 1,013 s
on PyTorch's two threads and 45 s on one)."""

import lightning as L
import pytest
import tiny_parity
import torch

from pondernet_tutorial import threads
from pondernet_tutorial.fitting import fit
from pondernet_tutorial.minimal import MinimalPonderNet, train_on_parity


class Seen(L.Callback):
    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        self.threads = torch.get_num_threads()


@pytest.fixture
def four_threads():
    before = torch.get_num_threads()
    torch.set_num_threads(4)
    yield
    torch.set_num_threads(before)


@pytest.mark.parametrize("cores, expected", [(2, 1), (1, 1), (16, 4)])
def test_fit_trains_on_one_thread_on_two_cores_and_gives_the_callers_back(
    monkeypatch, tmp_path, four_threads, cores, expected
):
    monkeypatch.setattr(threads.os, "cpu_count", lambda: cores)
    seen = Seen()
    data = L.LightningDataModule.from_datasets(tiny_parity.loader().dataset, tiny_parity.loader().dataset)
    fit(tiny_parity.module(), data, 1, callbacks=[seen], default_root_dir=tmp_path, logger=False,
        accelerator="cpu", enable_progress_bar=False, enable_model_summary=False)  # fmt: skip
    assert seen.threads == expected
    assert torch.get_num_threads() == 4


def test_the_minimal_training_loop_uses_the_same_choice(monkeypatch, four_threads):
    monkeypatch.setattr(threads.os, "cpu_count", lambda: 2)
    inside = []
    real = torch.optim.Adam.step

    def step(self, *args, **kwargs):
        inside.append(torch.get_num_threads())
        return real(self, *args, **kwargs)

    monkeypatch.setattr(torch.optim.Adam, "step", step)
    train_on_parity(MinimalPonderNet(4, n_classes=2, hidden_size=8, max_steps=3), updates=2)
    assert inside == [1, 1] and torch.get_num_threads() == 4
