"""The Chromium check of the built book (tools/check_rendering.py) passes a clean page and names each
fault of a broken one: raw TeX, an image that did not load, content wider than the column, a table
cell that pandas cut."""

import base64
import importlib.util
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
spec = importlib.util.spec_from_file_location("check_rendering", ROOT / "tools" / "check_rendering.py")
check = importlib.util.module_from_spec(spec)
spec.loader.exec_module(check)

pytestmark = pytest.mark.skipif(
    not (Path(check.CHROMIUM).is_file() and Path(check.CHROMEDRIVER).is_file())
    or importlib.util.find_spec("selenium") is None,
    reason="needs Debian's chromium and chromium-driver and the selenium package (.ci/run installs them)",
)

# A 1 x 1 PNG, so that the clean page has an image that loads.
PIXEL = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="
)
PAGE = """<!DOCTYPE html><html><head><meta charset="utf-8"><title>t</title></head>
<body style="margin:0"><main style="width:600px; padding:0 10px">{}</main></body></html>"""
CLEAN = PAGE.format(
    '<h1>Clean</h1><p>Prose with an image <img src="pixel.png" alt="a pixel"> and a narrow table.</p>'
    "<table><tr><td>1</td><td>2</td></tr></table>"
    "<pre><code>print(r'\\(code may hold TeX delimiters\\)')</code></pre>"
)
FAULTY = PAGE.format(
    "<h1>Faulty</h1><p>Unrendered math: \\(x\\) here.</p>"
    '<p><img src="missing.png" alt="missing"></p>'
    '<h2>Wide</h2><table class="wide" style="width:1500px"><tr><td>too wide</td></tr></table>'
    "<h2>Cut</h2><table><tr><td>to 99.9%, or no gain in 100,000; ≤ 500,000 upd...</td></tr></table>"
)


@pytest.fixture
def site(tmp_path):
    (tmp_path / "pixel.png").write_bytes(PIXEL)
    (tmp_path / "clean.html").write_text(CLEAN)
    (tmp_path / "faulty.html").write_text(FAULTY)
    return tmp_path


def test_the_checker_passes_a_clean_page_and_names_each_fault_of_a_broken_one(site, tmp_path):
    shot = tmp_path / "shots" / "faulty.png"
    results = check.check_site(site, ["clean.html", "faulty.html"], screenshots={"faulty.html": shot})
    assert results["clean.html"]["faults"] == []
    assert results["clean.html"]["column"] == 600
    faults = results["faulty.html"]["faults"]
    assert any(f.startswith('raw TeX "\\\\("') and "x" in f for f in faults), faults
    assert any(f.startswith("broken image: missing.png") for f in faults), faults
    assert any(f.startswith("wider than the column: table.wide") and 'under "Wide"' in f for f in faults), (
        faults
    )
    assert any(f.startswith("wider than the window: the page scrolls sideways") for f in faults), faults
    assert any(f.startswith('cut table cell: "to 99.9%') and 'under "Cut"' in f for f in faults), faults
    assert len(faults) == 6, faults  # \( and \) of one formula, the image, the table, the page, the cell
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_the_command_line_exits_1_on_a_fault_and_0_on_a_clean_site(site, tmp_path, capsys):
    assert check.main([str(site)]) == 1
    out = capsys.readouterr().out
    assert "faulty.html: 6 fault(s)" in out and "clean.html: ok" in out
    (site / "faulty.html").unlink()
    assert check.main([str(site)]) == 0
    assert check.main([str(tmp_path / "nothing")]) == 2


def test_each_rule_of_width_and_a_math_error_is_named_on_its_own(tmp_path):
    """A mutation sweep found these untested (the faulty page spills 900 px, which every rule sees): a
    20 px spill, a scroll box whose content is wider than it, a clipping box (named itself, its content
    not), and MathJax's error box."""
    page = PAGE.format(
        "<h1>More</h1>"
        '<h2>Spill</h2><div class="spill" style="width:620px">a little too wide</div>'
        '<h2>Scroll</h2><div class="scroller" style="overflow-x:auto; width:600px">'
        '<div style="width:900px">wide content in a scroll box</div></div>'
        '<h2>Clip</h2><div class="clipper" style="overflow-x:hidden; width:600px">'
        '<div class="clipped" style="width:900px">wide content in a clipping box</div></div>'
        "<h2>Maths</h2><p><mjx-merror>Missing close brace</mjx-merror></p>"
    )
    (tmp_path / "more.html").write_text(page)
    faults = check.check_site(tmp_path, ["more.html"])["more.html"]["faults"]
    assert any('div.spill under "Spill" extends 20 px' in f for f in faults), faults
    assert any('div.scroller under "Scroll" holds content 900 px wide' in f for f in faults), faults
    assert any('div.clipper under "Clip" holds content 900 px wide' in f for f in faults), faults
    assert not any("div.clipped" in f for f in faults), faults
    assert any(f.startswith('math error: "Missing close brace"') for f in faults), faults
    assert len(faults) == 4, faults
