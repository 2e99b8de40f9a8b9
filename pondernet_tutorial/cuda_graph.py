"""One training step as one CUDA graph: forward, loss, backward, gradient clipping and Adam's update.

A training step of a small model launches hundreds of tiny kernels (the MNIST model: about 850), and
on a GPU the Python that launches them, not the GPU, sets the pace. PyTorch can record every kernel
of one step once (*capture*) and launch the whole recording with one call (*replay*): the step then
costs what the GPU needs, and the host never waits for it.

A step can be captured when nothing in it needs a value from the device on the host (no ``.item()``,
no ``if tensor:``, no shape that depends on the data) and its tensors keep their shapes and addresses
from step to step. The package's training step is built that way (see
:meth:`~pondernet_tutorial.methods.base.PonderingMethod.fit_forward`): every method unrolls all its
steps and masks what comes after a sample's halt. What changes from step to step is copied into
*static* tensors before a replay: the batch, and the learning rate, which Adam reads from a tensor on
the device (``capturable=True``) so that a scheduler's ``fill_`` reaches the recorded update.

:class:`GraphedStep` runs a few steps eagerly first (Adam creates its state on its first step; the
recipe of PyTorch's documentation warms up on a side stream), then captures, then replays. If capture
fails, it says so in one line and goes on eagerly with the same computation.
"""

from __future__ import annotations

import warnings
from typing import Callable

import torch
from torch import Tensor

from .steps.base import map_state


def _static_copy(dst, src) -> None:
    """Copy a batch (a tensor or a tuple of tensors) into the static tensors of the same structure."""
    if isinstance(dst, Tensor):
        dst.copy_(src, non_blocking=True)
    else:
        for d, s in zip(dst, src):
            _static_copy(d, s)


def _shapes(batch) -> list:
    shapes = []
    map_state(lambda t: shapes.append((t.shape, t.dtype)) or t, batch)
    return shapes


class GraphedStep:
    """A whole training step, replayed from one CUDA graph after a few eager warm-up steps.

    Args:
        body: ``(x, y) -> dict`` of tensors: the forward pass and the loss (key ``"loss"``) and the
            values to log. It must be capturable (see the module's docstring).
        parameters: the parameters that the optimiser updates.
        optimizer: an optimiser whose update is capturable (``Adam(capturable=True)`` with a tensor
            learning rate on the device).
        grad_clip: clip the gradients' norm to this value (0: no clipping).
        warmup: eager steps before the capture.
        capture: False runs every step eagerly (the same computation; used where there is no CUDA).
    """

    def __init__(
        self,
        body: Callable[[Tensor, Tensor], dict],
        parameters,
        optimizer: torch.optim.Optimizer,
        grad_clip: float = 0.0,
        warmup: int = 3,
        capture: bool = True,
    ):
        self.body, self.parameters, self.optimizer = body, list(parameters), optimizer
        self.grad_clip, self.warmup, self.capture = float(grad_clip), int(warmup), capture
        self.graph: torch.cuda.CUDAGraph | None = None
        self.steps = 0  # steps taken, eagerly or by replay

    def _update(self, x, y) -> dict:
        """forward, loss, backward, clipping, update: the work that is captured."""
        out = self.body(x, y)
        out["loss"].backward()
        if self.grad_clip > 0:
            torch.nn.utils.clip_grad_norm_(self.parameters, self.grad_clip, foreach=True)  # no sync
        self.optimizer.step()
        return {name: value.detach() for name, value in out.items()}

    def _eager(self, x, y) -> dict:
        self.optimizer.zero_grad(set_to_none=True)
        return self._update(x, y)

    def _warm_up(self, x, y) -> dict:
        """An eager step on a side stream, as PyTorch's recipe for whole-network capture warms up."""
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            out = self._eager(x, y)
        current = torch.cuda.current_stream()
        current.wait_stream(side)
        for value in out.values():  # read on the current stream: keep their memory until it has
            value.record_stream(current)
        return out

    def _capture(self, x, y) -> None:
        self.static_x = map_state(torch.clone, x)
        self.static_y = y.clone()
        self.optimizer.zero_grad(set_to_none=True)  # the captured backward allocates the gradients
        graph = torch.cuda.CUDAGraph()
        # records the kernels; nothing runs until a replay ("thread_local": another thread's pinned-memory
        # allocation, e.g. a data loader's, is not an error of this capture)
        with torch.cuda.graph(graph, capture_error_mode="thread_local"):
            self.static_out = self._update(self.static_x, self.static_y)
        self.graph = graph

    def _same_shapes(self, x, y) -> bool:
        return _shapes(x) + _shapes(y) == _shapes(self.static_x) + _shapes(self.static_y)

    def __call__(self, x, y) -> dict:
        """One training step on the batch ``(x, y)``; returns the body's values for this batch (static
        tensors after capture: read them before the next step)."""
        self.steps += 1
        if self.capture and self.graph is None:
            if self.steps <= self.warmup:
                return self._warm_up(x, y)
            try:
                self._capture(x, y)
            except Exception as error:  # go on eagerly with the same computation; say so once
                self.capture, self.graph = False, None
                torch.cuda.synchronize()
                warnings.warn(
                    f"CUDA graph capture failed ({type(error).__name__}: {error}); training goes on "
                    "without it (pass --no-cuda-graph to skip the attempt).",
                    RuntimeWarning,
                    stacklevel=2,
                )
        if self.graph is not None and self._same_shapes(x, y):
            _static_copy(self.static_x, x)
            self.static_y.copy_(y, non_blocking=True)
            self.graph.replay()  # this batch's step: forward, loss, backward, clipping, update
            return self.static_out
        return self._eager(x, y)  # no CUDA, capture failed, or a batch of another shape
