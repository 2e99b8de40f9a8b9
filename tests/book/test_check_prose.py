"""The prose check of the built book (tools/check_prose.py) passes hand-written sentences and names
each mark of a template."""

import importlib.util
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
spec = importlib.util.spec_from_file_location("check_prose", ROOT / "tools" / "check_prose.py")
check = importlib.util.module_from_spec(spec)
spec.loader.exec_module(check)

CLEAN = """<html><body><main><h1>Pointer chasing</h1>
<p>PonderNet's halting follows the difficulty (ρ 0.82–0.90 over three seeds). The verdict is
undetermined, and the steps are in between.</p>
<pre><code>x = `raw` ; y</code></pre><p>Code such as <code>halt_step</code> is fine.</p>
<ul><li>One seed solves it (99.9%), the other stops at 73.1%.</li></ul></main></body></html>"""


def faults(body: str) -> list[str]:
    return [name for name, _ in check.page_faults(f"<html><body><main>{body}</main></body></html>")]


def test_hand_written_prose_passes():
    assert check.page_faults(CLEAN) == []


def test_each_mark_of_a_template_is_named():
    assert faults("<p>PonderNet's halting (λ_p = 0.5) is <em>follows difficulty</em> with ρ 0.84.</p>") == [
        "a verdict used as a noun after 'is'"
    ]
    assert faults("<p>ACT τ=0.01 's is fine.</p>") == ["a possessive after a glued label"]
    assert faults("<p>Trained on `beyond`, it fails.</p>") == ["a literal backtick"] * 2
    assert faults("<li>The accuracy is , and the mean λ_n stays between and .</li>") == [
        "a missing number",
        "a missing number",
    ]


def test_a_paragraph_made_only_of_glued_text_is_named():
    glued = '<span class="pasted-text">{}</span>'
    only = "<p>" + glued.format("PonderNet solves it") + ", " + glued.format("99.9%") + ".</p>"
    assert faults(only) == ["a paragraph made only of glued text"]
    written = "<p>The network answers " + glued.format("99.9%") + " of the vectors.</p>"
    assert faults(written) == []
    assert faults("<table><tr><td>" + glued.format("99.9%") + "</td></tr></table>") == []  # a table cell


def test_a_sentence_said_twice_on_a_page_is_named():
    said = "They trained outside the book, one thread each, for four hours."
    assert faults(f"<p>{said}</p><p>The curves are flat. {said}</p>") == ["a sentence said twice"]
    assert faults("<p>Both seeds fail.</p><li>Both seeds fail.</li>") == []  # short: may come back
    row = "<tr><td>pointer chasing, no exit bit: test, k 1 to 8 and more</td></tr>"
    assert faults(f"<table>{row}{row}</table>") == []  # a table's labels repeat


def test_the_command_line(tmp_path, capsys):
    (tmp_path / "clean.html").write_text(CLEAN, encoding="utf-8")
    assert check.main([str(tmp_path)]) == 0
    (tmp_path / "bad.html").write_text("<p>ACT's halting is does not solve here.</p>", encoding="utf-8")
    assert check.main([str(tmp_path)]) == 1
    assert "bad.html: a verdict used as a noun" in capsys.readouterr().out
    assert check.main([str(tmp_path / "nothing")]) == 2


@pytest.mark.parametrize("noun", ["follows difficulty", "does not solve", "wrong direction", "fixed depth"])
def test_every_verdict_used_as_a_noun_is_named_in_either_case(noun):
    """Each of the rules' verdict words (the book's four), in lower case and capitalised."""
    assert faults(f"<p>Its halting is {noun} here.</p>") == ["a verdict used as a noun after 'is'"]
    assert faults(f"<p>Its halting Is {noun.capitalize()} here.</p>") == [
        "a verdict used as a noun after 'is'"
    ]


def test_a_fault_in_a_table_cell_is_named():
    assert faults("<table><tr><td>ACT τ=0.01 's halting</td></tr></table>") == [
        "a possessive after a glued label"
    ]
    assert faults("<table><tr><th>Trained on `beyond`</th></tr></table>") == ["a literal backtick"] * 2
