"""The pointer-chasing task: follow a chain of arrows to its end, generated on the fly.

A sample is a list of ``n_slots`` slots, each holding the index of another slot (its *arrow*). The
arrows form disjoint chains, and the last slot of every chain points at itself (an *exit*). Starting
at slot 0, follow the arrows until an exit: the target is that exit's index. The difficulty ``k`` is
the number of slots on the walk, from slot 0 to its exit included: ``k = 1`` when slot 0 is itself an
exit, and ``k`` slots have to be read, one after the other, to know where the walk ends, because each
slot only says where to go next.

The chain from slot 0 visits ``k − 1`` other slots in a random order; the remaining slots form other
chains (the *distractors*), each slot ending its chain with probability ``end_prob``, so that the
exits are many and the answer cannot be told from the set of exits alone.

An input is ``(n_slots,)`` floats holding the arrows' indices (exact in float32: the data loaders and
the evaluation turn non-float inputs into floats, and the step function turns them back into
indices). Training batches are drawn afresh from a generator of the run's own (seeded by the run's
seed, see :func:`~pondernet_tutorial.data.base.data_generator`);
the validation set (training range of ``k``) and the test sets (a fixed number of samples for every
``k``) have seeds of their own that do not depend on the run's seed.
"""

from __future__ import annotations

import torch
from torch import Tensor

from .base import GeneratedDataModule, check_k_range

VAL_SEED, TEST_SEED, BEYOND_SEED = 2_100, 3_100, 4_100
END_PROB = 0.25  # a distractor chain's mean length: 4 slots


def pointer_batch(
    batch: int,
    n_slots: int,
    k_range: tuple[int, int],
    end_prob: float = END_PROB,
    generator: torch.Generator | None = None,
) -> tuple[Tensor, Tensor, Tensor]:
    """Draw ``batch`` pointer-chasing samples.

    The slots are laid out in a random order ``o`` with ``o_1 = 0``; slot ``o_j`` points at ``o_{j+1}``
    unless ``j`` ends a chain, in which case it points at itself. Position ``k`` ends the walk from
    slot 0; after it each position ends a chain with probability ``end_prob``, and the last one always.

    Args:
        k_range: ``(k_min, k_max)``, inclusive bounds of the walk's length in slots.
        end_prob: the probability that a slot ends a distractor chain (mean length ``1/end_prob``).

    Returns:
        ``x (B, n_slots)`` float arrows, ``y (B,)`` long exit reached from slot 0, ``k (B,)`` long.
    """
    k_min, k_max = k_range
    k = torch.randint(k_min, k_max + 1, (batch,), generator=generator)
    # the order of the slots: 0 first, then a random permutation of 1..n-1
    others = torch.rand(batch, n_slots - 1, generator=generator).argsort(1) + 1
    order = torch.cat([torch.zeros(batch, 1, dtype=torch.long), others], 1)  # (B, n)
    position = torch.arange(1, n_slots + 1)[None]  # j = 1..n
    ends = (
        (position == k[:, None])  # the walk from slot 0 ends at position k
        | (position == n_slots)  # the last chain ends with the last slot
        | ((position > k[:, None]) & (torch.rand(batch, n_slots, generator=generator) < end_prob))
    )
    following = torch.cat([order[:, 1:], order[:, -1:]], 1)  # o_{j+1} (the last one: itself)
    target = torch.where(ends, order, following)  # the arrow of slot o_j
    arrows = torch.empty_like(order).scatter_(1, order, target)  # arrows[o_j] = target_j
    y = order.gather(1, (k - 1)[:, None]).squeeze(1)  # o_k, the exit of the walk from slot 0
    return arrows.float(), y, k


class PointerDataModule(GeneratedDataModule):
    """Pointer-chasing samples for training, validation and per-``k`` test sets: ``test`` (the
    training range, or ``test_k``) and, given ``beyond_k``, ``beyond`` (longer walks than in training).
    See :class:`~pondernet_tutorial.data.base.GeneratedDataModule`.

    Args:
        n_slots: slots per sample (also the number of classes: the answer is a slot).
        train_k: ``(k_min, k_max)`` of the training and validation walks.
        test_k: ``(k_min, k_max)`` of the test set ``test`` (default: ``train_k``).
        beyond_k: ``(k_min, k_max)`` of the test set ``beyond``, or None for none.
        end_prob: the probability that a slot ends a distractor chain.
        batch_size, train_subset, val_size, test_per_k, test_subset, seed: as for
            :class:`~pondernet_tutorial.data.base.GeneratedDataModule`.
    """

    stream, val_seed, test_seeds = "pointer", VAL_SEED, {"test": TEST_SEED, "beyond": BEYOND_SEED}

    def __init__(
        self,
        n_slots: int,
        train_k: tuple[int, int],
        test_k: tuple[int, int] | None = None,
        beyond_k: tuple[int, int] | None = None,
        end_prob: float = END_PROB,
        batch_size: int = 128,
        train_subset: int | None = None,
        val_size: int = 8192,
        test_per_k: int = 500,
        test_subset: int | None = None,
        data_dir: str | None = None,  # accepted for a uniform interface; nothing is read from disk
        seed: int = 0,
    ):
        if isinstance(n_slots, bool) or int(n_slots) != n_slots or n_slots < 2:
            raise ValueError(f"n_slots must be an integer >= 2, got {n_slots!r}.")
        n = int(n_slots)
        train_k = check_k_range(train_k, n, "train_k", "n_slots")
        sets = {"test": check_k_range(test_k or train_k, n, "test_k", "n_slots")}
        if beyond_k:
            sets["beyond"] = check_k_range(beyond_k, n, "beyond_k", "n_slots")
        if not 0.0 < float(end_prob) <= 1.0:
            raise ValueError(f"end_prob must lie in (0, 1], got {end_prob!r}.")
        super().__init__(n, train_k, sets, batch_size, train_subset, val_size, test_per_k, test_subset, seed)
        self.n_slots, self.end_prob = n, float(end_prob)
        self.test_k, self.beyond_k = sets["test"], sets.get("beyond")
        self.save_hyperparameters(ignore=["data_dir"])

    def draw(self, batch, k_range, generator=None):
        return pointer_batch(batch, self.n_slots, k_range, self.end_prob, generator)
