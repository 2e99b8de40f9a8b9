"""CI's one execution of the notebooks (tools/execute_notebooks.py), through nbmake: a failing cell is
named, a kernel that does not shut down is a failure, and the outputs land in the book's execution
cache, where the build finds them by the source notebook's code."""

import importlib.util
import re
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parents[2]
spec = importlib.util.spec_from_file_location("execute_notebooks", ROOT / "tools" / "execute_notebooks.py")
tool = importlib.util.module_from_spec(spec)
spec.loader.exec_module(tool)

pytestmark = pytest.mark.slow  # starts kernels


def write_notebook(path: Path, *sources: str) -> Path:
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nb.cells = [nbformat.v4.new_markdown_cell("# A title")] + [nbformat.v4.new_code_cell(s) for s in sources]
    nbformat.write(nb, path)
    return path


def run(tmp_path, *notebooks, cache=None):
    options = ["--cache", str(cache)] if cache else []
    return tool.main([*map(str, notebooks), "--kernel", "python3", "--out", str(tmp_path / "out"), *options])


def test_a_cell_that_raises_fails_nbmake_and_is_named(tmp_path, capfd):
    path = write_notebook(tmp_path / "nb.ipynb", "x = 1", "raise ValueError('no MNIST here')")
    assert run(tmp_path, path, cache=tmp_path / "cache") == 1
    out, err = capfd.readouterr()
    assert "FAILED" in out and "nb.ipynb" in out and "no MNIST here" in out
    assert "nothing was added to the cache" in err and not (tmp_path / "cache").exists()


def test_a_kernel_that_does_not_shut_down_is_a_failure(tmp_path, monkeypatch, capfd):
    path = write_notebook(tmp_path / "nb.ipynb", "x = 1")
    monkeypatch.setattr(tool, "SHUTDOWN_SECONDS", -1)  # any shutdown counts as too long
    assert run(tmp_path, path) == 1
    assert re.search(
        r"nb.ipynb: the kernel took \d+ s to shut down after the last cell \(1\)", capfd.readouterr().err
    )


def test_nbmake_runs_each_notebook_once_and_its_outputs_go_into_the_cache(tmp_path, capfd):
    from jupyter_cache import get_cache

    path = write_notebook(tmp_path / "nb.ipynb", "print(6 * 7)")
    counter = write_notebook(tmp_path / "count.ipynb", f"open({str(tmp_path / 'runs')!r}, 'a').write('x')")
    assert run(tmp_path, path, counter, cache=tmp_path / "cache") == 0
    out = capfd.readouterr().out
    assert "nb.ipynb::nb.ipynb PASSED" in out and "count.ipynb::count.ipynb PASSED" in out
    assert (tmp_path / "runs").read_text() == "x"  # executed once
    assert nbformat.read(path, as_version=4).cells[1].outputs == []  # the source is left as it was
    source = nbformat.read(path, as_version=4)
    source.cells[0].source = "# Another title"  # Markdown does not count, as in the book's build
    _, merged = get_cache(str(tmp_path / "cache")).merge_match_into_notebook(source)
    assert merged.cells[1].outputs[0]["text"] == "42\n"


def test_two_jobs_run_the_notebooks_side_by_side_on_one_thread_each(tmp_path, capfd):
    from jupyter_cache import get_cache

    threads = "import os\nprint(os.environ.get('OMP_NUM_THREADS'))"
    paths = [write_notebook(tmp_path / f"nb{i}.ipynb", threads) for i in range(2)]
    out = tmp_path / "out"
    assert tool.main([*map(str, paths), "--kernel", "python3", "--out", str(out), "--jobs", "2", "--cache", str(tmp_path / "cache")]) == 0  # fmt: skip
    assert re.search(r"\[gw[01]\].*PASSED", capfd.readouterr().out)  # pytest-xdist's workers ran them
    for path in paths:
        assert nbformat.read(out / path.name, as_version=4).cells[1].outputs[0]["text"] == "1\n"
        _, merged = get_cache(str(tmp_path / "cache")).merge_match_into_notebook(
            nbformat.read(path, as_version=4)
        )
        assert merged.cells[1].outputs[0]["text"] == "1\n"
    refused = tmp_path / "refused"
    assert tool.main([*map(str, paths), "--kernel", "python3", "--out", str(refused), "--jobs", "0"]) == 2
    assert not refused.exists()  # refused before anything is copied


def test_a_kernel_that_does_not_start_is_started_again_and_a_failing_cell_is_not(
    tmp_path, monkeypatch, capfd
):
    """Two kernels started at once may take the same port and one never answers (nbmake#129): seen once
    in eight CI runs as "Kernel didn't respond in 60 seconds", which failed the build. A kernel that
    dies at its first start is started again; a cell that raises still fails at once. Break: drop
    --reruns (or --only-rerun's messages) from nbmake's command."""
    import json
    import sys

    marker = tmp_path / "started-once"
    launcher = tmp_path / "launch.py"  # dies at its first start, as a kernel that lost its port
    launcher.write_text(
        "import pathlib, runpy, sys\n"
        f"marker = pathlib.Path({str(marker)!r})\n"
        "if not marker.exists():\n"
        "    marker.write_text('')\n"
        "    sys.exit(1)\n"
        "sys.argv[0] = 'ipykernel_launcher'\n"
        "runpy.run_module('ipykernel_launcher', run_name='__main__')\n"
    )
    spec = tmp_path / "share" / "jupyter" / "kernels" / "flaky"
    spec.mkdir(parents=True)
    argv = [sys.executable, str(launcher), "-f", "{connection_file}"]
    (spec / "kernel.json").write_text(
        json.dumps({"argv": argv, "display_name": "flaky", "language": "python"})
    )
    monkeypatch.setenv("JUPYTER_PATH", str(tmp_path / "share" / "jupyter"))
    path = write_notebook(tmp_path / "nb.ipynb", "print(6 * 7)")
    assert tool.main([str(path), "--kernel", "flaky", "--out", str(tmp_path / "out")]) == 0
    assert marker.exists() and "RERUN" in capfd.readouterr().out
    assert nbformat.read(tmp_path / "out" / "nb.ipynb", as_version=4).cells[1].outputs[0]["text"] == "42\n"
    failing = write_notebook(
        tmp_path / "bad.ipynb", f"open({str(tmp_path / 'tries')!r}, 'a').write('x')", "1 / 0"
    )
    assert tool.main([str(failing), "--kernel", "flaky", "--out", str(tmp_path / "out2")]) == 1
    assert (tmp_path / "tries").read_text() == "x"  # run once: a failing cell is not run again
