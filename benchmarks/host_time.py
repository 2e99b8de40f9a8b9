"""Host time per training step of the CUDA-graph path, measured with a replay that does nothing.

The module of the graphed path (:class:`~pondernet_tutorial.runs.module.GraphedRunModule`)
is given a graph whose capture runs the step once (for its outputs) and whose replay does nothing.
What a step then costs is what the host does around the replay, whatever the device: Lightning's
loop, the data loader (drawing and converting the batch), the copy into the static batch, the
metrics' updates and the module's hooks. On a GPU this is the floor of a step's time once the step
itself is one graph.

    python benchmarks/host_time.py                       # MNIST (needs it on disk) and parity, on the CPU
    python benchmarks/host_time.py --synthetic           # random uint8 images of MNIST's shape instead
    python benchmarks/host_time.py --accelerator gpu     # the same loop with the batch sent to a GPU

Prints the median of ``--repeats`` runs, in milliseconds per step, for each experiment.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

import lightning as L
import torch

sys.path.insert(0, str(Path(__file__).parent))
from throughput import time_fit  # noqa: E402

from pondernet_tutorial.runs.config import TrainConfig  # noqa: E402
from pondernet_tutorial.runs.training import make_datamodule, make_module  # noqa: E402


class NoReplayGraph:
    def replay(self):
        pass


class NoReplayGraphs:
    """A graph whose capture runs the step once, for its outputs, and whose replay does nothing."""

    def warm_up(self, step):
        return step()

    def capture(self, step, *args, **kwargs):
        return NoReplayGraph(), step()

    def synchronize(self):
        if torch.cuda.is_available():
            torch.cuda.synchronize()


def synthetic_mnist(monkeypatch_target) -> None:
    """Serve random uint8 images of MNIST's shape (60,000 and 10,000) instead of MNIST's files."""

    def load(train, data_dir=None):
        g = torch.Generator().manual_seed(0 if train else 1)
        n = 60_000 if train else 10_000
        images = torch.randint(0, 256, (n, 1, 28, 28), generator=g, dtype=torch.uint8)
        return images, torch.randint(0, 10, (n,), generator=g)

    monkeypatch_target.load_mnist = load
    monkeypatch_target.download_mnist = lambda data_dir=None: None


def timed_training(
    experiment: str, compiled: bool, graphed: bool, device: str, warmup: int, timed: int, graphs=None
):
    """The package's module for ``experiment``, trained for ``warmup`` then ``timed`` steps on
    ``device`` (``graphs``: a stand-in for its CUDA graphs), and ``time_fit``'s result with the step's
    milliseconds added: ``(module, result)``."""
    L.seed_everything(0, verbose=False)
    config = TrainConfig(experiment=experiment, compile=compiled)
    module = make_module(config, graphed=graphed)
    if graphs is not None:
        module.graphs = graphs
    result = time_fit(
        module,
        datamodule=make_datamodule(config),
        warmup=warmup,
        timed=timed,
        batch_size=config.batch_size,
        device=device,
    )
    result["ms_per_step"] = 1000 * config.batch_size / result["img_s"]
    return module, result


def host_ms(experiment: str, accelerator: str, warmup: int, timed: int) -> float:
    device = "cuda" if accelerator == "gpu" else "cpu"
    _, result = timed_training(experiment, False, True, device, warmup, timed, graphs=NoReplayGraphs())
    return result["ms_per_step"]


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--experiments", nargs="+", default=["mnist-interpolation", "parity-interpolation"])
    parser.add_argument("--accelerator", choices=["cpu", "gpu"], default="cpu")
    parser.add_argument("--warmup", type=int, default=20)
    parser.add_argument("--timed", type=int, default=200)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument(
        "--synthetic", action="store_true", help="random uint8 images instead of MNIST's files"
    )
    parser.add_argument("--json", default=None)
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.accelerator == "cpu":  # Adam(capturable=True) refuses the CPU; its update is the same there
        import importlib

        importlib.import_module("torch.optim.adam")._get_capturable_supported_devices = lambda *a, **k: [
            "cpu"
        ]
    if args.synthetic:
        import pondernet_tutorial.data.modules as modules

        synthetic_mnist(modules)
    results = {}
    for experiment in args.experiments:
        runs = [host_ms(experiment, args.accelerator, args.warmup, args.timed) for _ in range(args.repeats)]
        results[experiment] = {
            "median_ms": round(statistics.median(runs), 3),
            "runs_ms": [round(r, 3) for r in runs],
        }
        print(
            f"{experiment}: {results[experiment]['median_ms']:.3f} ms per step (runs {results[experiment]['runs_ms']})"
        )
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))
    return results


if __name__ == "__main__":
    main()
