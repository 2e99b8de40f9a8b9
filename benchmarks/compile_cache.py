"""torch.compile's on-disk cache against the training step it serves (issue 43).

On one H100 the compiled, graphed MNIST step replayed 3-8x slower when ``torch.compile`` had loaded it
from its on-disk cache; on one H200 (torch 2.11) it took 15.9 ms against 2.0 ms, with the same kernels
taking the device the same 1.74 ms per step: the time went to the host, while the compile workers' pool
that the compilation had started kept a core busy. The package's compiled modules now shut that pool
down after their first step (:func:`pondernet_tutorial.fast_path.stop_compile_workers`); with that, the
warm step took 2.08 ms against the cold one's 2.06 ms. This check times the same step in two fresh
processes that share one cache folder: the first compiles the step and fills the folder (cold), the
second finds its kernels there (warm). On a GPU each process times the step twice with the same
compiled code: graphed, then without the graph. Each reports its steady milliseconds per step (after
``--warmup`` steps, which hold the compilation and the capture) and what it took from the cache
(inductor's and AOTAutograd's counters), so that a slow warm step can be told apart: no hit (the cache
was not used), another number of graphs (a recompilation), the host (the kernels' device time
unchanged), slower loaded kernels, or what the graph recorded around them (slow graphed only). The line
``cause:`` says which. A graphed path that replayed no step (its capture failed, or was refused) tests
nothing: the verdict says so.

Without the graph the step is bound by the host, so slower kernels can hide there. Each process
therefore also profiles each path over ``--profile-steps`` steady steps of a second short fit of the
same module (the same compiled code; a graph is captured afresh): the device's kernels per step, their
time per step, and the ten that take the longest, copies and fills included. Cold against warm, these
show directly whether the warm step runs more kernels, slower kernels or added copies.

The parent writes ``--json`` as soon as the cold process has ended, and again when the warm one has.

    python benchmarks/compile_cache.py --synthetic --json cache.json     # a GPU: compiled + one CUDA graph
    python benchmarks/compile_cache.py --device cpu --experiment parity-interpolation   # the CPU: compiled

It prints both processes' numbers and the ratio, and exits with status 1 when the warm step is more
than ``--tolerance`` times slower than the cold one, or when the cold process found its step in the
cache or the warm one took nothing from it (then the cached path was not tested).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import subprocess
import sys
import tempfile
from collections import Counter
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


def versions() -> dict:
    import torch

    try:
        import triton

        triton_version = triton.__version__
    except ImportError:
        triton_version = None
    return {"python": platform.python_version(), "torch": torch.__version__, "triton": triton_version}


def kernel_profile(module, experiment: str, device: str, steps: int, warmup: int = 5) -> dict:
    """The device's work in ``steps`` training steps of a second short fit of ``module`` after
    ``warmup`` (which hold a graph's warm-up and capture): on a GPU its kernels, copies and fills, on
    the CPU its operators by their own time; per step, their number and milliseconds, and the ten that
    take the longest (``[name, ms per step, calls per step]``)."""
    import lightning as L
    import torch
    from throughput import training_trainer  # (this script's folder is on the path)
    from torch.autograd import DeviceType

    from pondernet_tutorial.runs.config import TrainConfig
    from pondernet_tutorial.runs.training import make_datamodule

    class Window(L.Callback):
        def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
            if batch_idx == warmup:
                if device == "cuda":
                    torch.cuda.synchronize()
                self.profile = torch.profiler.profile(activities=activities)
                self.profile.__enter__()

        def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
            if batch_idx == warmup + steps - 1:
                if device == "cuda":
                    torch.cuda.synchronize()
                self.profile.__exit__(None, None, None)

    activity = torch.profiler.ProfilerActivity
    activities = [activity.CPU, activity.CUDA] if device == "cuda" else [activity.CPU]
    window = Window()
    trainer = training_trainer(warmup + steps, device, [window], logger=False)
    trainer.fit(module, datamodule=make_datamodule(TrainConfig(experiment=experiment, compile=True)))
    ms, calls = Counter(), Counter()
    for event in window.profile.events():
        if device == "cuda" and event.device_type == DeviceType.CUDA:
            ms[event.name] += event.time_range.elapsed_us() / 1000
        elif device == "cpu" and event.device_type == DeviceType.CPU:
            ms[event.name] += event.self_cpu_time_total / 1000
        else:
            continue
        calls[event.name] += 1
    return {
        "steps": steps,
        "kernels_per_step": round(sum(calls.values()) / steps, 1),
        "ms_per_step": round(sum(ms.values()) / steps, 4),
        "top": [[name, round(t / steps, 4), round(calls[name] / steps, 2)] for name, t in ms.most_common(10)],
    }


def step_time(
    experiment: str, device: str, warmup: int, timed: int, synthetic: bool, profile_steps: int = 0
) -> dict:
    """This process's compiled step, on a GPU first graphed and then without the graph (the same
    compiled code: on the CPU a second module compiled nothing, and ``added`` shows whether a GPU
    does), each path's steady time and what it added to the counters; then the process's counters;
    then, with ``profile_steps``, each path's :func:`kernel_profile` (after the counters are read)."""
    from host_time import synthetic_mnist, timed_training  # beside this script, on its path

    if synthetic:
        import pondernet_tutorial.data.modules as modules

        synthetic_mnist(modules)
    paths, modules_used = {}, {}
    for path in PATHS[device]:
        before = counted()
        module, result = timed_training(experiment, True, path == "graphed", device, warmup, timed)
        after = counted()
        modules_used[path] = module
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
    for path, module in modules_used.items():
        if profile_steps:
            try:
                paths[path]["profile"] = kernel_profile(module, experiment, device, profile_steps)
            except Exception as error:  # the timing stands without it
                paths[path]["profile"] = f"{type(error).__name__}: {error}"
    return {
        "paths": paths,
        "graphs_compiled": totals.pop("graphs_compiled"),
        "counters": totals,
        "cache_dir": os.environ.get("TORCHINDUCTOR_CACHE_DIR"),
        "versions": versions(),
    }


ON_DISK_HITS = ("inductor/fxgraph_cache_hit", "aot_autograd/autograd_cache_hit")  # not async_compile's


def cache_hits(run: dict) -> int:
    """The on-disk cache's hits in the process's first path: the one that compiled (or loaded) the step.
    ``async_compile_cache_hit`` is left out: it counts kernels that one compilation asked for twice."""
    first = next(iter(run["paths"].values()))
    return sum(first["added"].get(name, 0) for name in ON_DISK_HITS)


def ratio(cold: dict, warm: dict, path: str) -> float:
    return warm["paths"][path]["ms_per_step"] / cold["paths"][path]["ms_per_step"]


def verdict(cold: dict, warm: dict, tolerance: float) -> tuple[bool, str]:
    """``(passed, one line)``: the warm step (the first path: graphed on a GPU) within ``tolerance``
    times the cold one's time, the cold step compiled afresh and the warm one loaded from the cache,
    and on a GPU both steps replayed from their graphs."""
    path = next(iter(cold["paths"]))
    judged = ratio(cold, warm, path)
    if path == "graphed" and not all(run["paths"][path].get("graph_replays", 1) for run in (cold, warm)):
        replays = [run["paths"][path].get("graph_replays") for run in (cold, warm)]
        return False, f"a graphed path replayed no step (cold {replays[0]}, warm {replays[1]}): not tested"
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


def device_ms(run: dict, path: str) -> float | None:
    """The device's milliseconds per step of ``path`` in the process's kernel profile, where it has one."""
    profile = run["paths"][path].get("profile")
    return profile.get("ms_per_step") if isinstance(profile, dict) else None


def cause(cold: dict, warm: dict, tolerance: float) -> str:
    """Where a slow warm step comes from, as far as the two processes' numbers tell it ("" where the
    warm step is not slow): a recompilation; the host, where the profiles show the warm step's kernels
    taking the device no longer than the cold one's; the loaded kernels themselves (longer on the
    device, or slow without the graph too); or what the graph recorded around them (slow graphed only)."""
    path = next(iter(cold["paths"]))
    if ratio(cold, warm, path) <= tolerance:
        return ""
    if warm["graphs_compiled"] != cold["graphs_compiled"]:
        return (
            f"a recompilation: the warm process compiled {warm['graphs_compiled']} graphs, "
            f"the cold one {cold['graphs_compiled']}"
        )
    warm_device, cold_device = device_ms(warm, path), device_ms(cold, path)
    if warm_device and cold_device:
        kernels = warm_device / cold_device
        if kernels <= tolerance:
            return (
                f"the host: the warm step's kernels take the device {warm_device} ms per step against "
                f"{cold_device} ms (warm/cold {kernels:.2f}), so its time goes elsewhere (on one H200: "
                "torch.compile's pool of compile workers, see fast_path.stop_compile_workers)"
            )
        return f"the loaded kernels themselves: longer on the device (warm/cold {kernels:.2f})"
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
    parser.add_argument("--timed", type=int, default=100)
    parser.add_argument(
        "--profile-steps", type=int, default=20, help="steps profiled in each path, 0 for none [20]"
    )
    parser.add_argument("--tolerance", type=float, default=1.5, help="most warm/cold ratio that passes [1.5]")
    parser.add_argument(
        "--synthetic", action="store_true", help="random uint8 images instead of MNIST's files"
    )
    parser.add_argument("--json", default=None)
    parser.add_argument(
        "--cache-dir", default=None, help="the cache folder to fill and keep (default: a temporary one)"
    )
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:  # one of the two processes: its numbers, as the last line of its output
        step = step_time(
            args.experiment, args.device, args.warmup, args.timed, args.synthetic, args.profile_steps
        )
        print(json.dumps(step))
        return 0
    command = [sys.executable, __file__, "--child", *(argv if argv is not None else sys.argv[1:])]
    results = dict(vars(args))

    def save():  # after each process: a command cut short keeps the cold one's numbers
        if args.json:
            Path(args.json).write_text(json.dumps(results, indent=2))

    with (
        contextlib.nullcontext(args.cache_dir)
        if args.cache_dir
        else tempfile.TemporaryDirectory(prefix="compile-cache-") as cache
    ):
        env = {**os.environ, **CACHE_SWITCHES, "TORCHINDUCTOR_CACHE_DIR": cache}
        for name in ("cold", "warm"):
            done = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
            if done.returncode != 0:
                print(done.stderr[-3000:], file=sys.stderr)
                results[name] = {"status": done.returncode, "stderr": done.stderr[-3000:]}
                save()
                raise SystemExit(f"the {name} process failed with status {done.returncode}")
            results[name] = json.loads(done.stdout.strip().splitlines()[-1])
            print(f"{name}: {results[name]}", flush=True)
            save()
    passed, line = verdict(results["cold"], results["warm"], args.tolerance)
    print(("passed: " if passed else "FAILED: ") + line)
    found = cause(results["cold"], results["warm"], args.tolerance) if cache_hits(results["warm"]) else ""
    if found:
        print(f"cause: {found}")
    results.update(passed=passed, verdict=line, cause=found)
    save()
    return 0 if passed else 1


if __name__ == "__main__":
    sys.exit(main())
