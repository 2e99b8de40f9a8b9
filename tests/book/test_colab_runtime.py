"""A notebook asks Colab for a GPU only where its "On Colab" cell says that a GPU helps (before: 9 of 10
asked for one while their first cell said that a CPU runtime is enough)."""

import json
from pathlib import Path

import pytest

BOOK = Path(__file__).resolve().parents[2] / "book"
NOTEBOOKS = sorted(BOOK.glob("*.ipynb"))


def on_colab(notebook: dict) -> str:
    (cell,) = [
        "".join(c["source"]) for c in notebook["cells"] if "".join(c["source"]).startswith("**On Colab:**")
    ]
    return cell


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_a_notebook_asks_for_a_gpu_only_where_it_says_one_helps(path):
    notebook = json.loads(path.read_text(encoding="utf-8"))
    says_cpu_is_enough = "a CPU runtime is enough" in on_colab(notebook) or "any runtime" in on_colab(
        notebook
    )
    asks_for_gpu = notebook["metadata"].get("accelerator") == "GPU" or "gpuType" in notebook["metadata"].get(
        "colab", {}
    )
    assert not (asks_for_gpu and says_cpu_is_enough), f"{path.name} asks Colab for a GPU it says it needs not"
