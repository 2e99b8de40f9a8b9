"""The fast path: the same training step as :class:`~pondernet_tutorial.lightning_module.PonderLitModule`,
with the host out of the way. ``fit()`` takes it on one CUDA device; the run machinery's modules are
built on it.

A training step of a small model launches hundreds of tiny kernels (the MNIST model: about 850), and
on a GPU the Python that launches them, not the GPU, sets the pace. Three things change that without
changing what the step computes (``tests/core/test_fast_path.py`` and ``tests/runs/test_cuda_graph.py``
train both and compare the weights):

* :class:`FastPonderLitModule` adds the step's logged values to one tensor of sums on the device instead
  of updating one metric per value, and hands the sums to the metrics once an epoch; it clips the
  gradients itself (``grad_clip``) and, with ``compile=True``, compiles the unroll and the loss;
* :class:`GraphedStep` records every kernel of one whole step once (*capture*) and launches the
  recording with one call (*replay*): forward, loss, backward, clipping and Adam's update;
* :func:`fast_module` decides: on one CUDA device, a step that :mod:`~pondernet_tutorial.capture_check`
  finds safe to capture is replayed from a graph, and any other trains eagerly, with one line that says
  why.

A step can be captured when nothing in it needs a value from the device on the host (no ``.item()``,
no ``if tensor:``, no shape that depends on the data) and its tensors keep their shapes and addresses
from step to step. The package's training step is built that way (see
:meth:`~pondernet_tutorial.methods.base.HaltingMethod.forward`): every method unrolls all its steps
and masks what comes after a sample's halt. What changes from step to step is copied into
*static* tensors before a replay: the batch, and the learning rate, which Adam reads from a tensor on
the device (``capturable=True``) so that a scheduler's ``fill_`` reaches the recorded update.

Nothing here needs a GPU to be tested: the CUDA calls sit behind :class:`CudaGraphs`, and the tests
replace it with a stand-in graph on the CPU that replays the recorded step on the same tensors;
``benchmarks/gpu_path.py`` runs the real capture on a GPU.
"""

from __future__ import annotations

import sys
import warnings
from collections.abc import Callable

import lightning as L
import torch
from torch import Tensor
from torchmetrics import MeanMetric, MetricCollection

from .capture_check import capture_hazards
from .lightning_module import PonderLitModule
from .steps.base import map_state


def unchecked_mean() -> MeanMetric:
    """A mean that does not look for NaNs at each update (a wait of the host for the device): torchmetrics
    1.7 and later. Before 1.7 every strategy looks; "warn" is the plain module's (the graphed step updates
    its training means once an epoch, never inside the graph)."""
    try:
        return MeanMetric(nan_strategy="disable")
    except ValueError:
        return MeanMetric(nan_strategy="warn")


class FastPonderLitModule(PonderLitModule):
    """The plain module's training step, its logged values summed on the device.

    Args:
        model, lr, lr_schedule, lr_patience, lr_factor, eval_seed: the plain module's (saved alike).
        grad_clip: clip the gradients' norm to this value (0: no clipping). Not saved.
        compile: ``torch.compile`` the unroll and the loss. Not saved: a loaded model runs eagerly.
    """

    def __init__(
        self,
        model,
        lr=1e-3,
        lr_schedule="plateau",
        lr_patience=2,
        lr_factor=0.5,
        eval_seed=0,
        grad_clip: float = 0.0,
        compile: bool = False,
    ):
        super().__init__(model, lr, lr_schedule, lr_patience, lr_factor, eval_seed)
        for unsaved in ("grad_clip", "compile"):
            self.hparams.pop(unsaved, None)
        self.grad_clip = float(grad_clip)
        self._fit_sums: Tensor | None = None  # per training metric, the sum over this epoch's samples
        self._fit_count = 0
        self._compile_threads: list | None = None  # the setting that stop_compile_workers replaced
        self.compiled = bool(compile)
        if self.compiled:
            self.unroll_and_loss = torch.compile(self.unroll_and_loss)

    def start_sums(self) -> None:
        """Zero sums, one per training metric, on the device: what :meth:`summed_values` adds to."""
        self._fit_sums = torch.zeros(len(self.train_metrics), device=self.device)
        self._fit_count = 0  # samples in those sums

    def release_sums(self) -> None:
        self._fit_sums, self._fit_count = None, 0

    def summed_values(self, x, y) -> dict[str, Tensor]:
        """The training step's values, each also added, summed over the batch, to the epoch's sums."""
        values = self.step_values(x, y)
        batch = y.shape[0]
        names = self.train_metrics.keys(keep_base=True)
        sums = [
            v.detach().float().sum() if v.dim() else v.detach().float() * batch
            for v in map(values.get, names)
        ]
        self._fit_sums.add_(torch.stack(sums))
        return values

    def log_sums(self) -> None:
        """Hand the epoch's sums to the training metrics (each a mean over the samples, as per-step
        updates give) and log them; then start the sums again, in place (a CUDA graph writes there)."""
        if self._fit_count:
            means = self._fit_sums / self._fit_count
            for name, mean in zip(self.train_metrics.keys(keep_base=True), means):
                self.train_metrics[name].update(mean, weight=self._fit_count)
            self._fit_sums.zero_()
            self._fit_count = 0
        self.log_epoch(self.train_metrics, "train")

    def on_fit_start(self) -> None:
        self.release_sums()

    def on_fit_end(self) -> None:
        if self._compile_threads is not None:
            restore_compile_workers(self._compile_threads[0])
            self._compile_threads = None

    def training_step(self, batch, batch_idx: int) -> Tensor:
        x, y = batch
        if self._fit_sums is None:
            self.start_sums()
        values = self.summed_values(x, y)
        self._fit_count += y.shape[0]
        return values["loss"]

    def on_train_batch_end(self, outputs, batch, batch_idx: int) -> None:
        if batch_idx + 1 == self.trainer.num_training_batches:  # logged before validation and callbacks
            self.log_sums()
        if self.compiled and self._compile_threads is None and on_cuda(self.device):  # see the function
            self._compile_threads = [stop_compile_workers()]

    def on_train_epoch_end(self) -> None:
        self.log_sums()  # a loader without a length

    def stage_metrics(self, training: bool = False) -> MetricCollection:
        """The plain module's means, without the NaN check that makes the host wait at each update."""
        names = super().stage_metrics(training).keys(keep_base=True)
        return MetricCollection({name: unchecked_mean() for name in names}, compute_groups=False)

    def configure_gradient_clipping(self, optimizer, gradient_clip_val=None, gradient_clip_algorithm=None):
        if self.grad_clip > 0:
            self.clip_gradients(optimizer, gradient_clip_val=self.grad_clip, gradient_clip_algorithm="norm")


def on_cuda(device: torch.device) -> bool:
    """Whether ``device`` is a CUDA device, where :func:`stop_compile_workers` applies (on the CPU nothing
    changes; the tests put a stand-in in its place)."""
    return device.type == "cuda"


def stop_compile_workers():
    """Shut down torch.compile's pool of compile workers and compile whatever comes later (validation's
    graph, a last batch of another shape) in this process; returns the setting it replaced, for
    :func:`restore_compile_workers`.

    Called once the first compiled training step has run on a GPU (the compilation is done by then). On
    one H200 (torch 2.11), in a process where torch.compile had loaded the MNIST step from its on-disk
    cache, the pool's two helper processes kept a core busy, the training process used about fifteen,
    and the graphed step took about 16 ms instead of 2. With the pool shut down after the first step,
    the step loaded from the cache took 2.08 ms against 2.06 ms compiled afresh
    (``benchmarks/compile_cache.py``); a process started with one compile thread, which starts no pool,
    kept pace as well (1.99 ms). The shutdown costs each compiled fit on a GPU some seconds at its first
    step (there: 3 to 8 s), which a step loaded from the cache wins back within a thousand steps (14 ms
    each); a step compiled afresh gains nothing."""
    from torch._inductor import config

    before = config.compile_threads
    config.compile_threads = 1
    try:  # torch 2.4 and later; before, AsyncCompile lived in codecache
        from torch._inductor.async_compile import shutdown_compile_workers
    except ImportError:
        from torch._inductor import codecache

        shutdown_compile_workers = getattr(codecache, "shutdown_compile_workers", None)
    if shutdown_compile_workers is not None:
        shutdown_compile_workers()
    return before


def restore_compile_workers(setting) -> None:
    """Give torch.compile back the number of compile workers that :func:`stop_compile_workers` replaced."""
    from torch._inductor import config

    config.compile_threads = setting


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


SKIP = " (fit(..., fast=False), or --no-cuda-graph on the command line, skips the attempt)"


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
        check: ``(x, y) -> list[str]``, what in ``body`` a graph would not replay as it ran eagerly
            (:func:`~pondernet_tutorial.capture_check.capture_hazards`), asked once, before the
            capture; anything found: every step runs eagerly, and a warning says what and where.
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
        check: Callable[[Tensor, Tensor], list[str]] | None = None,
    ):
        self.body, self.parameters, self.optimizer = body, list(parameters), optimizer
        self.grad_clip, self.warmup, self.graphs = float(grad_clip), int(warmup), graphs
        self.buffers, self.check = list(buffers), check
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
            group["capturable"] = True  # a plain checkpoint's optimiser comes back without it
            for p in group["params"]:
                state = self.optimizer.state.get(p, {})
                for key, value in state.items():
                    if isinstance(value, Tensor) and value.device != device:
                        state[key] = value.to(device)

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

    def __call__(self, x, y, last: bool = False) -> dict:
        """One training step on the batch ``(x, y)``; returns the body's values for this batch (static
        tensors after capture: read them before the next step). ``last``: the epoch's last batch, which
        may be shorter without a warning."""
        self.steps += 1
        if self.capture and self.graph is None:
            if self.steps <= self.warmup:
                return self.graphs.warm_up(lambda: self._eager(x, y))
            try:
                hazards = self.check(x, y) if self.check is not None else []
            except Exception as error:  # the check itself failed: no capture on its word
                hazards = [f"the capture check failed: {type(error).__name__}: {error}"]
            if hazards:  # never captured: every step runs eagerly; say why once
                self.graphs = None
                warnings.warn(
                    f"the training step cannot be replayed from a CUDA graph ({hazards[0]}); it runs "
                    f"eagerly{SKIP}.",
                    RuntimeWarning,
                    stacklevel=2,
                )
            else:
                try:
                    self._capture(x, y)
                except Exception as error:  # go on eagerly with the same computation; say so once
                    self.graphs.synchronize()
                    self.graphs, self.graph = None, None
                    self.optimizer.zero_grad(set_to_none=True)  # whatever the failed capture left
                    warnings.warn(
                        f"CUDA graph capture failed ({type(error).__name__}: {error}); training goes on "
                        f"without it{SKIP}.",
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
            if not self.eager_after_capture and not last:
                warnings.warn(
                    f"a training batch of another shape than the captured one ({_shapes(y)[0][0]} against "
                    f"{tuple(self.static_y.shape)}) is stepped eagerly; drop the last, partial batch "
                    "(drop_last=True) to replay every step.",
                    RuntimeWarning,
                    stacklevel=2,
                )
            self.eager_after_capture += 1
        return self._eager(x, y)  # no CUDA, capture failed, or a batch of another shape


def _carry_step_count(checkpoint: dict, to_manual: bool) -> None:
    """Lightning counts a fit's optimiser steps apart for automatic and for manual optimisation: copy
    the count of the path that wrote ``checkpoint`` to the other's where that one is behind."""
    loop = checkpoint.get("loops", {}).get("fit_loop", {})
    automatic = (
        loop.get("epoch_loop.automatic_optimization.optim_progress", {}).get("optimizer", {}).get("step")
    )
    manual = loop.get("epoch_loop.manual_optimization.optim_step_progress")
    if not (isinstance(automatic, dict) and isinstance(manual, dict)):
        return
    source, target = (automatic, manual) if to_manual else (manual, automatic)
    for part in ("total", "current"):
        if target[part]["completed"] < source[part]["completed"]:
            target[part].update(ready=source[part]["completed"], completed=source[part]["completed"])


class GraphedPonderLitModule(FastPonderLitModule):
    """:class:`~pondernet_tutorial.lightning_module.PonderLitModule` whose training step (forward, loss,
    backward, clipping and Adam's update) is one :class:`GraphedStep`, replayed from a CUDA graph.

    Lightning's manual optimisation: Adam reads its learning rate from a tensor on the device
    (``capturable=True``), the plateau schedule is stepped after each epoch's validation, as Lightning
    steps it in automatic optimisation, and every ``fit`` captures afresh (a new fit has a new
    optimiser, learning-rate tensor and schedule; the weights may have moved). After ``fit`` the graph
    and its memory are let go, so the module can be copied, pickled and trained again.

    The step adds its logged values to :class:`FastPonderLitModule`'s tensor of sums inside the graph,
    so the host has nothing to do for them. Before the capture, :meth:`capture_hazards` looks for what
    a graph would not replay as the step ran eagerly.

    Args: those of :class:`FastPonderLitModule`, and
        graphs: how to capture; ``None``: :func:`graphs_for` the device (CUDA's on a CUDA device, and
            eager steps with the same computation elsewhere).

    Attributes:
        graph_replays: steps of the last ``fit`` replayed from a captured graph (0: none was captured,
            or capture failed and every step ran eagerly).
    """

    def __init__(self, *args, graphs: CudaGraphs | None = None, **kwargs):
        super().__init__(*args, **kwargs)
        self.hparams.pop("graphs", None)  # how the step is replayed is no setting of the model
        self.automatic_optimization = False  # the replayed step optimises by hand
        self.graphs = graphs
        self._graphed: GraphedStep | None = None
        self.graph_replays = 0
        self.trainer_clip: float | None = None  # set by fast_module: given back to the Trainer after fit

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
        super().on_fit_end()
        self.release_graph()
        if self.trainer_clip is not None:  # the Trainer's own clipping, which the graphed step did
            self.trainer.gradient_clip_val = self.trainer_clip

    def capture_hazards(self, x, y) -> list[str]:
        """What in the forward pass and the loss (eagerly, even where they are compiled) a CUDA graph
        would not replay as it ran: :func:`~.capture_check.capture_hazards`. No gradient, sum, buffer
        (a batch norm's statistics) or random stream is changed by the check."""
        compiled = self.__dict__.pop("unroll_and_loss", None)  # the eager one is the class's
        buffers = [(b, b.clone()) for b in self.buffers()]
        devices = [self.device] if self.device.type == "cuda" else []
        try:
            with torch.no_grad(), torch.random.fork_rng(devices=devices):
                return capture_hazards(lambda: self.step_values(x, y), self.device)
        finally:
            if compiled is not None:
                self.unroll_and_loss = compiled
            with torch.no_grad():
                for buffer, saved in buffers:
                    buffer.copy_(saved)

    def on_save_checkpoint(self, checkpoint: dict) -> None:
        """Saved as the plain module saves: Adam without the capture's settings (a float learning rate,
        ``capturable=False``) and the step count where automatic optimisation keeps it, so that either
        path resumes it (the capture puts the settings back)."""
        for state in checkpoint.get("optimizer_states", []):
            for group in state.get("param_groups", []):
                group["lr"], group["capturable"] = float(group["lr"]), False
        for state in checkpoint.get("lr_schedulers", []):
            if "_last_lr" in state:
                state["_last_lr"] = [float(lr) for lr in state["_last_lr"]]
        _carry_step_count(checkpoint, to_manual=False)

    def on_load_checkpoint(self, checkpoint: dict) -> None:
        _carry_step_count(checkpoint, to_manual=True)  # a plain module's checkpoint counted automatically

    def configure_optimizers(self):
        lr = torch.tensor(float(self.hparams.lr), device=self.device)  # the captured update reads a tensor
        optimizer = torch.optim.Adam(self.parameters(), lr=lr, capturable=True, foreach=True)
        scheduler = self.plateau_schedule(optimizer)
        return ([optimizer], [scheduler]) if scheduler is not None else optimizer

    def training_step(self, batch, batch_idx: int) -> Tensor:
        x, y = batch
        optimizer = self.optimizers()
        if self._graphed is None:
            graphs = self.graphs if self.graphs is not None else graphs_for(self.device)
            self.start_sums()  # before the capture: the graph writes into them
            self._graphed = GraphedStep(
                self.summed_values,
                self.parameters(),
                optimizer.optimizer,
                self.grad_clip,
                graphs=graphs,
                buffers=[self._fit_sums],
                check=self.capture_hazards,
            )
        before = getattr(optimizer, "_on_before_step", None)  # Lightning's count of optimiser steps
        if before is not None:
            before()
        values = self._graphed(x, y, last=batch_idx + 1 == self.trainer.num_training_batches)
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


def graphs_for(device: torch.device) -> CudaGraphs | None:
    """How a training step on ``device`` is captured: CUDA's graphs on a CUDA device; elsewhere none,
    and every step runs eagerly. (The tests put their stand-in in its place.)"""
    return CudaGraphs() if device.type == "cuda" else None


GRAPH_PRECISIONS_EXCLUDED = ("16-mixed", "16")  # GradScaler's step waits for the device: not capturable


def graph_blockers(trainer: L.Trainer, precision=None) -> list[str]:
    """What a CUDA graph of the training step needs and ``trainer`` lacks (empty: nothing): one CUDA
    device in one process, and a precision without a gradient scaler. A bf16 precision on a GPU
    without bf16 tensor cores gets a warning (it is slower there than 32-true)."""
    from lightning.pytorch.accelerators import CUDAAccelerator
    from lightning.pytorch.strategies import SingleDeviceStrategy

    precision = str(precision if precision is not None else trainer.precision)
    reasons = []
    on_cuda = isinstance(trainer.accelerator, CUDAAccelerator)
    if not on_cuda:
        reasons.append("a CUDA device")
    if trainer.world_size != 1 or not isinstance(
        trainer.strategy, SingleDeviceStrategy
    ):  # ddp, even on one device
        reasons.append("exactly one device in one process")
    if precision in GRAPH_PRECISIONS_EXCLUDED:
        reasons.append("a precision without a gradient scaler (not 16-mixed)")
    if on_cuda and precision.startswith("bf16") and slow_bf16():
        major, minor = torch.cuda.get_device_capability()
        print(
            f"warning: {torch.cuda.get_device_name()} (compute capability {major}.{minor}) has no bf16 "
            f"tensor cores: precision {precision} is slower there than 32-true; choose 32-true "
            "(--precision 32-true on the command line), or 16-mixed (without the CUDA graph).",
            file=sys.stderr,
        )
    return reasons


def slow_bf16() -> bool:
    """bf16 runs without tensor cores of its own (and cuDNN's bf16 convolutions) on a GPU older than
    compute capability 8.0 (Ampere): a T4, Colab's free GPU, is 7.5."""
    return torch.cuda.is_available() and torch.cuda.get_device_capability() < (8, 0)


def fast_module(module: PonderLitModule, trainer: L.Trainer, fast: bool | None = None) -> PonderLitModule:
    """The module that ``trainer`` fits in ``module``'s place: ``module`` itself, or on one CUDA device
    a :class:`GraphedPonderLitModule` over the very same model (its weights are ``module``'s), with the
    plain module's settings and the Trainer's gradient clipping.

    ``fast``: ``None`` takes the fast path wherever it can, ``False`` never, ``True`` or a
    ``ValueError`` that says what is missing. A module that is already fast is fitted as it is; a
    subclass of the plain module (its own training step) is too, with one line that says so.
    """
    if fast is False or isinstance(module, FastPonderLitModule):
        return module
    from lightning.pytorch.callbacks import GradientAccumulationScheduler

    missing = graph_blockers(trainer)
    if trainer.gradient_clip_algorithm not in (None, "norm"):
        missing.append("gradient clipping by norm (gradient_clip_algorithm='norm')")
    if trainer.accumulate_grad_batches != 1 or any(
        isinstance(c, GradientAccumulationScheduler) for c in trainer.callbacks
    ):
        missing.append("no gradient accumulation (manual optimisation has none)")
    own_step = type(module) is not PonderLitModule
    if own_step:
        missing.append(f"the plain PonderLitModule, not {type(module).__name__} (its own training step)")
    if missing and fast:
        raise ValueError(f"fit(fast=True) needs {', '.join(missing)}: drop fast=True.")
    if own_step and len(missing) == 1:  # the fast path was there but for the subclass: say so
        name = type(module).__name__
        print(
            f"fit: {name} trains eagerly: the fast path wraps only the plain PonderLitModule.",
            file=sys.stderr,
        )
    if missing:
        return module
    graphed = GraphedPonderLitModule(  # its graphs: graphs_for(the device it trains on)
        module.model, **module.hparams, grad_clip=float(trainer.gradient_clip_val or 0.0)
    )
    graphed.trainer_clip = trainer.gradient_clip_val  # given back after fit
    trainer.gradient_clip_val = None  # the graphed step clips (Lightning's manual optimisation does not)
    return graphed
