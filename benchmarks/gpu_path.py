"""The CUDA-graph path on a GPU, each check's results saved to ``--json`` as soon as they are measured:

* ``capture_check_cuda`` (first: the issue asks for it, and it is cheap): for every step function and
  halting method, the capture-safety check of the whole graphed step (forward, loss, backward,
  clipping, Adam) on the device, and then the step captured for real: two replays against two eager
  steps from the same weights, optimiser state and random stream (``passed``: 3 replays, the capture's
  own and these two, and weights within 1e-5 of the eager ones). The check's dispatch mode cannot see
  a sync inside native CUDA code, a pageable copy or a library's workspace allocation; a real capture
  fails on them, and shows here as a warning and no replays;
* ``resume``: a learning-rate cut after a resume, the graph against eager steps;
* ``second_fit``: a second fit in one process captures afresh.

``--paths`` also times training eagerly and graphed (off by default: ``fit_gpu.py`` measures it
through ``fit``). MNIST need not be on the machine: ``--synthetic`` serves random uint8 images of
MNIST's shape through the real data module (the speed of a training step does not depend on the
pixels). Parity is generated anyway.

    python benchmarks/gpu_path.py --synthetic --only capture_check_cuda --json capture.json
    python benchmarks/gpu_path.py --synthetic --json gpu.json

Prints each check's result; the numbers go to ``--json``.
"""

from __future__ import annotations

import argparse
import copy
import json
import platform
import sys
import tempfile
import time
import traceback
import warnings
from pathlib import Path

import lightning as L
import torch
import torchmetrics
from lightning.pytorch.callbacks import ModelCheckpoint

sys.path.insert(0, str(Path(__file__).parent))
from host_time import synthetic_mnist, timed_training  # noqa: E402

from pondernet_tutorial.fast_path import CudaGraphs, GraphedStep  # noqa: E402
from pondernet_tutorial.fitting import fit  # noqa: E402
from pondernet_tutorial.runs.build import make_datamodule  # noqa: E402
from pondernet_tutorial.runs.config import TrainConfig  # noqa: E402
from pondernet_tutorial.runs.module import GraphedRunModule  # noqa: E402

QUIET = {"enable_progress_bar": False, "enable_model_summary": False, "logger": False}


def speed(experiment: str, paths: dict, warmup: int, timed: int) -> dict:
    """Training samples per second of each path ``name -> (compiled, graphed)``."""
    out = {}
    for name, (compiled, graphed) in paths.items():
        module, result = timed_training(experiment, compiled, graphed, "cuda", warmup, timed)
        out[name] = {
            "samples_s": round(result["img_s"], 1),
            "ms_per_step": round(result["ms_per_step"], 3),
            "warmup_s": round(result["warmup_s"], 2),
            "replays": getattr(module, "graph_replays", 0),
        }
        print(f"{experiment} {name}: {out[name]}", flush=True)
    return out


class NoCapture(CudaGraphs):
    """Every step eager (the same computation as the graph's), on the GPU: capture refuses."""

    def capture(self, *args, **kwargs):
        raise RuntimeError("eager on purpose")


class Plateau(GraphedRunModule):
    """The plateau schedule sees the same validation accuracy every epoch: it cuts the learning rate
    after every epoch (patience 0), so every epoch after the resume has a new one."""

    def on_train_epoch_end(self):
        self.trainer.callback_metrics["val/acc"] = torch.tensor(0.5)
        super().on_train_epoch_end()


class Record(L.Callback):
    """The learning rate after every epoch, and where the learning rate lies when training starts."""

    def __init__(self):
        self.lrs, self.lr_device_at_start = [], None

    def on_train_start(self, trainer, pl_module):
        self.lr_device_at_start = str(getattr(trainer.optimizers[0].param_groups[0]["lr"], "device", "float"))

    def on_train_epoch_end(self, trainer, pl_module):
        self.lrs.append(float(trainer.optimizers[0].param_groups[0]["lr"]))

    def on_train_end(self, trainer, pl_module):  # the last weights, before fit() loads the best epoch's
        self.weights = {k: v.detach().clone() for k, v in pl_module.state_dict().items()}


MOVE_TO_DEVICE = GraphedStep.optimizer_tensors_to_device


def lr_as_before_issue_30(self):
    """GraphedStep's capture before issue 30: a float became a tensor on the device, a tensor stayed
    where it was (a CPU tensor restored from a checkpoint too); the rest as now."""
    kept = [group["lr"] for group in self.optimizer.param_groups]
    MOVE_TO_DEVICE(self)
    for group, lr in zip(self.optimizer.param_groups, kept):
        if isinstance(lr, torch.Tensor):
            group["lr"] = lr


def plateau_module(graphs, subset=2048):
    L.seed_everything(0, verbose=False)
    config = TrainConfig(
        experiment="parity-interpolation",
        compile=False,
        lr=0.003,
        lr_patience=0,
        lr_factor=0.5,
        train_subset=subset,
    )
    module = Plateau(
        step=config.step,
        n_classes=2,
        method=config.method,
        step_options=config.step_options,
        method_options=config.method_kwargs(),
        lr=config.lr,
        lr_schedule="plateau",
        lr_patience=0,
        lr_factor=0.5,
        grad_clip=config.grad_clip,
        graphs=graphs,
    )
    return config, module


def keep_last(folder) -> ModelCheckpoint:
    """A checkpoint of every epoch's end as ``folder/last.ckpt`` (``fit`` itself keeps the best epoch's)."""
    return ModelCheckpoint(dirpath=folder, save_last=True)


def resume_check(out: dict, save, first_epochs: int = 2, epochs: int = 6, subset: int = 2048) -> None:
    """Train 2 epochs, then resume the run from its ``last.ckpt`` to 6 in a new module, three ways:
    graphed, eager (capture refused), and graphed without moving the optimiser's tensors to the device
    (the code before issue 30). The graph must end on the eager weights."""
    with tempfile.TemporaryDirectory() as tmp:
        config, module = plateau_module(None, subset)
        datamodule = make_datamodule(config, test_subset=64)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            fit(
                module,
                datamodule,
                first_epochs,
                callbacks=[keep_last(Path(tmp) / "ckpt")],
                default_root_dir=tmp,
                **QUIET,
            )
        ckpt = torch.load(Path(tmp) / "ckpt" / "last.ckpt", map_location="cpu", weights_only=True)
        saved = ckpt["optimizer_states"][0]["param_groups"][0]["lr"]
        out["lr_in_checkpoint"] = f"{type(saved).__name__} {getattr(saved, 'device', '')}"
        # the checkpoint as it is, and the same with its learning rate as a CPU tensor (a checkpoint
        # moved to the CPU, or written by the graphed module before it saved Adam as the plain module
        # does: then with capturable=True, which a tensor learning rate needs in Adam's foreach update)
        variants = {"as_saved": Path(tmp) / "ckpt"}
        cpu = Path(tmp) / "cpu_lr"
        cpu.mkdir()
        moved = copy.deepcopy(ckpt)
        group = moved["optimizer_states"][0]["param_groups"][0]
        group["lr"], group["capturable"] = torch.tensor(float(saved)), True
        torch.save(moved, cpu / "last.ckpt")
        variants["lr_on_cpu"] = cpu
        for variant, folder in variants.items():
            weights = {}
            for way, graphs, fixed in (
                ("graphed", CudaGraphs(), True),
                ("eager", NoCapture(), True),
                ("graphed_unfixed", CudaGraphs(), False),
            ):
                if not fixed:  # the code before: only a float became a tensor; a CPU tensor stayed
                    GraphedStep.optimizer_tensors_to_device = lr_as_before_issue_30
                try:
                    _, module = plateau_module(graphs, subset)
                    record = Record()
                    scratch = Path(tmp) / f"{variant}-{way}"
                    scratch.mkdir()
                    (scratch / "last.ckpt").write_bytes((folder / "last.ckpt").read_bytes())
                    dm = make_datamodule(config, test_subset=64)
                    with warnings.catch_warnings():
                        warnings.simplefilter("ignore")
                        fit(
                            module,
                            dm,
                            epochs,
                            ckpt_path=scratch / "last.ckpt",
                            callbacks=[keep_last(scratch), record],
                            default_root_dir=scratch,
                            **QUIET,
                        )
                except Exception as error:  # this way's failure, said; the other ways go on
                    out[f"{variant}_{way}"] = f"{type(error).__name__}: {error}"
                    continue
                finally:
                    GraphedStep.optimizer_tensors_to_device = MOVE_TO_DEVICE
                weights[way] = record.weights
                out[f"{variant}_{way}"] = {
                    "lrs_after_each_epoch": record.lrs,
                    "lr_device_at_train_start": record.lr_device_at_start,
                    "replays": module.graph_replays,
                }
            for way in [w for w in ("graphed", "graphed_unfixed") if w in weights and "eager" in weights]:
                diff = max(
                    (weights[way][k] - weights["eager"][k]).abs().max().item() for k in weights["eager"]
                )
                out[f"{variant}_{way}"]["max_abs_weight_diff_vs_eager"] = diff
            print(json.dumps({k: v for k, v in out.items() if k.startswith(variant)}, indent=1), flush=True)
            save()


def second_fit_check(out: dict, save) -> None:
    """Two fits of one module in one process, graphed and eager: each fit captures afresh."""
    weights = {}
    for way, graphs in (("graphed", CudaGraphs()), ("eager", NoCapture())):
        config, module = plateau_module(graphs, 1024)
        replays = []
        for _ in range(2):
            record = Record()
            with warnings.catch_warnings(), tempfile.TemporaryDirectory() as tmp:
                warnings.simplefilter("ignore")
                dm = make_datamodule(config, test_subset=64)
                fit(module, dm, 2, callbacks=[record], default_root_dir=tmp, **QUIET)
            replays.append(module.graph_replays)
        weights[way] = record.weights
        out[way] = {"replays_per_fit": replays}
        save()
    out["max_abs_weight_diff"] = max(
        (weights["graphed"][k] - weights["eager"][k]).abs().max().item() for k in weights["eager"]
    )
    print("second fit:", out, flush=True)


REPLAY_TOLERANCE = 1e-5  # the replays' weights against the eager steps' (2 Adam steps of lr 0.001)


def replayed_against_eager(graphed: GraphedStep, x, y) -> dict:
    """``graphed``'s step captured for real and replayed twice, against two eager steps from the same
    state: the weights, Adam's state and the random stream (seeded alike before each step, so that
    dropout draws the same masks either way). Returns the replays (3: the capture's own and these
    two), the largest weight difference, the largest change the two steps made (its scale), and any
    warning (a capture that fails goes on eagerly, with one)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(graphed.warmup + 1):  # the eager warm-up, then the capture and its first replay
            graphed(x, y)
        start = [p.detach().clone() for p in graphed.parameters]
        state = {p: {k: v.clone() for k, v in s.items()} for p, s in graphed.optimizer.state.items()}
        after = {}
        for way in ("replayed", "eager"):
            with torch.no_grad():  # back to the same state
                for p, saved in zip(graphed.parameters, start):
                    p.copy_(saved)
                for p, saved in state.items():
                    for key, value in saved.items():
                        graphed.optimizer.state[p][key].copy_(value)
            for seed in (1, 2):
                torch.manual_seed(seed)
                if way == "replayed":
                    graphed(x, y)
                else:
                    graphed._eager(x, y)
            after[way] = [p.detach().clone() for p in graphed.parameters]
    pairs = list(zip(after["replayed"], after["eager"], start))
    return {
        "replays": graphed.replays,
        "max_abs_diff_vs_eager": max(float((a - b).abs().max()) for a, b, _ in pairs),
        "max_abs_change": max(float((b - s).abs().max()) for _, b, s in pairs),
        "warnings": [str(w.message)[:300] for w in caught],
    }


def capture_check_cuda(out: dict, save, device: str = "cuda", graphs=CudaGraphs) -> None:
    """The capture-safety check of every step function under every halting method, the whole graphed
    step on ``device``: each pair's hazards (none expected); then, where none is found and ``graphs``
    can capture, :func:`replayed_against_eager` (``passed``: 3 replays and the weights within
    :data:`REPLAY_TOLERANCE`; where only the MNIST steps, whose CNN has dropout, differ, suspect the
    random stream before the capture). Saved pair by pair."""
    from pondernet_tutorial.capture_check import capture_hazards
    from pondernet_tutorial.data.parity import parity_batch
    from pondernet_tutorial.data.pointer import pointer_batch

    steps = {
        "parity_gru": ({"n_elements": 16, "hidden_size": 64}, 2, lambda: parity_batch(128, 16, (1, 16))[:2]),
        "parity_rnn": ({"n_elements": 16, "hidden_size": 128}, 2, lambda: parity_batch(128, 16, (1, 16))[:2]),
        "mnist_mlp": ({}, 10, lambda: (torch.rand(128, 1, 28, 28), torch.randint(0, 10, (128,)))),
        "mnist_refine": ({}, 10, lambda: (torch.rand(128, 1, 28, 28), torch.randint(0, 10, (128,)))),
        "mnist_cnn": ({}, 10, lambda: (torch.rand(128, 1, 28, 28), torch.randint(0, 10, (128,)))),
        "pointer_attention": ({"n_slots": 32}, 32, lambda: pointer_batch(128, 32, (1, 8))[:2]),
    }
    for step, (options, n_classes, batch) in steps.items():
        for method in ("pondernet", "act", "fixed"):
            module = GraphedRunModule(
                step,
                n_classes,
                step_options=options,
                method=method,
                method_options={"max_steps": 8},
                grad_clip=0.5,
            ).to(device)
            module.start_sums()  # zero sums on the module's device, which the step adds to
            lr = torch.tensor(0.001)  # moved to the device as the capture moves it
            optimizer = torch.optim.Adam(module.parameters(), lr=lr, capturable=True, foreach=True)
            graphed = GraphedStep(
                module.summed_values,
                module.parameters(),
                optimizer,
                0.5,
                graphs=graphs() if graphs is not None else None,
                buffers=[module._fit_sums],
            )
            graphed.optimizer_tensors_to_device()
            x, y = (t.to(device) for t in batch())
            pair = out[f"{step}/{method}"] = {}
            pair["hazards"] = capture_hazards(lambda g=graphed, x=x, y=y: g._update(x, y), device)
            if not pair["hazards"] and graphs is not None:
                pair.update(replayed_against_eager(graphed, x, y))
                pair["passed"] = pair["replays"] == 3 and pair["max_abs_diff_vs_eager"] <= REPLAY_TOLERANCE
            save()
    hazards = {k: v["hazards"] for k, v in out.items() if v["hazards"]}
    failed = [k for k, v in out.items() if v.get("passed") is False]
    print(
        f"capture check on {device}: {len(out)} pairs, {len(hazards)} with hazards {hazards}; replayed against "
        f"eager: {sum(v.get('passed') is True for v in out.values())} passed, failed {failed}",
        flush=True,
    )


CHECKS = {"capture_check_cuda": capture_check_cuda, "resume": resume_check, "second_fit": second_fit_check}
PATHS = {
    "eager": (False, False),
    "graph": (False, True),
    "compiled": (True, False),
    "compiled_graph": (True, True),
}


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--synthetic", action="store_true")
    parser.add_argument("--experiments", nargs="+", default=["mnist-interpolation", "parity-interpolation"])
    parser.add_argument("--warmup", type=int, default=30)
    parser.add_argument("--timed", type=int, default=300)
    parser.add_argument(
        "--paths", nargs="*", choices=PATHS, default=[], help="the training paths to time [none]"
    )
    parser.add_argument(
        "--only", nargs="*", choices=CHECKS, default=list(CHECKS), help="the checks to run, in order"
    )
    parser.add_argument("--json", default=None)
    args = parser.parse_args(argv)
    if args.synthetic:
        import pondernet_tutorial.data.modules as modules

        synthetic_mnist(modules)
    results = {
        "device": torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu",
        "versions": {
            "python": platform.python_version(),
            "torch": torch.__version__,
            "lightning": L.__version__,
            "torchmetrics": torchmetrics.__version__,
        },
    }

    def save():  # after every part: what a command cut short has measured comes back
        if args.json:
            Path(args.json).write_text(json.dumps(results, indent=2, default=str))

    start = time.perf_counter()
    for name in args.only:  # each check on its own: one failing does not stop the others
        out = results.setdefault(name, {})
        try:
            CHECKS[name](out, save)
        except Exception as error:
            out["error"] = f"{type(error).__name__}: {error}"
            traceback.print_exc()
        save()
    for name in args.paths:
        for experiment in args.experiments:
            try:
                results.setdefault(experiment, {}).update(
                    speed(experiment, {name: PATHS[name]}, args.warmup, args.timed)
                )
            except Exception as error:  # one path failing (a compiler missing) does not stop the others
                results.setdefault(experiment, {})[name] = f"{type(error).__name__}: {error}"
                print(experiment, name, "failed:", error, flush=True)
            save()
    results["seconds"] = round(time.perf_counter() - start, 1)
    save()
    return results


if __name__ == "__main__":
    main()
