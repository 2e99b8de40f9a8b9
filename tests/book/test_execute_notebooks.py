"""CI's one execution of the notebooks (tools/execute_notebooks.py): a failing cell is named, a kernel
that does not shut down is a failure, and the outputs land in the book's execution cache, where the
build finds them by the source notebook's code."""

import importlib.util
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


def test_a_cell_that_raises_is_named(tmp_path):
    path = write_notebook(tmp_path / "nb.ipynb", "x = 1", "raise ValueError('no MNIST here')")
    with pytest.raises(RuntimeError, match=r"nb.ipynb: cell 2 raised; timeout \d+ s:[\s\S]*no MNIST here"):
        tool.execute(path, "python3")


def test_a_kernel_that_does_not_shut_down_is_a_failure(tmp_path, monkeypatch):
    path = write_notebook(tmp_path / "nb.ipynb", "x = 1")
    monkeypatch.setattr(tool, "SHUTDOWN_SECONDS", -1)  # any shutdown counts as too long
    with pytest.raises(
        RuntimeError, match=r"nb.ipynb: the kernel took \d+ s to shut down after the last cell \(1\)"
    ):
        tool.execute(path, "python3")


def test_the_outputs_go_into_the_cache_under_the_source_notebook(tmp_path):
    from jupyter_cache import get_cache

    path = write_notebook(tmp_path / "nb.ipynb", "print(6 * 7)")
    executed, seconds = tool.execute(path, "python3")
    assert [i for _, i in seconds] == [1]
    tool.add_to_cache(tmp_path / "cache", path, executed)
    source = nbformat.read(path, as_version=4)
    source.cells[0].source = "# Another title"  # Markdown does not count, as in the book's build
    _, merged = get_cache(str(tmp_path / "cache")).merge_match_into_notebook(source)
    assert merged.cells[1].outputs[0]["text"] == "42\n"
