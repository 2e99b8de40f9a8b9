"""torch.compile's on-disk cache against the training step it serves (issue 43).

On one H100 the compiled, graphed MNIST step replayed 3-8x slower when ``torch.compile`` had loaded it
from its on-disk cache. This check times the same step in two fresh processes that share one cache
folder: the first compiles the step and fills the folder (cold), the second finds its kernels there
(warm). Each process reports its steady milliseconds per step (after ``--warmup`` steps, which hold
the compilation and the capture) and what it took from the cache (inductor's and AOTAutograd's cache
counters), so that a slow warm step can be told apart: no hit (the cache was not used), another
number of graphs (a recompilation), or the same graphs loaded and slower kernels.

    python benchmarks/compile_cache.py --synthetic --json cache.json     # a GPU: compiled + one CUDA graph
    python benchmarks/compile_cache.py --device cpu --experiment parity-interpolation   # the CPU: compiled

It prints both processes' numbers and the ratio, and exits with status 1 when the warm step is more
than ``--tolerance`` times slower than the cold one, or when the cold process found its step in the
cache or the warm one took nothing from it (then the cached path was not tested).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

CACHE_SWITCHES = {"TORCHINDUCTOR_FX_GRAPH_CACHE": "1", "TORCHINDUCTOR_AUTOGRAD_CACHE": "1"}


def step_time(experiment: str, device: str, warmup: int, timed: int, synthetic: bool) -> dict:
    """This process's compiled step (graphed on a GPU): its steady time and the cache's counters."""
    from host_time import synthetic_mnist, timed_training  # beside this script, on its path
    from torch._dynamo.utils import counters

    if synthetic:
        import pondernet_tutorial.data.modules as modules

        synthetic_mnist(modules)
    module, result = timed_training(experiment, True, device == "cuda", device, warmup, timed)
    taken = {
        f"{group}/{name}": count
        for group in ("inductor", "aot_autograd")
        for name, count in counters[group].items()
        if "cache" in name
    }
    return {
        "ms_per_step": round(result["ms_per_step"], 3),
        "warmup_s": round(result["warmup_s"], 2),
        "graph_replays": getattr(module, "graph_replays", 0),
        "graphs_compiled": counters["stats"]["unique_graphs"],
        "cache": taken,
        "cache_dir": os.environ.get("TORCHINDUCTOR_CACHE_DIR"),
    }


def cache_hits(run: dict) -> int:
    return sum(count for name, count in run["cache"].items() if name.endswith("_hit"))


def verdict(cold: dict, warm: dict, tolerance: float) -> tuple[bool, str]:
    """``(passed, one line)``: the warm step within ``tolerance`` times the cold one's time, the cold
    step compiled afresh and the warm one loaded from the cache."""
    ratio = warm["ms_per_step"] / cold["ms_per_step"]
    if cache_hits(cold):
        return False, f"the cold process found its step in the cache already (ratio {ratio:.2f}): not tested"
    if cache_hits(warm) == 0:
        return False, f"the warm process took nothing from the cache (ratio {ratio:.2f}): not tested"
    line = (
        f"warm/cold {ratio:.2f} ({warm['ms_per_step']} ms against {cold['ms_per_step']} ms per step; "
        f"graphs compiled {cold['graphs_compiled']} cold, {warm['graphs_compiled']} warm)"
    )
    return ratio <= tolerance, line


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--experiment", default="mnist-interpolation")
    parser.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    parser.add_argument("--warmup", type=int, default=30)
    parser.add_argument("--timed", type=int, default=300)
    parser.add_argument("--tolerance", type=float, default=1.5, help="most warm/cold ratio that passes [1.5]")
    parser.add_argument(
        "--synthetic", action="store_true", help="random uint8 images instead of MNIST's files"
    )
    parser.add_argument("--json", default=None)
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:  # one of the two processes: its numbers, as the last line of its output
        print(json.dumps(step_time(args.experiment, args.device, args.warmup, args.timed, args.synthetic)))
        return 0
    command = [sys.executable, __file__, "--child", *(argv if argv is not None else sys.argv[1:])]
    runs = {}
    with tempfile.TemporaryDirectory(prefix="compile-cache-") as cache:
        env = {**os.environ, **CACHE_SWITCHES, "TORCHINDUCTOR_CACHE_DIR": cache}
        for name in ("cold", "warm"):
            done = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
            if done.returncode != 0:
                print(done.stderr[-3000:], file=sys.stderr)
                raise SystemExit(f"the {name} process failed with status {done.returncode}")
            runs[name] = json.loads(done.stdout.strip().splitlines()[-1])
            print(f"{name}: {runs[name]}", flush=True)
    passed, line = verdict(runs["cold"], runs["warm"], args.tolerance)
    print(("passed: " if passed else "FAILED: ") + line)
    if args.json:
        Path(args.json).write_text(
            json.dumps({**vars(args), **runs, "passed": passed, "verdict": line}, indent=2)
        )
    return 0 if passed else 1


if __name__ == "__main__":
    sys.exit(main())
