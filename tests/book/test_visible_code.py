"""The code a page shows teaches: no visible code cell of the book holds the bookkeeping of its
sentences, a glue( or claim( call (issue 40: chapters 02 and 05 showed glue calls in visible cells)."""

import importlib.util
import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BOOK = ROOT / "book"
spec = importlib.util.spec_from_file_location("colab_copies", ROOT / "tools" / "colab_copies.py")
colab_copies = importlib.util.module_from_spec(spec)
spec.loader.exec_module(colab_copies)
PAGES = [
    *(
        BOOK / f"{name}.md"
        for name in (
            "01_motivation",
            "02_formal_definition",
            "04_losses",
            "05_lightning_implementation",
            "09_act_and_pondernet",
            "cheat_sheet",
            "popular_implementations",
        )
    ),
    *BOOK.glob("appendix_*.md"),
    *BOOK.glob("*.ipynb"),
]
# the tags under which the book shows no code, and what counts as bookkeeping: the Colab copies' own
HIDDEN = {"remove-cell", *colab_copies.COLLAPSED_TAGS}
BOOKKEEPING = colab_copies.BOOKKEEPING
CELL = re.compile(r"^```\{code-cell\}[^\n]*\n(?P<body>.*?)^```", re.S | re.M)


def visible_cells(path: Path) -> list[str]:
    """The source of each code cell the page shows with its code."""
    if path.suffix == ".ipynb":
        cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
        return [
            "".join(c["source"])
            for c in cells
            if c["cell_type"] == "code" and not HIDDEN & set(c["metadata"].get("tags", []))
        ]
    shown = []
    for match in CELL.finditer(path.read_text(encoding="utf-8")):
        tags = re.search(r"^:tags:\s*\[(.*?)\]", match["body"], re.M)
        if not HIDDEN & {t.strip().strip("'\"") for t in (tags[1].split(",") if tags else [])}:
            shown.append(match["body"])
    return shown


@pytest.mark.parametrize("path", sorted(PAGES), ids=lambda p: p.name)
def test_no_visible_code_cell_holds_bookkeeping(path):
    lines = [line for cell in visible_cells(path) for line in cell.splitlines() if BOOKKEEPING.search(line)]
    assert not lines, f"{path.name} shows its bookkeeping: {lines}"


# the pages (not notebooks) whose shown code a reader pastes: it runs on its own, in order, in a fresh
# Python (the reuse review of stop 60: chapter 05's first cell used torch, and its plateau cell
# DEFAULTS, imported only in removed cells; chapters 02, 04 and 09, the popular implementations and the
# float16 appendix took their imports and settings from removed cells too)
STANDALONE = sorted(path for path in PAGES if path.suffix == ".md")


@pytest.mark.parametrize("path", STANDALONE, ids=lambda p: p.name)
def test_the_shown_code_runs_as_a_reader_pastes_it(path, tmp_path):
    import subprocess
    import sys

    cells = [re.sub(r"^:[a-z-]+:.*\n", "", cell, flags=re.M) for cell in visible_cells(path)]
    code = "import matplotlib\nmatplotlib.use('Agg')\n" + "\n".join(cells)
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path, timeout=600
    )
    assert done.returncode == 0, done.stderr[-2000:]
