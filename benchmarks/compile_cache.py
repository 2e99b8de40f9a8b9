"""torch.compile's on-disk cache against the training step it serves (issue 43).

On one H100 the compiled, graphed MNIST step replayed 3-8x slower when ``torch.compile`` had loaded it
from its on-disk cache. This check times the same step in two fresh processes that share one cache
folder: the first compiles the step and fills the folder (cold), the second finds its kernels there
(warm). On a GPU each process times the step twice with the same compiled code: graphed, then
without the graph. Each reports its steady milliseconds per step (after ``--warmup`` steps, which hold
the compilation and the capture) and what it took from the cache (inductor's and AOTAutograd's
counters), so that a slow warm step can be told apart: no hit (the cache was not used), another number
of graphs (a recompilation), slower loaded kernels (slow without the graph too), or what the graph
recorded around them (slow graphed only). The line ``cause:`` says which.

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


PATHS = {"cuda": ("graphed", "compiled"), "cpu": ("compiled",)}  # the first one is judged


def counted() -> dict:
    """inductor's and AOTAutograd's counters (the cache's hits and misses, autotuning's benchmarks) and
    the number of graphs dynamo compiled, in this process so far."""
    from torch._dynamo.utils import counters

    now = {
        f"{group}/{name}": count
        for group in ("inductor", "aot_autograd")
        for name, count in counters[group].items()
    }
    return {**now, "graphs_compiled": counters["stats"]["unique_graphs"]}


def step_time(experiment: str, device: str, warmup: int, timed: int, synthetic: bool) -> dict:
    """This process's compiled step, on a GPU first graphed and then without the graph (the same
    compiled code: on the CPU a second module compiled nothing, and ``added`` shows whether a GPU
    does), each path's steady time and what it added to the counters; then the process's counters."""
    from host_time import synthetic_mnist, timed_training  # beside this script, on its path

    if synthetic:
        import pondernet_tutorial.data.modules as modules

        synthetic_mnist(modules)
    paths = {}
    for path in PATHS[device]:
        before = counted()
        module, result = timed_training(experiment, True, path == "graphed", device, warmup, timed)
        after = counted()
        paths[path] = {
            "ms_per_step": round(result["ms_per_step"], 3),
            "warmup_s": round(result["warmup_s"], 2),
            "graph_replays": getattr(module, "graph_replays", 0),
            "added": {
                name: count - before.get(name, 0)
                for name, count in after.items()
                if count != before.get(name, 0)
            },
        }
    totals = counted()
    return {
        "paths": paths,
        "graphs_compiled": totals.pop("graphs_compiled"),
        "counters": totals,
        "cache_dir": os.environ.get("TORCHINDUCTOR_CACHE_DIR"),
    }


def cache_hits(run: dict) -> int:
    """The cache hits of the process's first path: the one that compiled (or loaded) the step."""
    first = next(iter(run["paths"].values()))
    return sum(count for name, count in first["added"].items() if "cache" in name and name.endswith("_hit"))


def ratio(cold: dict, warm: dict, path: str) -> float:
    return warm["paths"][path]["ms_per_step"] / cold["paths"][path]["ms_per_step"]


def verdict(cold: dict, warm: dict, tolerance: float) -> tuple[bool, str]:
    """``(passed, one line)``: the warm step (the first path: graphed on a GPU) within ``tolerance``
    times the cold one's time, the cold step compiled afresh and the warm one loaded from the cache."""
    path = next(iter(cold["paths"]))
    judged = ratio(cold, warm, path)
    if cache_hits(cold):
        return False, f"the cold process found its step in the cache already (ratio {judged:.2f}): not tested"
    if cache_hits(warm) == 0:
        return False, f"the warm process took nothing from the cache (ratio {judged:.2f}): not tested"
    line = (
        f"{path}: warm/cold {judged:.2f} ({warm['paths'][path]['ms_per_step']} ms against "
        f"{cold['paths'][path]['ms_per_step']} ms per step; graphs compiled {cold['graphs_compiled']} cold, "
        f"{warm['graphs_compiled']} warm)"
    )
    return judged <= tolerance, line


def cause(cold: dict, warm: dict, tolerance: float) -> str:
    """Where a slow warm step comes from, as far as the two processes' numbers tell it ("" where the
    warm step is not slow): a recompilation; the loaded kernels themselves (slow without the graph too);
    or what the graph recorded around them (slow graphed only)."""
    path = next(iter(cold["paths"]))
    if ratio(cold, warm, path) <= tolerance:
        return ""
    if warm["graphs_compiled"] != cold["graphs_compiled"]:
        return (
            f"a recompilation: the warm process compiled {warm['graphs_compiled']} graphs, "
            f"the cold one {cold['graphs_compiled']}"
        )
    if "compiled" not in cold["paths"] or path == "compiled":
        return "the loaded kernels themselves (no graph was recorded)"
    plain = ratio(cold, warm, "compiled")
    if plain > tolerance:
        return f"the loaded kernels themselves: slower without the graph too (warm/cold {plain:.2f})"
    return (
        f"what the graph recorded around the loaded kernels: without the graph the warm step keeps "
        f"pace (warm/cold {plain:.2f})"
    )


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
    found = cause(runs["cold"], runs["warm"], args.tolerance) if cache_hits(runs["warm"]) else ""
    if found:
        print(f"cause: {found}")
    if args.json:
        Path(args.json).write_text(
            json.dumps({**vars(args), **runs, "passed": passed, "verdict": line, "cause": found}, indent=2)
        )
    return 0 if passed else 1


if __name__ == "__main__":
    sys.exit(main())
