"""The parity task of the PonderNet paper, generated on the fly.

A sample is a vector of ``n_elements`` entries, ``k`` of them set to −1 or +1 at random positions and
the rest 0, with ``k`` drawn uniformly from a range; the target is the parity of the number of +1
entries (1 for odd). The paper uses 64 elements, and 96 for extrapolation, where training sees
1 to 48 non-zero entries and the test 49 to 96.

Training batches are drawn afresh from a generator of the run's own (seeded by the run's seed, see
:func:`~pondernet_tutorial.data.base.data_generator`), so no batch repeats; the validation set (from the training range of ``k``) and the test set (a fixed number of
samples for every ``k`` of the test range) are fixed, with seeds of their own that do not depend on
the run's seed.
"""

from __future__ import annotations

import functools

import lightning as L
import torch
from torch import Tensor
from torch.utils.data import DataLoader

from .base import EvalSet, batch_loader, check_batch_size, fresh_loader

VAL_SEED, TEST_SEED = 2_000, 3_000


def parity_batch(
    batch: int, n_elements: int, k_range: tuple[int, int], generator: torch.Generator | None = None
) -> tuple[Tensor, Tensor, Tensor]:
    """Draw ``batch`` parity samples.

    Args:
        k_range: ``(k_min, k_max)``, inclusive bounds of the number of non-zero entries.

    Returns:
        ``x (B, n_elements)`` float −1/0/+1, ``y (B,)`` long parity of the +1 entries, ``k (B,)`` long.
    """
    k_min, k_max = k_range
    k = torch.randint(k_min, k_max + 1, (batch,), generator=generator)
    # k distinct random positions per row: the k smallest of n uniform scores
    ranks = torch.rand(batch, n_elements, generator=generator).argsort(1).argsort(1)
    nonzero = ranks < k[:, None]
    signs = torch.randint(0, 2, (batch, n_elements), generator=generator) * 2 - 1
    x = (nonzero * signs).float()
    y = (x == 1).sum(1) % 2
    return x, y.long(), k


def check_k_range(k_range, n_elements: int, name: str) -> tuple[int, int]:
    k_min, k_max = (int(v) for v in k_range)
    if not 1 <= k_min <= k_max <= n_elements:
        raise ValueError(
            f"{name} must satisfy 1 <= k_min <= k_max <= n_elements={n_elements}, got {k_range}."
        )
    return k_min, k_max


class ParityDataModule(L.LightningDataModule):
    """Parity vectors with ``k`` non-zero entries, for training, validation and a per-``k`` test set.

    Args:
        n_elements: length of the vectors.
        train_k: ``(k_min, k_max)`` of the training and validation samples.
        test_k: ``(k_min, k_max)`` of the test samples (default: ``train_k``).
        batch_size: batch size of every loader.
        train_subset: training samples per epoch (an "epoch" is a fixed number of fresh batches);
            when given (quick runs), the validation set shrinks to half of it.
        val_size: validation samples.
        test_per_k: test samples for every ``k`` of the test range.
        test_subset: use only the first so many test samples of every ``k`` (quick runs).
        seed: the run's seed, which seeds the training batches' generator.
    """

    def __init__(
        self,
        n_elements: int = 16,
        train_k: tuple[int, int] | None = None,
        test_k: tuple[int, int] | None = None,
        batch_size: int = 128,
        train_subset: int | None = None,
        val_size: int = 8192,
        test_per_k: int = 1000,
        test_subset: int | None = None,
        data_dir: str | None = None,  # accepted for a uniform interface; nothing is read from disk
        seed: int = 0,
    ):
        super().__init__()
        if isinstance(n_elements, bool) or int(n_elements) != n_elements or n_elements < 1:
            raise ValueError(f"n_elements must be an integer >= 1, got {n_elements!r}.")
        self.n_elements = int(n_elements)
        self.train_k = check_k_range(train_k or (1, self.n_elements), self.n_elements, "train_k")
        self.test_k = check_k_range(test_k or self.train_k, self.n_elements, "test_k")
        self.batch_size = check_batch_size(batch_size)
        samples = train_subset or 128_000  # an epoch: 1,000 batches of 128
        self.batches_per_epoch = max(1, samples // self.batch_size)
        if train_subset:  # quick runs: a validation set in proportion
            val_size = min(val_size, max(train_subset // 2, self.batch_size))
        self.val_size, self.test_per_k, self.test_subset = val_size, test_per_k, test_subset
        self.seed = int(seed)
        self.save_hyperparameters(ignore=["data_dir"])

    @property
    def test_set_names(self) -> list[str]:
        return ["test"]

    @property
    def train_size(self) -> int:
        """Training samples per epoch."""
        return self.batches_per_epoch * self.batch_size

    def setup(self, stage: str | None = None) -> None:
        if stage in (None, "fit", "validate") and not hasattr(self, "val_inputs"):
            generator = torch.Generator().manual_seed(VAL_SEED + self.n_elements)
            self.val_inputs, self.val_labels, _ = parity_batch(
                self.val_size, self.n_elements, self.train_k, generator
            )
        if stage in (None, "test", "predict") and not hasattr(self, "test_inputs"):
            generator = torch.Generator().manual_seed(TEST_SEED + self.n_elements)
            parts = [
                parity_batch(self.test_per_k, self.n_elements, (k, k), generator)
                for k in range(self.test_k[0], self.test_k[1] + 1)
            ]
            if self.test_subset:  # the first test_subset samples of every k
                parts = [tuple(t[: self.test_subset] for t in part) for part in parts]
            self.test_inputs, self.test_labels, self.test_k_values = (torch.cat(t) for t in zip(*parts))

    def train_dataloader(self) -> DataLoader:
        draw = functools.partial(parity_batch, n_elements=self.n_elements, k_range=self.train_k)
        return fresh_loader(draw, self.batch_size, self.batches_per_epoch, self.seed, "parity")

    def val_dataloader(self) -> DataLoader:
        return batch_loader(self.val_inputs, self.val_labels, self.batch_size, shuffle=False)

    def test_dataloader(self) -> list[DataLoader]:
        return [batch_loader(self.test_inputs, self.test_labels, self.batch_size, shuffle=False)]

    def predict_dataloader(self) -> list[DataLoader]:
        return self.test_dataloader()

    def evaluation_sets(self) -> list[EvalSet]:
        """The test set, with each sample's number of non-zero entries ``k``."""
        self.setup("test")
        return [EvalSet("test", self.test_inputs, self.test_labels, per_sample={"k": self.test_k_values})]
