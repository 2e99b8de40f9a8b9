"""Execute the book's notebooks once, in a given kernel, and hand the executed notebooks to the book.

CI runs the notebooks in a Colab-like kernel (the package and its dependencies, no myst-nb, no Jupyter
Book) with this script, then builds the book from the same outputs: ``--cache`` adds each executed
notebook to Jupyter Book's execution cache (``_build/.jupyter_cache``), where the build finds it by
the hash of its code cells and does not execute it again.

Each notebook runs under the cell timeout that the book build uses: its own ``execution.timeout``
metadata if it has one (the notebooks with a training cell), else ``execute.timeout`` of
``_config.yml``. A cell that raises, or runs past the timeout, stops the notebook with a message
naming the notebook and the cell. So does a stall that nbclient waits out without an error: a cell
that returns only at its timeout (a reply seen late, jupyter/nbclient#312), or a kernel that does not
exit when asked after the last cell, which the client waits for and then terminates. The second is
what held the book build for 10 minutes on ``explore_halting``: after its ipywidgets cell (an
``interactive`` with an output widget) ipykernel did not shut down, and the build went on without a
word at the end of the wait; that cell is now tagged ``skip-execution``. The slowest cells are listed
at the end, to size the timeouts from.

    python tools/execute_notebooks.py --kernel NAME --out DIR [--cache _build/.jupyter_cache] [NOTEBOOK ...]
"""

from __future__ import annotations

import argparse
import copy
import math
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


def notebook_timeout(nb, name: str = "the notebook") -> int:
    execution = nb.metadata.get("execution", {})
    if isinstance(execution, dict) and "timeout" in execution:
        return timeout_seconds(execution["timeout"], f"execution.timeout in the metadata of {name}")
    return default_timeout()


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


def execute(path: Path, kernel: str) -> tuple[object, list[tuple[float, int]]]:
    """The executed notebook and ``[(seconds, cell index)]``; raises ``RuntimeError`` naming the cell."""
    import nbformat
    from nbclient import NotebookClient
    from nbclient.exceptions import CellControlSignal, CellExecutionError, CellTimeoutError

    nb = nbformat.read(path, as_version=4)
    timeout = notebook_timeout(nb, path.name)
    running = {}
    client = NotebookClient(
        nb,
        timeout=timeout,
        kernel_name=kernel,
        resources={"metadata": {"path": str(path.parent)}},
        record_timing=True,
        on_cell_start=lambda cell, cell_index: running.update(index=cell_index),
        on_cell_complete=lambda cell, cell_index: running.update(done=time.monotonic(), last=cell_index),
    )
    name = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path
    try:
        client.execute()
        ended = time.monotonic()
    except (CellExecutionError, CellTimeoutError, CellControlSignal) as error:
        index = running.get("index")
        what = "ran past its timeout of" if isinstance(error, CellTimeoutError) else "raised; timeout"
        raise RuntimeError(f"{name}: cell {index} {what} {timeout} s:\n{error}") from error
    shutdown = ended - running.get("done", ended)
    if shutdown > SHUTDOWN_SECONDS:
        raise RuntimeError(
            f"{name}: the kernel took {shutdown:.0f} s to shut down after the last cell ({running.get('last')}): "
            "a kernel that did not exit when asked (as after an ipywidgets cell), waited out by the client"
        )
    seconds = [(cell_seconds(c) or 0.0, i) for i, c in enumerate(nb.cells) if c.cell_type == "code"]
    for took, index in seconds:
        if took >= timeout - 1:
            raise RuntimeError(
                f"{name}: cell {index} ({first_line(nb.cells[index])!r}) returned only at its timeout "
                f"({took:.0f} s of {timeout} s): a reply nbclient did not see until its wait ran out "
                "(a stalled kernel channel, jupyter/nbclient#312), not a finished cell"
            )
    return nb, seconds


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
    args = parser.parse_args(argv)
    notebooks = [p.resolve() for p in args.notebooks] or sorted((ROOT / "book").glob("*.ipynb"))
    slowest = []
    for path in notebooks:
        start = time.perf_counter()
        try:
            nb, seconds = execute(path, args.kernel)
        except RuntimeError as error:
            print(error, file=sys.stderr)
            return 1
        except ValueError as error:  # a timeout that is not a number of seconds: the input's mistake
            print(f"error: {' '.join(str(error).split())}", file=sys.stderr)
            return 2
        target = args.out / path.name
        target.parent.mkdir(parents=True, exist_ok=True)
        nbformat.write(nb, target)
        if args.cache:
            add_to_cache(args.cache, path, nb)
        took, index = max(seconds, default=(0.0, None))
        print(f"{path.name}: {time.perf_counter() - start:.0f} s (slowest cell {index}: {took:.0f} s)")
        slowest += [(s, path.name, i, first_line(nb.cells[i])) for s, i in seconds]
    print("slowest cells:")
    for took, name, index, line in sorted(slowest, reverse=True)[:5]:
        print(f"  {took:6.1f} s  {name} cell {index}: {line}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
