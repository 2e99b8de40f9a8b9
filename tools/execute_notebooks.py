"""Execute the book's notebooks once, through nbmake, in a given kernel, and hand the executed
notebooks to the book.

CI runs the notebooks in a Colab-like kernel (the package and its dependencies, no myst-nb, no Jupyter
Book) with this script, then builds the book from the same outputs. The one execution is nbmake's
(``pytest --nbmake``, the notebooks' test): each notebook is copied into ``--out`` and run there by
``pytest --nbmake --overwrite --nbmake-kernel NAME --nbmake-timeout SECONDS``, which writes the
executed notebook over its copy. ``--cache`` then adds each executed copy to Jupyter Book's execution
cache (``_build/.jupyter_cache``), where the build finds it by the hash of its code cells and does
not execute it again.

Each notebook runs under the cell timeout that the book build uses: its own ``execution.timeout``
metadata if it has one (the notebooks with a training cell; nbmake reads it), else ``execute.timeout``
of ``_config.yml`` (given to nbmake as its default). A cell that raises, or runs past the timeout,
fails nbmake's test for the notebook, which names the cell. So does, here, a stall that nbclient
waits out without an error: a cell that returns only at its timeout (a reply seen late,
jupyter/nbclient#312), or a kernel that does not exit when asked after the last cell, which the
client waits for and then terminates (seen as the time between the last cell's reply and nbmake's
write of the notebook). The second is what held the book build for 10 minutes on
``explore_halting``: after its ipywidgets cell (an ``interactive`` with an output widget) ipykernel
did not shut down, and the build went on without a word at the end of the wait; that cell is now
tagged ``skip-execution`` (nbclient skips it). A kernel that does not start is started again
(pytest-rerunfailures, matched on jupyter_client's messages); a notebook whose cell failed is not run
again. The slowest cells are listed at the end, to size the timeouts from.

    python tools/execute_notebooks.py --kernel NAME --out DIR [--cache _build/.jupyter_cache] [--jobs 2] [NOTEBOOK ...]
"""

from __future__ import annotations

import argparse
import copy
import math
import os
import shutil
import subprocess
import sys
import time
from datetime import datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# A kernel exits within a second or two of the shutdown request; jupyter_client waits much longer
# before it terminates one that does not.
SHUTDOWN_SECONDS = 20


def timeout_seconds(value, where: str) -> int:
    """A cell timeout as a whole number of seconds >= 1, or a ``ValueError`` (one line) naming where it
    is set."""
    try:
        number = float(value)  # YAML and JSON give an int; a numeric string is taken too
    except (TypeError, ValueError):
        number = math.nan
    if isinstance(value, bool) or not (number >= 1 and number.is_integer()):  # NaN fails >=
        raise ValueError(
            f"{where} is {value!r}: give the cell timeout as a whole number of seconds, at least 1"
        )
    return int(number)


def default_timeout() -> int:
    import yaml

    path = ROOT / "_config.yml"
    try:
        value = yaml.safe_load(path.read_text())["execute"]["timeout"]
    except (OSError, yaml.YAMLError, KeyError, TypeError) as error:
        raise ValueError(f"{path} gives no execute.timeout ({type(error).__name__}: {error})") from None
    return timeout_seconds(value, f"execute.timeout in {path}")


def notebook_timeout(nb, default: int, name: str = "the notebook") -> int:
    """The notebook's own ``execution.timeout``, else ``default`` (``execute.timeout`` of ``_config.yml``)."""
    execution = nb.metadata.get("execution", {})
    if isinstance(execution, dict) and "timeout" in execution:
        return timeout_seconds(execution["timeout"], f"execution.timeout in the metadata of {name}")
    return default


def cell_seconds(cell) -> float | None:
    timing = cell.metadata.get("execution", {})
    start, end = timing.get("iopub.execute_input"), timing.get("shell.execute_reply")
    if not (start and end):
        return None
    parse = lambda text: datetime.fromisoformat(text.replace("Z", "+00:00"))  # noqa: E731
    return (parse(end) - parse(start)).total_seconds()


def first_line(cell) -> str:
    lines = [line for line in cell.source.splitlines() if line.strip() and not line.startswith("#")]
    return lines[0][:70] if lines else ""


# What jupyter_client raises when a kernel does not start (KernelClient.wait_for_ready), as
# pytest-rerunfailures matches it: "RuntimeError: <message>".
KERNEL_START_FAILURES = ("Kernel didn't respond in", "Kernel died before replying to kernel_info")
KERNEL_START_RERUNS = 2


def nbmake(copies: list[Path], kernel: str, timeout: int, jobs: int = 1) -> int:
    """Run nbmake on the copies (it writes each executed notebook over its copy), ``jobs`` notebooks at
    once (pytest-xdist's ``-n``; each kernel then on one PyTorch thread); pytest's status."""
    folder = copies[0].parent
    command = [
        sys.executable,
        "-m",
        "pytest",
        "--nbmake",
        "--overwrite",
        f"--nbmake-kernel={kernel}",
        f"--nbmake-timeout={timeout}",
        "-p",
        "no:cacheprovider",
        f"--rootdir={folder}",
        "-c",
        os.devnull,  # not the repository's pytest settings
        "-v",
        *(["-n", str(jobs)] if jobs > 1 else []),
        # A kernel that did not start (two started at once may take the same port: nbmake#129, seen
        # here once in eight CI runs as "Kernel didn't respond in 60 seconds") is started again, up to
        # twice; a failing cell is never run again.
        f"--reruns={KERNEL_START_RERUNS}",
        *[f"--only-rerun={message}" for message in KERNEL_START_FAILURES],
        *map(str, copies),
    ]
    # two kernels of two threads each on two cores wait for each other (pondernet_tutorial.threads)
    env = {**os.environ, "OMP_NUM_THREADS": "1"} if jobs > 1 else None
    return subprocess.run(command, cwd=folder, check=False, env=env).returncode


def check_executed(nb, path: Path, name: str, timeout: int) -> list[tuple[float, int]]:
    """``[(seconds, cell index)]`` of nbmake's executed copy ``nb``, read from ``path``; raises
    ``RuntimeError`` on a stall."""
    seconds = [(cell_seconds(c) or 0.0, i) for i, c in enumerate(nb.cells) if c.cell_type == "code"]
    for took, index in seconds:
        if took >= timeout - 1:
            raise RuntimeError(
                f"{name}: cell {index} ({first_line(nb.cells[index])!r}) returned only at its timeout "
                f"({took:.0f} s of {timeout} s): a reply nbclient did not see until its wait ran out "
                "(a stalled kernel channel, jupyter/nbclient#312), not a finished cell"
            )
    replies = [
        (c.metadata.get("execution", {}).get("shell.execute_reply"), i)
        for i, c in enumerate(nb.cells)
        if c.cell_type == "code"
    ]
    replies = [(reply, i) for reply, i in replies if reply]
    if replies:
        reply, last = max(replies)
        ended = datetime.fromisoformat(reply.replace("Z", "+00:00")).timestamp()
        shutdown = path.stat().st_mtime - ended  # nbmake writes the notebook once the kernel is gone
        if shutdown > SHUTDOWN_SECONDS:
            raise RuntimeError(
                f"{name}: the kernel took {shutdown:.0f} s to shut down after the last cell ({last}): "
                "a kernel that did not exit when asked (as after an ipywidgets cell), waited out by the client"
            )
    return seconds


def add_to_cache(cache_path: Path, source: Path, executed) -> None:
    """Cache the executed outputs under the source notebook's hash, as Jupyter Book's build looks
    them up (code cells and the kernelspec)."""
    import nbformat
    from jupyter_cache import get_cache
    from jupyter_cache.base import CacheBundleIn

    nb = nbformat.read(source, as_version=4)
    for cell, done in zip(nb.cells, executed.cells, strict=True):
        if cell.cell_type == "code":
            cell.outputs = copy.deepcopy(done.outputs)
            cell.execution_count = done.get("execution_count")
    get_cache(str(cache_path)).cache_notebook_bundle(
        CacheBundleIn(nb, str(source.resolve())), check_validity=False, overwrite=True
    )


def main(argv=None) -> int:
    import nbformat

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("notebooks", nargs="*", type=Path, help="default: book/*.ipynb")
    parser.add_argument("--kernel", required=True, help="the kernel to run them in")
    parser.add_argument("--out", type=Path, required=True, help="where the executed notebooks go")
    parser.add_argument("--cache", type=Path, help="Jupyter Book's execution cache to add them to")
    parser.add_argument("--jobs", type=int, default=1, help="notebooks run at once [1]")
    args = parser.parse_args(argv)
    if args.jobs < 1:
        print(f"error: --jobs must be at least 1, got {args.jobs}", file=sys.stderr)
        return 2
    notebooks = [p.resolve() for p in args.notebooks] or sorted((ROOT / "book").glob("*.ipynb"))
    if len({p.name for p in notebooks}) < len(notebooks):
        print("error: two notebooks of one name: run them in two calls", file=sys.stderr)
        return 2
    try:  # each notebook's timeout, as nbmake will take it
        default = default_timeout()
        timeouts = [notebook_timeout(nbformat.read(p, as_version=4), default, p.name) for p in notebooks]
    except ValueError as error:  # a timeout that is not a number of seconds: the input's mistake
        print(f"error: {' '.join(str(error).split())}", file=sys.stderr)
        return 2
    out = args.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    copies = [out / p.name for p in notebooks]
    for path, target in zip(notebooks, copies, strict=True):
        shutil.copyfile(path, target)
    start = time.perf_counter()
    if nbmake(copies, args.kernel, default, args.jobs) != 0:
        print("nbmake: a notebook failed (above); nothing was added to the cache", file=sys.stderr)
        return 1
    print(f"nbmake ran {len(copies)} notebooks in {time.perf_counter() - start:.0f} s")
    slowest, executed = [], []
    for path, target, timeout in zip(notebooks, copies, timeouts, strict=True):
        name = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path
        nb = nbformat.read(target, as_version=4)
        try:
            seconds = check_executed(nb, target, str(name), timeout)
        except RuntimeError as error:
            print(error, file=sys.stderr)
            return 1
        executed.append((path, nb))
        took, index = max(seconds, default=(0.0, None))
        print(
            f"{path.name}: {sum(s for s, _ in seconds):.0f} s in its cells (slowest cell {index}: {took:.0f} s)"
        )
        slowest += [(s, path.name, i, first_line(executed[-1][1].cells[i])) for s, i in seconds]
    if args.cache:
        for path, nb in executed:
            add_to_cache(args.cache, path, nb)
    print("slowest cells:")
    for took, name, index, line in sorted(slowest, reverse=True)[:5]:
        print(f"  {took:6.1f} s  {name} cell {index}: {line}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
