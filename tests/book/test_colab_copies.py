"""The notebooks as Colab opens them (tools/colab_copies.py): glued values in the sentences, captions
under the figures their cells display, links to the published pages, and a fault for anything left."""

import importlib.util
from pathlib import Path
from types import SimpleNamespace

import pytest

ROOT = Path(__file__).resolve().parents[2]


def load_tool(name):
    spec = importlib.util.spec_from_file_location(name, ROOT / "tools" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


tool = load_tool("colab_copies")
buttons = load_tool("notebook_launch_buttons")
BASE = "https://owner.github.io/repo/"


class Title:
    def __init__(self, text):
        self.text = text

    def astext(self):
        return self.text


def resolver():
    env = SimpleNamespace(
        titles={"book/chapter": Title("A chapter"), "book/bibliography": Title("Bibliography")},
        domaindata={
            "std": {
                "labels": {"fig-x": ("book/chapter", "fig-x", "The figure's caption")},
                "anonlabels": {"fig-x": ("book/chapter", "fig-x")},
            }
        },
    )
    return tool.Resolver(env, BASE, ROOT / "book" / "references.bib")


def glue_output(name, data):
    prefix = tool.GLUE_PREFIX
    return {
        "output_type": "display_data",
        "data": {prefix + k: v for k, v in data.items()},
        "metadata": {"scrapbook": {"name": name, "mime_prefix": prefix}},
    }


def notebook(markdown, figure_shown=True, tags=()):
    outputs = [glue_output("acc", {"text/plain": "0.98765"}), glue_output("fig", {"image/png": "PNG"})]
    if figure_shown:
        outputs.append({"output_type": "display_data", "data": {"image/png": "PNG"}, "metadata": {}})
    return {
        "cells": [
            {"cell_type": "markdown", "metadata": {"tags": ["remove-cell"]}, "source": "[badge](x)"},
            {"cell_type": "code", "metadata": {}, "source": "show('fig', fig)", "outputs": outputs},
            {"cell_type": "markdown", "metadata": {"tags": list(tags)}, "source": markdown},
        ],
        "metadata": {},
        "nbformat": 4,
        "nbformat_minor": 5,
    }


def copy_of(markdown, **kwargs):
    copy, faults = tool.colab_copy(notebook(markdown, **kwargs), "book/nb", resolver(), ROOT / "book")
    return copy, faults


def test_roles_become_text_and_links():
    copy, faults = copy_of(
        "(a-label)=\n# Title\n\nAccuracy {glue:text}`acc:.1%` ({doc}`chapter`, {ref}`fig-x`, "
        "{ref}`that figure <fig-x>`, {doc}`here </book/chapter>`), as {cite:t}`graves2016act` "
        "found {cite:p}`banino2021pondernet`."
    )
    assert faults == []
    text = copy["cells"][-1]["source"]
    assert text.startswith("# Title") and "Accuracy 98.8%" in text
    assert f"[A chapter]({BASE}book/chapter.html)" in text
    assert f"[The figure's caption]({BASE}book/chapter.html#fig-x)" in text
    assert (
        f"[that figure]({BASE}book/chapter.html#fig-x)" in text and f"[here]({BASE}book/chapter.html)" in text
    )
    assert "Graves (2016)" in text and "Banino et al. 2021" in text


def test_a_glued_figure_becomes_its_caption_under_the_displayed_figure():
    copy, faults = copy_of(
        "```{glue:figure} fig\n:name: fig-x\n:alt: A plot.\n\nThe loss, as it\ntrains.\n```\n\nAfter."
    )
    assert faults == []
    assert copy["cells"][-1]["source"] == "*Figure: The loss, as it trains.*\n\nAfter."
    code = copy["cells"][0]  # the badge cell (remove-cell) is gone
    assert code["cell_type"] == "code" and code["outputs"] == [
        {"output_type": "display_data", "data": {"image/png": "PNG"}, "metadata": {}}
    ]  # the glued records are dropped, the displayed figure stays


def test_a_glued_figure_that_no_cell_displays_is_a_fault():
    _, faults = copy_of("```{glue:figure} fig\nCaption.\n```", figure_shown=False)
    assert len(faults) == 1 and "'fig' is not displayed" in faults[0]


@pytest.mark.parametrize(
    "markdown, fault",
    [
        ("Accuracy {glue:text}`nothing:.1f`.", "'nothing' is missing"),
        ("See {doc}`nowhere`.", "unknown page"),
        ("```{mermaid}\ngraph\n```", "no plain-Markdown form"),
        ("A {glue:md}`acc`.", "MyST markup left"),
        ("A {term}`word`.", "MyST markup left"),
    ],
)
def test_what_cannot_be_turned_into_markdown_is_a_fault(markdown, fault):
    _, faults = copy_of(markdown)
    assert faults and fault in " ".join(faults), faults


def test_a_dropdown_and_an_include_become_details_and_code():
    copy, faults = copy_of(
        "```{admonition} Solution\n:class: dropdown\n\nIt is {glue:text}`acc:.2f`.\n```\n\n"
        "```{literalinclude} ../pondernet_tutorial/minimal.py\n:language: python\n:pyobject: halting_log_p\n```"
    )
    assert faults == []
    text = copy["cells"][-1]["source"]
    assert "<details><summary><b>Solution</b></summary>\n\nIt is 0.99.\n\n</details>" in text
    assert "```python\ndef halting_log_p(" in text


def test_the_colab_button_opens_the_colab_branch():
    url = "https://colab.research.google.com/github/o/r/blob/main/book/nb.ipynb"
    assert (
        buttons.colab_copy_url(url, "main")
        == "https://colab.research.google.com/github/o/r/blob/colab/book/nb.ipynb"
    )
    assert buttons.colab_copy_url("https://mybinder.org/v2/gh/o/r/main", "main").endswith("/main")


def test_the_install_line_installs_the_commit_the_copy_was_built_from():
    """Before: every copy installed @main, which may have moved on from the outputs the copy shows."""
    install = '%pip install -q "pondernet_tutorial @ git+https://github.com/owner/repo@main"\n'
    executed = notebook("text")
    executed["cells"].insert(0, {"cell_type": "code", "metadata": {}, "source": install, "outputs": []})
    copy, faults = tool.colab_copy(executed, "book/nb", resolver(), ROOT / "book", commit="0123abc")
    assert not faults
    assert copy["cells"][0]["source"] == install.replace("@main", "@0123abc")
