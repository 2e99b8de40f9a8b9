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

import torch
from torch import Tensor

from .base import GeneratedDataModule, check_k_range

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


class ParityDataModule(GeneratedDataModule):
    """Parity vectors with ``k`` non-zero entries, for training, validation and a per-``k`` test set
    named ``test`` (see :class:`~pondernet_tutorial.data.base.GeneratedDataModule`).

    Args:
        n_elements: length of the vectors.
        train_k: ``(k_min, k_max)`` of the training and validation samples (default: all of them).
        test_k: ``(k_min, k_max)`` of the test samples (default: ``train_k``).
        batch_size, train_subset, val_size, test_per_k, test_subset, seed: as for
            :class:`~pondernet_tutorial.data.base.GeneratedDataModule`.
    """

    stream, val_seed, test_seeds = "parity", VAL_SEED, {"test": TEST_SEED}

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
        if isinstance(n_elements, bool) or int(n_elements) != n_elements or n_elements < 1:
            raise ValueError(f"n_elements must be an integer >= 1, got {n_elements!r}.")
        n = int(n_elements)
        train_k = check_k_range(train_k or (1, n), n, "train_k", "n_elements")
        test_k = check_k_range(test_k or train_k, n, "test_k", "n_elements")
        super().__init__(
            n, train_k, {"test": test_k}, batch_size, train_subset, val_size, test_per_k, test_subset, seed
        )
        self.n_elements, self.test_k = n, test_k
        self.save_hyperparameters(ignore=["data_dir"])

    def draw(self, batch, k_range, generator=None):
        return parity_batch(batch, self.n_elements, k_range, generator)
