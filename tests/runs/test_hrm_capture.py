"""HRM's halting head (``methods/hrm.py``, tested in ``tests/core/test_hrm.py``) under the run
machinery: its training step is capturable in a CUDA graph.

Deliberate break this test catches (tried): the exploration's draws made on the CPU and moved to the
device (``torch.rand(batch).to(device)``).
"""

import pytest
import torch


@pytest.mark.parametrize("step", ["parity_gru", "mnist_refine", "pointer_attention"])
def test_the_training_step_is_capturable(step, monkeypatch):
    """The exploration's draws are on the device and nothing waits for the host: a CUDA graph of the
    training step replays it (checked on the meta device, as tests/runs/test_capture_safety.py does)."""
    import importlib

    import torch.utils._foreach_utils as foreach_utils

    from pondernet_tutorial.capture_check import capture_hazards
    from pondernet_tutorial.data.pointer import pointer_batch
    from pondernet_tutorial.fast_path import GraphedStep
    from pondernet_tutorial.runs.module import GraphedRunModule

    adam = importlib.import_module("torch.optim.adam")
    monkeypatch.setattr(adam, "_get_capturable_supported_devices", lambda *a, **k: ["meta"])
    monkeypatch.setattr(foreach_utils, "_get_foreach_kernels_supported_devices", lambda: ["cuda", "meta"])
    options, classes, x = {
        "parity_gru": ({"n_elements": 8, "hidden_size": 16}, 2, torch.randint(-1, 2, (12, 8)).float()),
        "mnist_refine": ({"hidden_size": 16}, 10, torch.rand(12, 1, 28, 28)),
        "pointer_attention": ({"n_slots": 8}, 8, pointer_batch(12, 8, (1, 4))[0]),
    }[step]
    method_options = {"max_steps": 4, "exploration": 0.5}
    module = GraphedRunModule(
        step, classes, step_options=options, method="hrm", method_options=method_options
    )
    module.to("meta")
    module.start_sums()
    optimizer = torch.optim.Adam(module.parameters(), lr=torch.tensor(0.01), capturable=True, foreach=True)
    optimizer.param_groups[0]["lr"] = torch.tensor(0.01, device="meta")
    graphed = GraphedStep(module.summed_values, module.parameters(), optimizer, buffers=[module._fit_sums])
    x, y = x.to("meta"), torch.randint(0, classes, (len(x),)).to("meta")
    assert capture_hazards(lambda: graphed._update(x, y), "meta") == []
