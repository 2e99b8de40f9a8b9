"""tools/word_count.py counts prose the way a reader reads: no code, math, outputs or directive bodies."""

import importlib.util
import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
spec = importlib.util.spec_from_file_location("word_count", ROOT / "tools" / "word_count.py")
wc = importlib.util.module_from_spec(spec)
spec.loader.exec_module(wc)


def test_prose_is_counted_and_code_math_and_roles_are_not():
    page = (
        "---\nkernelspec:\n  name: python3\n---\n"
        "(label)=\n# Two words\n\n"
        "One two three $a + b = c$ four.\nFive $x\ny$ six.\n\n"
        "$$\nthis is display math\n$$\n\n"
        "```{code-cell} ipython3\nprint('not prose at all')\n```\n\n"
        "```python\nmore code here\n```\n\n"
        "```{note}\n:class: dropdown\nseven eight\n```\n\n"
        "The value {glue:text}`acc:.1f` counts once, `inline code` not at all, [a link](http://x.y/z).\n"
    )
    # Two words + One two three four Five six + seven eight + The value ROLE counts once not at all a link
    assert wc.prose_words(page) == 2 + 6 + 2 + 10


def test_a_notebook_counts_markdown_cells_only_and_the_table_follows_the_toc(tmp_path, capsys):
    (tmp_path / "_toc.yml").write_text("format: jb-book\nroot: intro\nchapters:\n  - file: nb\n")
    (tmp_path / "intro.md").write_text("# Hello reader\n")
    cells = [
        {"cell_type": "markdown", "source": ["Three prose words $y = 1$"], "metadata": {}},
        {
            "cell_type": "code",
            "source": ["x = 'five words in code'"],
            "metadata": {},
            "outputs": [{"output_type": "stream", "name": "stdout", "text": ["lots of output words"]}],
        },
    ]
    (tmp_path / "nb.ipynb").write_text(json.dumps({"cells": cells, "metadata": {}, "nbformat": 4}))
    assert wc.main(["--root", str(tmp_path)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line.split() for line in lines] == [["2", "intro.md"], ["3", "nb.ipynb"], ["5", "total"]]
    assert wc.main(["--root", str(tmp_path), "--max", "4"]) == 1
    assert wc.main(["--root", str(tmp_path), "--max", "5"]) == 0


def test_math_glue_blocks_tilde_fences_and_comments_are_not_prose():
    """A {math} directive, a {glue} directive's body, a ~~~ fence and an HTML comment hold no prose
    (a mutation sweep dropped each rule unseen)."""
    page = (
        "One two.\n\n"
        "```{math}\nx = y words words\n```\n\n"
        "```{glue} some_name\nglued words here\n```\n\n"
        "~~~{note}\ntilde fenced words\n~~~\n\n"
        "<!-- a comment -> of many words -->\n"
        "Three.\n"
    )
    assert wc.prose_words(page) == 3
