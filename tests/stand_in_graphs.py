"""A CUDA graph on the CPU, for the tests of the fast path: :class:`StandInGraphs` stands in for
:class:`~pondernet_tutorial.fast_path.CudaGraphs` and replays the recorded step on the captured memory
by running its Python again (what such a replay cannot see, :mod:`pondernet_tutorial.capture_check`
finds); :func:`capturable_adam_on_the_cpu` lets ``Adam(capturable=True)`` run there."""

import importlib

import pytest
import torch


class StandInGraph:
    """What a captured CUDA graph does, on the CPU: replay the recorded step on the captured memory."""

    def __init__(self, owner, step, out, optimizer, parameters):
        self.owner, self.step, self.out, self.optimizer = owner, step, out, optimizer
        self.parameters = list(parameters)
        self.grads = [p.grad for p in self.parameters]  # the memory the recorded backward writes
        self.lrs = [group["lr"] for group in optimizer.param_groups]  # the tensors the update reads

    def replay(self):
        self.owner.replays += 1
        visible = [p.grad for p in self.parameters]
        live = [group["lr"] for group in self.optimizer.param_groups]
        for group, lr in zip(self.optimizer.param_groups, self.lrs):
            group["lr"] = lr
        for p in self.parameters:
            p.grad = None
        out = self.step()
        for p, captured in zip(self.parameters, self.grads):
            if captured is not None and p.grad is not None:
                captured.copy_(p.grad)
        for p, grad in zip(self.parameters, visible):  # a graph never re-points .grad
            p.grad = grad
        for group, lr in zip(self.optimizer.param_groups, live):
            group["lr"] = lr
        for name, value in out.items():
            self.out[name].copy_(value)


class StandInGraphs:
    """The stand-in for :class:`~pondernet_tutorial.fast_path.CudaGraphs`."""

    def __init__(self, fail_capture=False):
        self.fail_capture, self.warm_ups, self.captures, self.replays = fail_capture, 0, 0, 0

    def warm_up(self, step):
        self.warm_ups += 1
        return step()

    def capture(self, step, optimizer=None, parameters=(), buffers=()):
        """Record without applying: the step runs once for its outputs' shapes, and every tensor it
        changed (parameters, optimiser state, the sums of the logged values) is put back, as a capture
        changes nothing."""
        if self.fail_capture:
            raise RuntimeError("operation not permitted when stream is capturing")
        written = list(parameters) + list(buffers)
        saved = [p.detach().clone() for p in written]
        state = {p: {k: v.clone() for k, v in s.items()} for p, s in optimizer.state.items()}
        out = {name: value.clone() for name, value in step().items()}
        with torch.no_grad():  # put back, in place: the step's tensors keep their memory
            for p, s in zip(written, saved):
                p.copy_(s)
            for p in list(optimizer.state):
                if p not in state:
                    del optimizer.state[p]
                for k, v in state.get(p, {}).items():
                    optimizer.state[p][k].copy_(v)
        self.captures += 1
        return StandInGraph(self, step, out, optimizer, parameters), out

    def synchronize(self):
        pass


@pytest.fixture(autouse=True)
def capturable_adam_on_the_cpu(monkeypatch):
    """Adam(capturable=True) refuses the CPU; its update is the same arithmetic there."""
    monkeypatch.setattr(
        importlib.import_module("torch.optim.adam"),
        "_get_capturable_supported_devices",
        lambda *a, **k: ["cpu"],
    )
