"""How many threads a training uses: one on a machine of at most two cores.

PyTorch starts as many intra-op threads as the machine has cores. On two cores those two threads wait
for each other whenever anything else runs (a browser, a second training, a build), and a small
network's step then takes several times longer than on one thread. :func:`training_threads` sets the
number for the duration of a training and gives the caller's back; ``fit`` and the minimal chapter's
``train_on_parity`` use it. This module imports nothing but PyTorch.
"""

from __future__ import annotations

import contextlib
import numbers
import os

import torch


def default_threads() -> int:
    """The threads a training uses unless told: one on a machine of at most two cores, PyTorch's own
    choice on a bigger one. On two cores PyTorch's two threads wait for each other whenever anything
    else runs: beside two other trainings, 100 updates of a network the size of the own-model
    chapter's took 1.5 to 2.1 s on one thread and 14 to 31 s on two (``benchmarks/threads.py``). On
    an idle machine one thread costs that network nothing (8.8 s against 8.7 s, whole process) and
    slows MNIST's eager step from about 38 to 57 ms: ``fit(..., threads=2)`` there."""
    return 1 if (os.cpu_count() or 1) <= 2 else torch.get_num_threads()


@contextlib.contextmanager
def training_threads(threads: int | None = None):
    """PyTorch's intra-op threads set to ``threads`` (default :func:`default_threads`) within the
    block, and the caller's number back after it."""
    if threads is not None and (
        isinstance(threads, bool) or not isinstance(threads, numbers.Integral) or threads < 1
    ):
        raise ValueError(f"threads must be a whole number >= 1 (or None for the default), got {threads!r}.")
    before = torch.get_num_threads()
    torch.set_num_threads(threads or default_threads())
    try:
        yield
    finally:
        torch.set_num_threads(before)
