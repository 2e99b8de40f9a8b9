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
