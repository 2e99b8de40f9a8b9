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


def code(source, tags=(), outputs=()):
    return {"cell_type": "code", "metadata": {"tags": list(tags)}, "source": source, "outputs": list(outputs)}


def test_what_the_book_hides_is_collapsed_and_what_it_removes_is_dropped():
    """Issue 40: every code cell was expanded in Colab, 71 glue/claim lines in 12_parity_paper's copy."""
    table = {
        "output_type": "execute_result",
        "data": {"text/html": "<table><tr></tr></table>"},
        "metadata": {},
    }
    figure = {"output_type": "display_data", "data": {"image/png": "PNG"}, "metadata": {}}
    executed = notebook("text")
    executed["cells"] += [
        code("# Load the runs\nruns = 1\nglue('n', runs)\nruns", ["hide-input"], [table]),
        code("glue('m', 2)\nclaim(True, 'a sentence')", ["remove-cell"]),
        code(
            "show('f', fig)\nprint('noise')",
            ["hide-input", "remove-output"],
            [figure, glue_output("f", {"image/png": "PNG"})],
        ),
        {"cell_type": "markdown", "metadata": {}, "source": "```{glue:figure} f\nThe figure.\n```"},
        code("detail()", ["hide-input", "hide-output"], [table, table]),
        code("runs + 1"),
    ]
    copy, faults = tool.colab_copy(executed, "book/nb", resolver(), ROOT / "book")
    assert faults == []
    load, drawn, _, folded, shown = copy["cells"][-5:]
    assert (
        load["source"] == "# @title Load the runs { display-mode: \"form\" }\nruns = 1\nglue('n', runs)\nruns"
    )
    assert load["metadata"]["cellView"] == "form" and load["outputs"] == [table]
    assert all("claim(" not in "".join(c["source"]) for c in copy["cells"])  # the removed cell is gone
    assert drawn["source"].startswith("# @title The code of the figure below") and drawn["outputs"] == [
        figure
    ]
    assert folded["outputs"][0]["data"]["text/html"].startswith("<details><summary>")
    assert shown == code("runs + 1")


@pytest.mark.parametrize(
    "cell, fault",
    [
        (code("x = 1\nglue('x', x)"), "shows the book's bookkeeping: \"glue('x', x)\""),
        (code("claim(x > 0, 'x is positive')"), "shows the book's bookkeeping"),
        (code("x = 1", ["hide-input"]), "shows the code the book hides (hide-input)"),
        (code("x = 1", ["remove-cell"]), "shows a cell the book removes"),
        (  # collapsed, but drawing nothing the book shows
            {
                **code('# @title T { display-mode: "form" }\nx = 1'),
                "metadata": {"tags": ["remove-cell"], "cellView": "form"},
            },
            "shows a cell the book removes",
        ),
    ],
)
def test_a_copy_that_shows_bookkeeping_is_a_fault(cell, fault):
    assert fault in " ".join(tool.bookkeeping_shown({"cells": [cell]}))


def test_a_dropped_cell_that_a_kept_cell_needs_is_a_fault():
    executed = notebook("text")
    executed["cells"] += [
        code("import os\nlimit = 3\nglue('limit', limit)", ["remove-cell"]),
        code("print(limit)"),
    ]
    _, faults = tool.colab_copy(executed, "book/nb", resolver(), ROOT / "book")
    assert faults == ["cell 3 is dropped (remove-cell), but a kept cell reads limit, which it binds"]


def test_a_copy_much_taller_than_the_book_page_is_a_fault(monkeypatch):
    executed = notebook("text")
    executed["cells"].append(code("\n".join(f"x{i} = {i}" for i in range(300)), ["hide-input"]))
    assert tool.colab_copy(executed, "book/nb", resolver(), ROOT / "book")[1] == []
    monkeypatch.setattr(tool, "collapse", lambda cell: None)  # the copy shows the 300 lines
    faults = tool.colab_copy(executed, "book/nb", resolver(), ROOT / "book")[1]
    assert any("times): collapse or drop what the book hides" in f for f in faults), faults
