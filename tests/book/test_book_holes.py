"""A page with holes fails the build (tools/book_holes.py): a notebook that raised is named with the
error its cell raised, and a glued value that no cell glued is named."""

import importlib.util
import logging
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
spec = importlib.util.spec_from_file_location("book_holes", ROOT / "tools" / "book_holes.py")
tool = importlib.util.module_from_spec(spec)
spec.loader.exec_module(tool)


def warn(collector, message, page, subtype):
    record = logging.LogRecord("sphinx.mystnb", logging.WARNING, __file__, 1, message, None, None)
    record.type, record.subtype, record.location = "mystnb", subtype, (page, 3)
    collector.emit(record)


def test_a_failed_notebook_and_a_missing_value_fail_the_build_with_their_pages_named():
    collector = tool.HoleCollector()
    traceback = (
        "Executing notebook failed: CellExecutionError\nTraceback ...\n"
        "\x1b[0;31mMNISTNotFoundError\x1b[0m: MNIST could not be found under /x. Put the four IDX files in /x."
    )
    warn(collector, traceback, "book/06_interpolation", "exec")
    warn(collector, "Notebook exception traceback saved in: /r/06.err.log", "book/06_interpolation", "exec")
    warn(collector, "No key 'acc' found in glue data for this document.", "book/06_interpolation", "glue")
    warn(collector, "No key 'steps' found in glue data for this document.", "book/07_extrapolation", "glue")
    warn(collector, "an unrelated warning", "book/07_extrapolation", "other")
    text = tool.report(collector)
    assert (
        "book/06_interpolation: its notebook failed: MNISTNotFoundError: MNIST could not be found under /x. "
        "Put the four IDX files in /x. (1 glued values missing as a result)" in text
    )
    assert "book/07_extrapolation: glued values missing: steps" in text and "unrelated" not in text
    app = type("App", (), {"book_holes": collector})()
    with pytest.raises(tool.ExtensionError, match="pages with holes"):
        tool.fail_on_holes(app, None)


def test_warnings_that_are_no_holes_pass_the_build():
    """A build whose warnings are neither a failed notebook nor a missing glued value passes, and so does
    one that failed for another reason (Sphinx reports that error itself)."""
    collector = tool.HoleCollector()
    warn(collector, "an unrelated warning", "book/07_extrapolation", "other")
    warn(collector, "duplicate label 'losses'", "book/04_losses", "ref")
    assert (collector.failed, collector.missing) == ({}, {})
    app = type("App", (), {"book_holes": collector})()
    assert tool.fail_on_holes(app, None) is None
    warn(collector, "No key 'steps' found in glue data for this document.", "book/07_extrapolation", "glue")
    assert tool.fail_on_holes(app, RuntimeError("the build failed")) is None
    with pytest.raises(tool.ExtensionError, match="steps"):
        tool.fail_on_holes(app, None)
