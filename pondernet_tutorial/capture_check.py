"""What a CUDA graph of a training step would not replay as the step ran eagerly, found by logging the
step's operations with a dispatch mode. The fast path (:mod:`~pondernet_tutorial.fast_path`) asks
before it captures a step, and a step with a hazard trains eagerly; ``tests/runs/test_capture_safety.py``
runs it on PyTorch's ``meta`` device, standing in for the GPU. A stand-in graph that replays a step by
running its Python again (``tests/runs/test_cuda_graph.py``) would replay happily a step that reads a
value on the host, draws random numbers on the CPU or keeps a Python counter; a real graph would not.
Each hazard names the operation and the line of the step that called it.
"""

from __future__ import annotations

import os
import traceback
import weakref
from collections.abc import Callable
from pathlib import Path

import torch
from torch import Tensor
from torch.utils import _pytree as pytree
from torch.utils._python_dispatch import TorchDispatchMode

aten = torch.ops.aten
_HOST_SYNCS = {
    aten._local_scalar_dense.default,
    aten.item.default,
    aten.is_nonzero.default,
    aten.equal.default,
}
_INDEXING = {
    aten.index.Tensor,
    aten.index_put.default,
    aten.index_put_.default,
    aten._index_put_impl_.default,
}


_TORCH = str(Path(torch.__file__).parent) + os.sep


def _where() -> str:
    """The line of the innermost caller outside PyTorch and this file: the step's code that ran the
    operation (``at model.py:42 in forward``)."""
    for frame in reversed(traceback.extract_stack()):
        if frame.filename != __file__ and not frame.filename.startswith(_TORCH):
            return f" at {Path(frame.filename).name}:{frame.lineno} in {frame.name}"
    return ""


class CaptureHazard(RuntimeError):
    """An operation that cannot be captured at all: the host would wait for the device."""


class CaptureCheck(TorchDispatchMode):
    """Log every operation of a training step run on ``device``, and what in it a CUDA graph would not
    replay as it ran.

    Raises :class:`CaptureHazard` at a host synchronisation (``.item()``, ``float()``, ``bool()``,
    an ``if`` on a tensor: ``aten._local_scalar_dense``) and at an operation whose result's shape
    depends on the data (``nonzero``, ``masked_select``, indexing with a boolean mask). Records in
    :attr:`hazards` what a CUDA kernel would read from the host once, when it is recorded: random
    numbers drawn on the CPU, and a host tensor that the step did not make (a learning rate left on
    the CPU, a buffer kept there), whose later changes a replay would miss; and random numbers drawn
    from a generator of the step's own instead of the device's, which a graph replays as they were
    drawn at capture. A host tensor that the step makes from a constant (``p[-1] = 1.0``) is
    recorded as it is, which is right. :attr:`ops` is the log: each operation with the shapes of its
    tensors (and the values of the small ones on the host) and its other arguments, what a graph
    records.
    """

    def __init__(self, device):
        super().__init__()
        self.device = torch.device(device)
        self.ops: list[tuple] = []
        self.hazards: list[str] = []
        self._made: dict[int, weakref.ref] = {}  # host tensors that the step made

    def _made_here(self, t: Tensor) -> bool:
        made = self._made.get(id(t))
        return made is not None and made() is t

    def _flag(self, message: str) -> None:
        message += _where()
        if message not in self.hazards:
            self.hazards.append(message)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func in _HOST_SYNCS or torch.Tag.data_dependent_output in func.tags:
            raise CaptureHazard(
                f"{func}{_where()}: the host waits for a value of the device (.item(), float(), bool() or "
                "an `if` on a tensor)"
            )
        if func in _INDEXING:
            if any(t is not None and t.dtype in (torch.bool, torch.uint8) for t in args[1]):
                raise CaptureHazard(
                    f"{func} with a boolean mask{_where()}: its shape depends on the data (use torch.where)"
                )
        elif torch.Tag.dynamic_output_shape in func.tags:
            raise CaptureHazard(f"{func}{_where()}: its result's shape depends on the data")
        random = torch.Tag.nondeterministic_seeded in func.tags
        if random and kwargs.get("generator") is not None:
            self._flag(
                f"{func} draws from a generator of its own: a graph replays the numbers drawn at capture"
            )
        inputs = pytree.tree_leaves((args, kwargs))
        self.ops.append((str(func), *map(_described, inputs)))  # what a graph records
        out = func(*args, **kwargs)
        host = [
            t for t in pytree.tree_leaves(out) if isinstance(t, Tensor) and t.device.type != self.device.type
        ]
        for t in host:
            self._made[id(t)] = weakref.ref(t)
        if random and host:
            self._flag(
                f"{func}: random numbers drawn on {host[0].device}: a graph replays the ones of the capture"
            )
        if func not in (aten.lift_fresh.default, aten.lift_fresh_copy.default):  # a literal, made here
            kept = [
                t
                for t in inputs
                if isinstance(t, Tensor) and t.device.type != self.device.type and not self._made_here(t)
            ]
            if kept:
                self._flag(
                    f"{func}: a tensor on {kept[0].device} that the step did not make (a learning rate, a "
                    "buffer), read once at capture: a replay misses its later changes"
                )
        return out


def _described(value):
    if isinstance(value, Tensor):
        if value.device.type == "cpu" and value.numel() <= 16:  # a constant the graph records: its values
            return (tuple(value.shape), value.dtype, "cpu", tuple(value.flatten().tolist()))
        return (tuple(value.shape), value.dtype, value.device.type)
    if value is None or isinstance(value, (bool, int, float, complex, str, torch.dtype, torch.device)):
        return value  # a graph records these as they were at capture
    return type(value).__name__  # a generator, a profiler's record, a layout


def capture_hazards(step: Callable[[], object], device, runs: int = 2, setup: int = 1) -> list[str]:
    """What a CUDA graph of ``step`` (one whole training step, on ``device``) would not replay as the
    step ran eagerly: the :class:`CaptureCheck` of ``setup + runs`` runs of it (the first ``setup``
    may create state, as the warm-up does), and any difference between the operations of the last
    ``runs`` (a Python counter or a branch on Python state: a graph replays what ran at capture; one
    that changes the step only every n-th call can pass). An empty list: nothing found. The step runs
    for real: its parameters are updated."""
    hazards, logs = [], []
    for _ in range(setup + runs):
        check = CaptureCheck(device)
        try:
            with check:
                step()
        except CaptureHazard as hazard:
            return [*hazards, *check.hazards, str(hazard)]
        hazards += [h for h in check.hazards if h not in hazards]
        logs.append(check.ops)
    for run, (a, b) in enumerate(zip(logs[setup:], logs[setup + 1 :]), start=setup + 1):
        if a != b:
            at = next((i for i, (p, q) in enumerate(zip(a, b)) if p != q), min(len(a), len(b)))
            first = a[at] if at < len(a) else "nothing"
            then = b[at] if at < len(b) else "nothing"
            hazards.append(
                f"runs {run} and {run + 1} differ at operation {at} ({first} against {then}): Python state "
                "(a counter, a branch) changes the step, and a graph replays what ran at capture"
            )
            break
    return hazards
