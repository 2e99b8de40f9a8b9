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
