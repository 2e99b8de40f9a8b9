"""One training step as one CUDA graph: forward, loss, backward, gradient clipping and Adam's update.

A training step of a small model launches hundreds of tiny kernels (the MNIST model: about 850), and
on a GPU the Python that launches them, not the GPU, sets the pace. PyTorch can record every kernel
of one step once (*capture*) and launch the whole recording with one call (*replay*): the step then
costs what the GPU needs, and the host never waits for it.

A step can be captured when nothing in it needs a value from the device on the host (no ``.item()``,
no ``if tensor:``, no shape that depends on the data) and its tensors keep their shapes and addresses
from step to step. The package's training step is built that way (see
:meth:`~pondernet_tutorial.methods.base.HaltingMethod.forward`): every method unrolls all its steps
and masks what comes after a sample's halt. What changes from step to step is copied into
*static* tensors before a replay: the batch, and the learning rate, which Adam reads from a tensor on
the device (``capturable=True``) so that a scheduler's ``fill_`` reaches the recorded update.

:class:`GraphedStep` runs a few steps eagerly first (Adam creates its state on its first step; the
recipe of PyTorch's documentation warms up on a side stream), then captures, then replays. If capture
fails, it says so in one line and goes on eagerly with the same computation.

:class:`GraphedPonderLitModule` is :class:`~pondernet_tutorial.lightning_module.PonderLitModule` with
its training step taken by a :class:`GraphedStep` (Lightning's manual optimisation); ``train()`` uses
it on one CUDA device. Nothing here needs a GPU to be tested: the CUDA calls sit behind
:class:`CudaGraphs`, and the tests replace it with a stand-in graph on the CPU that replays the
recorded step on the same tensors. What such a stand-in cannot see (a value read on the host, random
numbers drawn on the CPU, a Python counter) the tests find in a log of the step's operations
(``tests/capture_check.py``); ``benchmarks/gpu_path.py`` runs the real capture on a GPU.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable

import torch
from torch import Tensor

from ..steps.base import map_state
from .module import RunModule


def _static_copy(dst, src) -> None:
    """Copy a batch (a tensor or a tuple of tensors) into the static tensors of the same structure."""
    if isinstance(dst, Tensor):
        dst.copy_(src, non_blocking=True)
    else:
        for d, s in zip(dst, src):
            _static_copy(d, s)


def _shapes(batch) -> list:
    shapes = []
    map_state(lambda t: shapes.append((t.shape, t.dtype, t.device)) or t, batch)
    return shapes


class CudaGraphs:
    """What :class:`GraphedStep` asks of CUDA: an eager step on a side stream (the warm-up of PyTorch's
    recipe for whole-network capture), a capture, and a wait for the device."""

    def warm_up(self, step: Callable[[], dict]) -> dict:
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            out = step()
        current = torch.cuda.current_stream()
        current.wait_stream(side)
        for value in out.values():  # read on the current stream: keep their memory until it has
            value.record_stream(current)
        return out

    def capture(self, step: Callable[[], dict], optimizer=None, parameters=(), buffers=()):
        """Record ``step``'s kernels (nothing runs until a replay): ``(graph, outputs)``. A replay reads
        and writes the memory that the capture saw: the optimiser's state and learning-rate tensors,
        the parameters and their gradients, the sums of the logged values (``optimizer``,
        ``parameters`` and ``buffers`` name them; CUDA needs no list). ``"thread_local"``: another
        thread's pinned-memory allocation (a data loader's) is no error."""
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, capture_error_mode="thread_local"):
            out = step()
        return graph, out

    def synchronize(self) -> None:
        torch.cuda.synchronize()


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
        graphs: how to warm up and capture (:class:`CudaGraphs`); ``None`` runs every step eagerly
            (the same computation; used where there is no CUDA).
        buffers: tensors besides the parameters and the optimiser's state that ``body`` writes in
            place (the sums of the logged values).
    """

    def __init__(
        self,
        body: Callable[[Tensor, Tensor], dict],
        parameters,
        optimizer: torch.optim.Optimizer,
        grad_clip: float = 0.0,
        warmup: int = 3,
        graphs: CudaGraphs | None = None,
        buffers=(),
    ):
        self.body, self.parameters, self.optimizer = body, list(parameters), optimizer
        self.grad_clip, self.warmup, self.graphs = float(grad_clip), int(warmup), graphs
        self.buffers = list(buffers)
        self.graph = None
        self.steps = 0  # steps taken, eagerly or by replay
        self.replays = 0  # steps taken by replaying the graph
        self.eager_after_capture = 0  # batches of another shape, stepped eagerly after the capture

    @property
    def capture(self) -> bool:
        return self.graphs is not None

    def _update(self, x, y) -> dict:
        """forward, loss, backward, clipping, update: the work that is captured."""
        out = self.body(x, y)
        out["loss"].backward()
        if self.grad_clip > 0:
            torch.nn.utils.clip_grad_norm_(self.parameters, self.grad_clip, foreach=True)  # no sync
        self.optimizer.step()
        return {name: value.detach() for name, value in out.items()}

    def _eager(self, x, y) -> dict:
        if self.graph is None:
            self.optimizer.zero_grad(set_to_none=True)
        else:  # the graph reads and writes these gradients: keep their memory, zero them in place
            for p in self.parameters:
                if p.grad is not None:
                    p.grad.zero_()
        return self._update(x, y)

    def optimizer_tensors_to_device(self) -> None:
        """Put every tensor that the recorded update reads on its parameters' device: the learning rates
        (a schedule must write into these very tensors) and the optimiser's state (Adam's ``step``).

        A CPU tensor in a CUDA kernel is read once, when the kernel is recorded, and every replay
        reuses that value. Lightning restores a resumed run's learning rate as a CPU tensor (it moves
        the optimiser's state to the device, not its learning rates): kept so, every later cut by the
        plateau schedule would be lost to the graph."""
        for group in self.optimizer.param_groups:
            device = group["params"][0].device
            lr = group["lr"]
            if not isinstance(lr, Tensor):  # a float: set by hand, or by a schedule during the warm-up
                lr = torch.tensor(float(lr))
            group["lr"] = lr.to(device=device, dtype=torch.float32)
            for p in group["params"]:
                state = self.optimizer.state.get(p, {})
                for key, value in state.items():
                    if isinstance(value, Tensor) and value.device != device:
                        state[key] = value.to(device)
            read = [
                group["lr"],
                *(v for p in group["params"] for v in self.optimizer.state.get(p, {}).values()),
            ]
            elsewhere = {str(t.device) for t in read if isinstance(t, Tensor) and t.device != device}
            if elsewhere:  # what a replay reads from elsewhere is frozen at capture
                raise RuntimeError(
                    f"the optimiser's tensors are on {sorted(elsewhere)}, its parameters on {device}"
                )

    def _capture(self, x, y) -> None:
        self.static_x = map_state(torch.clone, x)
        self.static_y = y.clone()
        self.optimizer_tensors_to_device()
        self.static_lr = [group["lr"] for group in self.optimizer.param_groups]
        self.optimizer.zero_grad(set_to_none=True)  # the captured backward allocates the gradients
        self.graph, self.static_out = self.graphs.capture(
            lambda: self._update(self.static_x, self.static_y), self.optimizer, self.parameters, self.buffers
        )

    def _same_shapes(self, x, y) -> bool:
        return _shapes(x) + _shapes(y) == _shapes(self.static_x) + _shapes(self.static_y)

    def sync_learning_rates(self) -> None:
        """Bring a learning rate that a schedule set as a new value (a float, or another tensor: older
        PyTorch's ``ReduceLROnPlateau`` does so) into the tensor that the recorded update reads."""
        for group, static in zip(self.optimizer.param_groups, self.static_lr):
            if group["lr"] is not static:
                static.fill_(float(group["lr"]))
                group["lr"] = static

    def __call__(self, x, y) -> dict:
        """One training step on the batch ``(x, y)``; returns the body's values for this batch (static
        tensors after capture: read them before the next step)."""
        self.steps += 1
        if self.capture and self.graph is None:
            if self.steps <= self.warmup:
                return self.graphs.warm_up(lambda: self._eager(x, y))
            try:
                self._capture(x, y)
            except Exception as error:  # go on eagerly with the same computation; say so once
                self.graphs.synchronize()
                self.graphs, self.graph = None, None
                self.optimizer.zero_grad(set_to_none=True)  # whatever the failed capture left
                warnings.warn(
                    f"CUDA graph capture failed ({type(error).__name__}: {error}); training goes on "
                    "without it (pass --no-cuda-graph to skip the attempt).",
                    RuntimeWarning,
                    stacklevel=2,
                )
        if self.graph is not None:
            self.sync_learning_rates()
            if self._same_shapes(x, y):
                _static_copy(self.static_x, x)
                self.static_y.copy_(y, non_blocking=True)
                self.graph.replay()  # this batch's step: forward, loss, backward, clipping, update
                self.replays += 1
                return self.static_out
            if not self.eager_after_capture:
                warnings.warn(
                    f"a training batch of another shape than the captured one ({_shapes(y)[0][0]} against "
                    f"{tuple(self.static_y.shape)}) is stepped eagerly; drop the last, partial batch "
                    "(drop_last=True) to replay every step.",
                    RuntimeWarning,
                    stacklevel=2,
                )
            self.eager_after_capture += 1
        return self._eager(x, y)  # no CUDA, capture failed, or a batch of another shape


class GraphedPonderLitModule(RunModule):
    """:class:`~pondernet_tutorial.lightning_module.PonderLitModule` whose training step (forward, loss,
    backward, clipping and Adam's update) is one :class:`GraphedStep`, replayed from a CUDA graph.

    Lightning's manual optimisation: Adam reads its learning rate from a tensor on the device
    (``capturable=True``), the plateau schedule is stepped after each epoch's validation, as Lightning
    steps it in automatic optimisation, and every ``fit`` captures afresh (a new fit has a new
    optimiser, learning-rate tensor and schedule; the weights may have moved). After ``fit`` the graph
    and its memory are let go, so the module can be copied, pickled and trained again.

    The step adds its logged values to :class:`~pondernet_tutorial.runs.module.RunModule`'s tensor of
    sums inside the graph, so the host has nothing to do for them.

    Args: those of :class:`~pondernet_tutorial.lightning_module.PonderLitModule`, and
        graphs: how to capture; ``None``: CUDA's (:class:`CudaGraphs`) on a CUDA device, and eager
            steps with the same computation elsewhere.

    Attributes:
        graph_replays: steps of the last ``fit`` replayed from a captured graph (0: none was captured,
            or capture failed and every step ran eagerly).
    """

    def __init__(self, *args, graphs: CudaGraphs | None = None, **kwargs):
        super().__init__(*args, **kwargs)
        self.automatic_optimization = False  # the replayed step optimises by hand
        self.graphs = graphs
        self._graphed: GraphedStep | None = None
        self.graph_replays = 0

    def release_graph(self) -> None:
        """Forget the captured step (its static tensors, its memory pool) and the sums it wrote."""
        if self._graphed is not None:
            self.graph_replays += self._graphed.replays
        self._graphed = None
        self.release_sums()

    def on_fit_start(self) -> None:
        self.release_graph()
        self.graph_replays = 0

    def on_fit_end(self) -> None:
        self.release_graph()

    def configure_optimizers(self):
        lr = torch.tensor(float(self.hparams.lr), device=self.device)  # the captured update reads a tensor
        optimizer = torch.optim.Adam(self.parameters(), lr=lr, capturable=True, foreach=True)
        scheduler = self.plateau_schedule(optimizer)
        return ([optimizer], [scheduler]) if scheduler is not None else optimizer

    def training_step(self, batch, batch_idx: int) -> Tensor:
        x, y = batch
        optimizer = self.optimizers()
        if self._graphed is None:
            graphs = self.graphs
            if graphs is None and self.device.type == "cuda":
                graphs = CudaGraphs()
            self.start_sums()  # before the capture: the graph writes into them
            self._graphed = GraphedStep(
                self.summed_values,
                self.parameters(),
                optimizer.optimizer,
                self.grad_clip,
                graphs=graphs,
                buffers=[self._fit_sums],
            )
        before = getattr(optimizer, "_on_before_step", None)  # Lightning's count of optimiser steps
        if before is not None:
            before()
        values = self._graphed(x, y)
        after = getattr(optimizer, "_on_after_step", None)
        if after is not None:
            after()
        self._fit_count += y.shape[0]
        return values["loss"].clone()  # the static loss is overwritten by the next replay

    def on_train_epoch_end(self) -> None:
        """The epoch's training means; then the plateau schedule, stepped by hand where Lightning
        would: after the epoch's validation."""
        super().on_train_epoch_end()
        scheduler = self.lr_schedulers()
        if scheduler is not None and "val/acc" in self.trainer.callback_metrics:
            scheduler.step(self.trainer.callback_metrics["val/acc"])
