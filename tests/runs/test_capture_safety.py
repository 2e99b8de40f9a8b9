"""What a CUDA graph of the training step cannot replay, found on the CPU by logging the step's operations.

The stand-in graph of ``test_cuda_graph.py`` replays a step by running its Python again: a step that
reads a value on the host, draws random numbers on the CPU or keeps a Python counter replays happily
there and not in a real graph. :func:`~pondernet_tutorial.capture_check.capture_hazards` logs the
operations of the captured step (the graphed module's body, backward, clipping and Adam's update) with
a dispatch mode instead. The step runs on PyTorch's ``meta`` device, standing in for the GPU, so that
a tensor on the CPU (the host) is told apart from one on the device.

Deliberate breaks these tests catch (each was tried):
- ``CaptureCheck`` without the host-sync rule: test_a_capture_hazard_is_found[item_branch];
- without the boolean-mask rule: test_a_capture_hazard_is_found[boolean_mask] (meta's own error instead);
- without the device rule: test_a_capture_hazard_is_found[cpu_random] and
  test_a_learning_rate_restored_on_the_cpu_is_moved_to_the_device;
- ``capture_hazards`` not comparing the runs' logs: test_a_capture_hazard_is_found[python_counter];
- ``GraphedStep.optimizer_tensors_to_device`` leaving the learning rate where it is:
  test_a_learning_rate_restored_on_the_cpu_is_moved_to_the_device.
"""

import importlib
import re

import pytest
import torch
import torch.utils._foreach_utils as foreach_utils

from pondernet_tutorial.capture_check import capture_hazards
from pondernet_tutorial.data.parity import parity_batch
from pondernet_tutorial.data.pointer import pointer_batch
from pondernet_tutorial.fast_path import GraphedStep
from pondernet_tutorial.runs.module import GraphedRunModule

STEPS = {  # a step function, its options, its classes and a batch of its inputs
    "parity_gru": ({"n_elements": 8, "hidden_size": 16}, 2, lambda: parity_batch(32, 8, (1, 8))[:2]),
    "parity_rnn": ({"n_elements": 8, "hidden_size": 16}, 2, lambda: parity_batch(32, 8, (1, 8))[:2]),
    "mnist_mlp": ({"hidden_size": 16, "embedding_size": 16}, 10, lambda: mnist_batch()),
    "mnist_refine": ({"hidden_size": 16}, 10, lambda: mnist_batch()),
    "mnist_cnn": ({"embedding_size": 16}, 10, lambda: mnist_batch()),
    "pointer_attention": ({"n_slots": 8}, 8, lambda: pointer_batch(32, 8, (1, 4))[:2]),
}
METHODS = {"pondernet": {"max_steps": 4}, "act": {"max_steps": 4}, "fixed": {"max_steps": 3}}


def mnist_batch():
    return torch.rand(32, 1, 28, 28), torch.randint(0, 10, (32,))


@pytest.fixture(autouse=True)
def meta_as_the_device(monkeypatch):
    """The meta device runs the step's shapes without data; capturable Adam and the foreach clipping
    are told that it is a device of theirs."""
    monkeypatch.setattr(
        importlib.import_module("torch.optim.adam"),
        "_get_capturable_supported_devices",
        lambda *a, **k: ["meta"],
    )
    monkeypatch.setattr(foreach_utils, "_get_foreach_kernels_supported_devices", lambda: ["cuda", "meta"])


def graphed_step(step="parity_gru", method="pondernet", wrap=None, lr_on_the_cpu=False):
    """The step that the graphed module captures, on the meta device: ``(step, batch)``."""
    options, n_classes, batch = STEPS[step]
    module = GraphedRunModule(
        step, n_classes, step_options=options, method=method, method_options=METHODS[method], grad_clip=0.5
    )
    if wrap is not None:  # a step of a user's: the module's values, changed
        module.step_values = wrap(module.step_values)
    module.to("meta")
    module.start_sums()  # zero sums on the module's device, which the step adds to
    optimizer = torch.optim.Adam(module.parameters(), lr=torch.tensor(0.01), capturable=True, foreach=True)
    if not lr_on_the_cpu:
        optimizer.param_groups[0]["lr"] = torch.tensor(0.01, device="meta")
    graphed = GraphedStep(
        module.summed_values, module.parameters(), optimizer, grad_clip=0.5, buffers=[module._fit_sums]
    )
    x, y = (t.to("meta") for t in batch())
    return graphed, lambda: graphed._update(x, y)


@pytest.mark.parametrize("method", sorted(METHODS))
@pytest.mark.parametrize("step", sorted(STEPS))
def test_the_real_steps_are_capturable(step, method):
    """Every step function under every halting method: no host sync, no data-dependent shape, nothing
    on the host, no generator of its own, the same operations at every run."""
    _, run = graphed_step(step, method)
    assert capture_hazards(run, "meta") == []


def item_branch(values):
    def body(x, y):
        out = values(x, y)
        if out["loss"].item() > 1.0:  # a loss cap, decided on the host
            out["loss"] = out["loss"] * 0.5
        return out

    return body


def boolean_mask(values):
    def body(x, y):
        out = values(x, y)
        wrong = out["acc"] < 0.5  # a ponder cost on the samples it gets wrong
        out["loss"] = out["loss"] + 0.01 * out["expected_steps"][wrong].mean()
        return out

    return body


def cpu_random(values):
    def body(x, y):
        return values(x + 0.01 * torch.randn(x.shape).to(x.device), y)  # noise drawn on the CPU

    return body


class Counter:
    def __init__(self):
        self.calls = 0

    def __call__(self, values):
        def body(x, y):
            self.calls += 1
            out = values(x, y)
            out["loss"] = out["loss"] * min(1.0, self.calls / 100)  # a warm-up counted in Python
            return out

        return body


BODIES = {
    "item_branch": (item_branch, "the host waits"),
    "boolean_mask": (boolean_mask, "boolean mask"),
    "cpu_random": (cpu_random, "random numbers drawn on cpu"),
    "python_counter": (Counter(), "runs 2 and 3 differ"),
}


@pytest.mark.parametrize("body", sorted(BODIES))
def test_a_capture_hazard_is_found(body):
    """The four steps of issue 30 that the stand-in graph replayed happily."""
    wrap, message = BODIES[body]
    _, run = graphed_step(wrap=wrap)
    hazards = capture_hazards(run, "meta")
    assert any(re.search(message, hazard) for hazard in hazards), hazards


def test_a_generator_of_the_steps_own_is_found():
    generator = torch.Generator().manual_seed(0)

    def own_generator(values):
        def body(x, y):
            noise = torch.rand(x.shape, generator=generator).to(x.device)
            return values(x + noise, y)

        return body

    _, run = graphed_step(wrap=own_generator)
    assert any("generator of its own" in hazard for hazard in capture_hazards(run, "meta"))


def test_a_learning_rate_restored_on_the_cpu_is_moved_to_the_device():
    """Lightning restores a resumed run's learning rate as a CPU tensor: the captured update would read
    it once, and later cuts would never reach the replays. The capture moves it to the device."""
    graphed, run = graphed_step(lr_on_the_cpu=True)
    assert any("on cpu" in hazard for hazard in capture_hazards(run, "meta"))
    graphed.optimizer_tensors_to_device()  # what GraphedStep does at capture
    lr = graphed.optimizer.param_groups[0]["lr"]
    assert lr.device.type == "meta"
    assert all(v.device.type == "meta" for s in graphed.optimizer.state.values() for v in s.values())
    assert capture_hazards(run, "meta") == []


def test_host_tensors_made_from_a_constant_pass_the_ones_kept_outside_or_changing_do_not():
    """``p[-1] = 1.0`` makes a CPU scalar in the step, the same at every run: a graph records it
    rightly. A CPU tensor kept outside the step (a learning rate) is read once at capture; one made
    from a Python counter changes from run to run."""
    weights, rate, calls = torch.zeros(3, device="meta"), torch.tensor(0.1), [0]

    def constant():
        weights.add_(torch.tensor(1.0))

    def kept_outside():
        weights.add_(rate)

    def counted():
        calls[0] += 1
        weights.add_(torch.tensor(float(calls[0])))

    assert capture_hazards(constant, "meta") == []
    assert any("did not make" in hazard for hazard in capture_hazards(kept_outside, "meta"))
    assert any("differ" in hazard for hazard in capture_hazards(counted, "meta"))
