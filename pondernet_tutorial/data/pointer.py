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

import functools

import lightning as L
import torch
from torch import Tensor
from torch.utils.data import DataLoader

from .base import EvalSet, batch_loader, check_batch_size, fresh_loader

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


def check_k_range(k_range, n_slots: int, name: str) -> tuple[int, int]:
    k_min, k_max = (int(v) for v in k_range)
    if not 1 <= k_min <= k_max <= n_slots:
        raise ValueError(f"{name} must satisfy 1 <= k_min <= k_max <= n_slots={n_slots}, got {k_range}.")
    return k_min, k_max


class PointerDataModule(L.LightningDataModule):
    """Pointer-chasing samples for training, validation and per-``k`` test sets.

    Args:
        n_slots: slots per sample (also the number of classes: the answer is a slot).
        train_k: ``(k_min, k_max)`` of the training and validation walks.
        test_k: ``(k_min, k_max)`` of the test set ``test`` (default: ``train_k``).
        beyond_k: ``(k_min, k_max)`` of a second test set ``beyond`` (longer walks than in training), or
            None for none.
        end_prob: the probability that a slot ends a distractor chain.
        batch_size: batch size of every loader.
        train_subset: training samples per epoch (an "epoch" is a fixed number of fresh batches);
            when given (quick runs), the validation set shrinks to half of it.
        val_size: validation samples.
        test_per_k: test samples for every ``k`` of each test set.
        test_subset: use only the first so many test samples of every ``k`` (quick runs).
        seed: the run's seed, which seeds the training batches' generator.
    """

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
        super().__init__()
        self.seed = int(seed)
        if isinstance(n_slots, bool) or int(n_slots) != n_slots or n_slots < 2:
            raise ValueError(f"n_slots must be an integer >= 2, got {n_slots!r}.")
        self.n_slots = int(n_slots)
        self.train_k = check_k_range(train_k, self.n_slots, "train_k")
        self.test_k = check_k_range(test_k or self.train_k, self.n_slots, "test_k")
        self.beyond_k = check_k_range(beyond_k, self.n_slots, "beyond_k") if beyond_k else None
        if not 0.0 < float(end_prob) <= 1.0:
            raise ValueError(f"end_prob must lie in (0, 1], got {end_prob!r}.")
        self.end_prob = float(end_prob)
        self.batch_size = check_batch_size(batch_size)
        samples = train_subset or 128_000  # an epoch: 1,000 batches of 128
        self.batches_per_epoch = max(1, samples // self.batch_size)
        if train_subset:  # quick runs: a validation set in proportion
            val_size = min(val_size, max(train_subset // 2, self.batch_size))
        self.val_size, self.test_per_k, self.test_subset = val_size, test_per_k, test_subset
        self.save_hyperparameters(ignore=["data_dir"])

    @property
    def test_set_names(self) -> list[str]:
        return ["test", "beyond"] if self.beyond_k else ["test"]

    @property
    def train_size(self) -> int:
        """Training samples per epoch."""
        return self.batches_per_epoch * self.batch_size

    def _per_k(self, k_range: tuple[int, int], seed: int) -> tuple[Tensor, Tensor, Tensor]:
        """``test_per_k`` samples for every ``k`` of a range (the first ``test_subset`` of each)."""
        generator = torch.Generator().manual_seed(seed + self.n_slots)
        parts = [
            pointer_batch(self.test_per_k, self.n_slots, (k, k), self.end_prob, generator)
            for k in range(k_range[0], k_range[1] + 1)
        ]
        if self.test_subset:
            parts = [tuple(t[: self.test_subset] for t in part) for part in parts]
        return tuple(torch.cat(t) for t in zip(*parts))

    def setup(self, stage: str | None = None) -> None:
        if stage in (None, "fit", "validate") and not hasattr(self, "val_inputs"):
            generator = torch.Generator().manual_seed(VAL_SEED + self.n_slots)
            self.val_inputs, self.val_labels, _ = pointer_batch(
                self.val_size, self.n_slots, self.train_k, self.end_prob, generator
            )
        if stage in (None, "test", "predict") and not hasattr(self, "test_sets"):
            self.test_sets = {"test": self._per_k(self.test_k, TEST_SEED)}
            if self.beyond_k:
                self.test_sets["beyond"] = self._per_k(self.beyond_k, BEYOND_SEED)

    def train_dataloader(self) -> DataLoader:
        draw = functools.partial(
            pointer_batch, n_slots=self.n_slots, k_range=self.train_k, end_prob=self.end_prob
        )
        return fresh_loader(draw, self.batch_size, self.batches_per_epoch, self.seed, "pointer")

    def val_dataloader(self) -> DataLoader:
        return batch_loader(self.val_inputs, self.val_labels, self.batch_size, shuffle=False)

    def test_dataloader(self) -> list[DataLoader]:
        return [
            batch_loader(inputs, labels, self.batch_size, shuffle=False)
            for inputs, labels, _ in self.test_sets.values()
        ]

    def predict_dataloader(self) -> list[DataLoader]:
        return self.test_dataloader()

    def evaluation_sets(self) -> list[EvalSet]:
        """The test sets, with each sample's walk length ``k``."""
        self.setup("test")
        return [
            EvalSet(name, inputs, labels, per_sample={"k": k})
            for name, (inputs, labels, k) in self.test_sets.items()
        ]
