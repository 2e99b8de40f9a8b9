"""The CUDA-graph path, tested without a GPU: a stand-in graph on the CPU.

A CUDA graph records the kernels of one training step once and replays them on the same memory: the
static batch, the parameters and their gradients, the optimiser's state and its learning-rate tensor.
:class:`StandInGraphs` does the same with a closure: capture records the step without applying it,
and each replay runs it again on the captured tensors, writing its outputs and gradients into the
memory seen at capture and reading the learning rates captured then. So it fails where a real graph
would train wrongly: a batch not copied into the static tensors, a graph kept from an earlier ``fit``
(an old optimiser), a learning-rate cut that a schedule wrote into a new object instead of the
captured tensor.

Deliberate breaks these tests catch (each was tried):
- ``GraphedStep.__call__`` without the static copy of the batch: test_graphed_training_equals_eager;
- ``GraphedPonderLitModule.on_fit_start`` (fast_path) not releasing the graph: test_a_second_fit_captures_again;
- ``GraphedStep.sync_learning_rates`` doing nothing: test_a_learning_rate_cut_reaches_the_graph;
- the eager step after capture setting the gradients to None:
  test_a_batch_of_another_shape_is_stepped_eagerly_into_the_captured_gradients;
- ``on_fit_end`` not releasing the graph: test_the_trained_module_copies_and_pickles;
- neither ``on_fit_start`` nor ``on_fit_end`` releasing it: test_a_second_fit_captures_again;
- the decision reading no world size: test_the_graph_needs_one_device_in_one_process;
- no bf16 check: test_bf16_on_a_gpu_without_bf16_tensor_cores_says_so;
- ``metadata.json``'s ``cuda_graph`` set for any graphed module (as before issue 30), or the speed from
  the whole epoch: test_the_metadata_says_whether_a_graph_ran_and_the_speed_is_the_training_steps_own;
- the epoch's sums handed to the metrics without the division by the count:
  test_graphed_training_matches_lightnings_automatic_optimisation.

What a stand-in graph cannot see (a host sync, a CPU random number, a Python counter) is found by
logging the step's operations: test_capture_safety.py.

Not tested here, for want of a GPU: the side stream of the warm-up, ``record_stream``, and a capture
by CUDA itself (:class:`~pondernet_tutorial.fast_path.CudaGraphs`).
"""

import copy
import pickle

import lightning as L
import pytest
import torch
from stand_in_graphs import StandInGraphs, capturable_adam_on_the_cpu  # noqa: F401 (a fixture)
from tiny_parity import parity, quiet_trainer
from torch.utils.data import DataLoader, TensorDataset

from pondernet_tutorial.fast_path import GraphedStep
from pondernet_tutorial.runs.module import GraphedRunModule, RunModule

METHODS = {
    "pondernet": {"max_steps": 5, "lambda_p": 0.3},
    "act": {"max_steps": 5, "tau": 0.01, "halting_bias": -1.0, "eval_max_steps": 8},
}


def module(graphed, graphs=None, seed=0, method="pondernet", **options):
    torch.manual_seed(seed)
    cls = GraphedRunModule if graphed else RunModule  # the run's module, its step graphed or not
    extra = {"graphs": graphs} if graphed else {}
    return cls(
        "parity_gru",
        2,
        step_options={"n_elements": 8, "hidden_size": 16},
        method=method,
        method_options=METHODS[method],
        grad_clip=0.05,
        lr=0.01,
        lr_patience=0,
        lr_factor=0.5,
        **extra,
        **options,
    )


class LastGradients(L.Callback):
    """The gradients that ``.grad`` shows after each training batch (Lightning lets them go at the end)."""

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        self.grads = [None if p.grad is None else p.grad.clone() for p in pl_module.parameters()]


def fit(m, epochs=3, n=512, drop_last=True, sizes=None, callbacks=()):
    x, y = parity(n, 5)
    vx, vy = parity(128, 6)
    train = DataLoader(TensorDataset(x, y), batch_size=64, drop_last=drop_last)
    if sizes is not None:  # batches of these sizes, in this order
        ends = torch.tensor(sizes).cumsum(0).tolist()
        train = DataLoader(
            [(x[end - size : end], y[end - size : end]) for size, end in zip(sizes, ends)], batch_size=None
        )
    trainer = quiet_trainer(max_epochs=epochs, num_sanity_val_steps=0, callbacks=list(callbacks))
    trainer.fit(m, train, DataLoader(TensorDataset(vx, vy), batch_size=64))
    return trainer


def assert_same_weights(a, b):
    for (name, p), (_, q) in zip(a.named_parameters(), b.named_parameters()):
        torch.testing.assert_close(p, q, rtol=0, atol=0, msg=name)


def test_graphed_training_equals_eager():
    """Warm-up, capture and replays give, bit for bit, the weights of the same manual step run eagerly
    (capturable Adam with a tensor learning rate, clipping, the plateau schedule)."""
    graphs = StandInGraphs()
    eager, graphed = module(True), module(True, graphs)
    runs = [fit(eager), fit(graphed)]
    assert graphs.warm_ups == 3 and graphs.captures == 1 and graphs.replays == 24 - 3
    assert graphed.graph_replays == 24 - 3 and eager.graph_replays == 0
    assert_same_weights(eager, graphed)
    lrs = [float(r.optimizers[0].param_groups[0]["lr"]) for r in runs]
    assert lrs[0] == lrs[1] < 0.01  # the schedule cut the rate, in both
    for name in ("train/loss", "train/acc", "val/acc"):
        torch.testing.assert_close(runs[0].callback_metrics[name], runs[1].callback_metrics[name])


@pytest.mark.parametrize("method", sorted(METHODS))
def test_graphed_training_matches_lightnings_automatic_optimisation(method):
    """The manual step (capturable Adam, tensor learning rate, the schedule stepped by hand) trains as
    the run's module (:class:`RunModule`, its own clipping) does under Lightning's automatic
    optimisation."""
    automatic, graphed = module(False, method=method), module(True, StandInGraphs(), method=method)
    runs = [fit(automatic), fit(graphed)]
    for (name, a), (_, b) in zip(automatic.named_parameters(), graphed.named_parameters()):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5, msg=name)  # capturable Adam rounds apart
    assert runs[0].global_step == runs[1].global_step == 24
    lrs = [float(r.optimizers[0].param_groups[0]["lr"]) for r in runs]
    assert lrs[1] == pytest.approx(lrs[0])  # the same schedule (a float32 tensor in one)
    # the same epoch means: summed in the step and handed to the metrics once an epoch, against six
    # metric updates a step
    names = [n for n in runs[0].callback_metrics if n.startswith("train/")]
    assert len(names) == len(automatic.train_metrics)  # one per training metric
    for name in names:
        torch.testing.assert_close(runs[0].callback_metrics[name], runs[1].callback_metrics[name], msg=name)


def test_a_second_fit_captures_again():
    """A second ``fit`` has a new optimiser, learning-rate tensor and schedule: the graph of the first
    one must not be replayed (it would step the old optimiser on memory that may be gone)."""
    graphs = StandInGraphs()
    eager, graphed = module(True), module(True, graphs)
    for m in (eager, graphed):
        fit(m, epochs=2)
        fit(m, epochs=2)
    assert graphs.captures == 2
    assert_same_weights(eager, graphed)


@pytest.mark.slow
def test_a_learning_rate_cut_reaches_the_graph(monkeypatch):
    """Older PyTorch's ReduceLROnPlateau sets a new float instead of writing into the tensor: the cut
    must still reach the tensor that the captured update reads."""

    def older_update(group, key, value):
        group[key] = float(value)

    monkeypatch.setattr(torch.optim.lr_scheduler, "_update_param_group_val", older_update)
    eager, graphed = module(True), module(True, StandInGraphs())
    fit(eager, epochs=4)
    trainer = fit(graphed, epochs=4)
    for (name, p), (_, q) in zip(eager.named_parameters(), graphed.named_parameters()):
        # eager Adam reads the float, the graph the tensor: the same rate, rounded apart
        torch.testing.assert_close(p, q, rtol=1e-5, atol=1e-5, msg=name)
    assert float(trainer.optimizers[0].param_groups[0]["lr"]) < 0.01


def test_a_failed_capture_goes_on_eagerly_with_one_warning():
    eager, graphed = module(True), module(True, StandInGraphs(fail_capture=True))
    fit(eager)
    with pytest.warns(RuntimeWarning, match="CUDA graph capture failed"):
        fit(graphed)
    assert_same_weights(eager, graphed)
    assert graphed.graph_replays == 0


@pytest.mark.parametrize("fails", [False, True])
def test_the_metadata_says_whether_a_graph_ran_and_the_speed_is_the_training_steps_own(
    tmp_path, monkeypatch, fails
):
    """``metadata.json``'s ``cuda_graph`` is true only when a graph was captured and replayed, and its
    training speed leaves the validation out (here a validation made 0.3 s slower)."""
    import time

    import pandas as pd

    from pondernet_tutorial.runs import training
    from pondernet_tutorial.runs.config import TrainConfig

    build = training.make_module

    def graphed_module(config, graphed=False):
        m = build(config, graphed=True)
        m.graphs = StandInGraphs(fail_capture=fails)
        start = m.on_validation_epoch_start
        m.on_validation_epoch_start = lambda: time.sleep(0.3) or start()
        return m

    monkeypatch.setattr(training, "make_module", graphed_module)
    config = TrainConfig.from_options(
        experiment="parity-interpolation",
        output_dir=str(tmp_path),
        progress_bar=False,
        epochs=2,
        train_subset=512,  # 4 batches an epoch: 3 warm-up steps, then the capture
        step_options={"hidden_size": 16},
        max_steps=6,
        compile=False,
    )
    if fails:
        with pytest.warns(RuntimeWarning, match="CUDA graph capture failed"):
            _, metadata = training.train(config)
    else:
        _, metadata = training.train(config)
    assert metadata["cuda_graph"] is not fails
    history = pd.read_csv(config.run_dir / "history.csv")
    assert (history["epoch_time_s"] - history["train_time_s"] >= 0.3).all()
    speed = metadata["train_samples_per_epoch"] / history["train_time_s"].median()
    assert metadata["train_samples_per_s"] == pytest.approx(speed, rel=0.01)


def test_a_batch_of_another_shape_is_stepped_eagerly_into_the_captured_gradients():
    """A batch of another shape after the capture is stepped eagerly, with a warning, into the
    gradients' captured memory: the weights are those of eager training, and ``.grad`` after the
    replays that follow is the last step's, not the eager step's."""
    sizes = [64] * 5 + [32] + [64] * 3
    graphs = StandInGraphs()
    eager, graphed = module(True), module(True, graphs)
    seen = [LastGradients(), LastGradients()]
    fit(eager, epochs=1, n=sum(sizes), sizes=sizes, callbacks=[seen[0]])
    with pytest.warns(RuntimeWarning, match="another shape"):
        fit(graphed, epochs=1, n=sum(sizes), sizes=sizes, callbacks=[seen[1]])
    assert graphs.replays == 5
    assert_same_weights(eager, graphed)
    assert all(g is not None for g in seen[0].grads)
    for a, b in zip(seen[0].grads, seen[1].grads):
        torch.testing.assert_close(a, b, rtol=0, atol=0)


def test_the_trained_module_copies_and_pickles():
    """After ``fit`` the graph and its memory are let go: the module can be copied and pickled."""
    graphed = module(True, StandInGraphs())
    fit(graphed, epochs=1)
    assert graphed._graphed is None
    copy.deepcopy(graphed)
    pickle.dumps(graphed)


def test_the_step_without_a_device_runs_eagerly():
    """Without CUDA and without a stand-in, the graphed module's step is the same computation, eager."""
    graphed = module(True)
    fit(graphed, epochs=1)
    assert graphed.automatic_optimization is False


def test_a_step_returns_the_capture_batchs_values_at_its_replay():
    """The first replay is the capture's batch: its loss is returned, not the capture's placeholder."""
    params = [torch.nn.Parameter(torch.tensor([1.0, 2.0]))]
    optimizer = torch.optim.Adam(params, lr=torch.tensor(0.1), capturable=True, foreach=True)
    step = GraphedStep(
        lambda x, y: {"loss": ((params[0] * x).sum() - y) ** 2},
        params,
        optimizer,
        warmup=0,
        graphs=StandInGraphs(),
    )
    out = step(torch.tensor([1.0, 1.0]), torch.tensor(0.0))
    assert float(out["loss"]) == 9.0 and float(params[0][0]) < 1.0


class FakeTrainer:
    """What the CUDA-graph decision reads of a Trainer: its accelerator, world size and strategy."""

    def __init__(self, world_size=1):
        from lightning.pytorch.accelerators import CUDAAccelerator
        from lightning.pytorch.strategies import SingleDeviceStrategy

        self.accelerator, self.world_size = CUDAAccelerator(), world_size
        self.strategy = SingleDeviceStrategy("cpu")


def test_the_graph_needs_one_device_in_one_process(monkeypatch):
    """ddp with one device on each of two nodes has one device per process but two processes."""
    from pondernet_tutorial.runs.build import use_cuda_graph
    from pondernet_tutorial.runs.config import TrainConfig

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda *a: (9, 0))
    config = TrainConfig(experiment="parity-interpolation", quick=True)
    assert use_cuda_graph(config, FakeTrainer(world_size=1)) is True
    assert use_cuda_graph(config, FakeTrainer(world_size=2)) is False
    with pytest.raises(ValueError, match="exactly one device in one process"):
        use_cuda_graph(
            TrainConfig(experiment="parity-interpolation", quick=True, cuda_graph=True), FakeTrainer(2)
        )


def test_bf16_on_a_gpu_without_bf16_tensor_cores_says_so(monkeypatch, capsys):
    """A T4 (compute capability 7.5, Colab's free GPU) emulates bf16: slower than 32-true; one line
    says so and names what to pass instead. An H100 (9.0) hears nothing."""
    from pondernet_tutorial.runs.build import use_cuda_graph
    from pondernet_tutorial.runs.config import TrainConfig

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda *a: "Tesla T4")
    config = TrainConfig(experiment="parity-interpolation", quick=True, precision="bf16-mixed")
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda *a: (7, 5))
    use_cuda_graph(config, FakeTrainer())
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Tesla T4" in err and "--precision 32-true" in err
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda *a: (9, 0))
    use_cuda_graph(config, FakeTrainer())
    assert capsys.readouterr().err == ""
