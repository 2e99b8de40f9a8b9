"""``fit()`` on a GPU, plain (``fast=False``) against its fast path (``fast=None``): the figures issue 43
asks for, in one short run for a session that is lent a GPU.

* ``own_model``: the own-model chapter's training cell (its data and step function are read from
  ``book/own_model.ipynb``), its full budget of epochs, wall time;
* ``mnist`` and ``parity``: the plain module over the reference MNIST model and the parity model,
  trained through ``fit()``, samples per second over ``--timed`` batches after ``--warmup``;
* ``same_weights``: the own model, 20 steps each way from the same seed, the largest weight difference.

Each is run three ways: ``plain`` (``fast=False``), ``fast`` (``fit``'s default: the step as one CUDA
graph) and ``fast_compiled`` (a :class:`GraphedPonderLitModule` with ``compile=True`` handed to ``fit``:
what ``fit`` would gain by compiling too, compilation included).

MNIST need not be on the machine: random uint8 images of its shape go through the real data module
(a step's speed does not depend on the pixels).

    python benchmarks/fit_gpu.py --json fit_gpu.json            # on the GPU machine
    python benchmarks/fit_gpu.py --device cpu --epochs 1 --timed 5 --warmup 2   # a smoke run here
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import lightning as L
import torch
from torch.utils.data import DataLoader, TensorDataset

sys.path.insert(0, str(Path(__file__).parent))
from host_time import synthetic_mnist  # noqa: E402
from throughput import BatchClock  # noqa: E402

from pondernet_tutorial import PonderLitModule, PonderNet, fit  # noqa: E402
from pondernet_tutorial.fast_path import CudaGraphs, GraphedPonderLitModule  # noqa: E402

WAYS = {"plain": False, "fast": None, "fast_compiled": "compiled"}


def lit(model, way, **settings):
    """The module that ``fit`` is handed for one way."""
    if way == "compiled":
        return GraphedPonderLitModule(model, **settings, compile=True, graphs=CudaGraphs())
    return PonderLitModule(model, **settings)


BOOK = Path(__file__).parents[1] / "book"
QUIET = dict(logger=False, enable_model_summary=False, enable_progress_bar=False, num_sanity_val_steps=0)


def own_model_cells() -> dict:
    """The own-model chapter's data (``digit_sums``) and step function (``DigitSumStep``), run from the
    notebook's own cells."""
    notebook = json.loads((BOOK / "own_model.ipynb").read_text())
    space = {"torch": torch, "nn": torch.nn, "StepFunction": __import__("pondernet_tutorial").StepFunction}
    for cell in notebook["cells"]:
        source = "".join(cell["source"])
        if cell["cell_type"] == "code" and ("def digit_sums" in source or "class DigitSumStep" in source):
            exec(compile(source, "own_model.ipynb", "exec"), space)
    return space


def fitted(module, data, device, fast, **budget):
    """``fit`` on ``device``: seconds, and whether a graph replayed the steps."""
    start = time.perf_counter()
    with tempfile.TemporaryDirectory() as root:
        trainer, _ = fit(
            module, data, accelerator=device, devices=1, default_root_dir=root, fast=fast, **QUIET, **budget
        )
    trained = trainer.lightning_module
    replays = trained.graph_replays if isinstance(trained, GraphedPonderLitModule) else 0
    return {"seconds": round(time.perf_counter() - start, 2), "graph_replays": replays}


def own_model(device: str, epochs: int) -> dict:
    cells = own_model_cells()
    x, y, _ = cells["digit_sums"](20_000, seed=0)
    vx, vy, _ = cells["digit_sums"](2_000, seed=1)
    out = {}
    for name, way in WAYS.items():
        torch.manual_seed(0)
        model = PonderNet(cells["DigitSumStep"](n_classes=3), max_steps=12, lambda_p=0.2, beta=0.1)
        module = lit(model, way, lr=1e-2)
        data = L.LightningDataModule.from_datasets(TensorDataset(x, y), TensorDataset(vx, vy), batch_size=128)
        out[name] = fitted(module, data, device, False if way is False else None, max_epochs=epochs)
        print("own_model", name, out[name], flush=True)
    return out


def same_weights(device: str) -> dict:
    cells = own_model_cells()
    x, y, _ = cells["digit_sums"](20 * 128, seed=0)
    modules = []
    for fast in (False, None):
        torch.manual_seed(0)
        model = PonderNet(cells["DigitSumStep"](n_classes=3), max_steps=12, lambda_p=0.2, beta=0.1)
        module = PonderLitModule(model, lr=1e-2, lr_schedule="constant")
        train = DataLoader(TensorDataset(x, y), batch_size=128)
        with tempfile.TemporaryDirectory() as root:
            trainer = fit(
                module,
                L.LightningDataModule.from_datasets(train.dataset, batch_size=128),
                max_epochs=1,
                accelerator=device,
                devices=1,
                default_root_dir=root,
                fast=fast,
                limit_val_batches=0,
                **QUIET,
            )[0]
        modules.append(module)
    diff = max(float((p - q).abs().max()) for p, q in zip(modules[0].parameters(), modules[1].parameters()))
    print("same_weights: largest difference after 20 steps", diff, flush=True)
    return {"steps": int(trainer.global_step), "max_abs_difference": diff}


def speed(experiment: str, device: str, warmup: int, timed: int) -> dict:
    from pondernet_tutorial.runs.build import make_datamodule
    from pondernet_tutorial.runs.config import TrainConfig
    from pondernet_tutorial.runs.module import build_model
    from pondernet_tutorial.runs.registry import get_experiment

    config, spec = TrainConfig(experiment=experiment), get_experiment(experiment)
    out = {}
    for name, way in WAYS.items():
        L.seed_everything(0, verbose=False)
        model = build_model(spec.step, spec.n_classes, "pondernet", dict(spec.step_options))
        clock = BatchClock(warmup)
        data = make_datamodule(config)
        result = fitted(
            lit(model, way),
            data,
            device,
            False if way is False else None,
            max_epochs=1,
            limit_train_batches=warmup + timed,
            limit_val_batches=0,
            callbacks=[clock],
        )
        result["samples_s"] = round(timed * config.batch_size / (clock.marks["end"] - clock.marks[warmup]))
        out[name] = result
        print(experiment, name, result, flush=True)
    return out


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--device", default="gpu", help="Lightning's accelerator: gpu, or cpu for a smoke run"
    )
    parser.add_argument("--epochs", type=int, default=12, help="the own model's epochs (the chapter's: 12)")
    parser.add_argument("--warmup", type=int, default=30)
    parser.add_argument("--timed", type=int, default=200)
    parser.add_argument("--json", default=None)
    args = parser.parse_args(argv)
    if args.device != "gpu":  # the graphed module's Adam runs on a GPU only
        WAYS.pop("fast_compiled")
    import pondernet_tutorial.data.modules as modules

    synthetic_mnist(modules)
    results = {"device": torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu"}

    def part(name, run):  # each part saved as it ends: a command cut short keeps what it measured
        try:
            results[name] = run()
        except Exception as error:
            results[name] = f"{type(error).__name__}: {error}"
            print(name, "failed:", error, flush=True)
        if args.json:
            Path(args.json).write_text(json.dumps(results, indent=2))

    part("same_weights", lambda: same_weights(args.device))
    part("own_model", lambda: own_model(args.device, args.epochs))
    for experiment in ("mnist-interpolation", "parity-interpolation"):
        part(experiment, lambda e=experiment: speed(e, args.device, args.warmup, args.timed))
    return results


if __name__ == "__main__":
    main()
