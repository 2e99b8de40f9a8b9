"""A Sphinx extension, loaded by ``_config.yml`` (``sphinx.local_extensions``): a page with holes is a
failed build, for the plain ``jupyter-book build .`` too, not only with ``-W``.

A notebook that raises already stops the build (``nb_execution_raise_on_error`` in ``_config.yml``,
with the error and the notebook named). What remains is a ``{glue:text}`` or ``{glue:figure}`` whose
value no cell glued: myst-nb only warns and leaves a blank in the sentence. This extension collects
those warnings and fails the build at its end, naming each page and value.
"""

from __future__ import annotations

import logging

from sphinx.errors import ExtensionError

MARKERS = ("mystnb.glue", "myst-nb.glue", "No key ")


class HoleCollector(logging.Handler):
    def __init__(self):
        super().__init__(level=logging.WARNING)
        self.holes: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        kind = f"{getattr(record, 'type', '') or ''}.{getattr(record, 'subtype', '') or ''}"
        message = record.getMessage()
        if kind.startswith(("mystnb.glue", "myst-nb.glue")) or any(m in message for m in MARKERS):
            location = getattr(record, "location", None) or getattr(record, "docname", "")
            self.holes.append(f"{location}: {message}" if location else message)


def fail_on_holes(app, exception) -> None:
    holes = app.book_holes.holes
    if exception is None and holes:
        raise ExtensionError(
            f"{len(holes)} glued value(s) missing, so pages would show blanks:\n  " + "\n  ".join(holes)
        )


def setup(app):
    app.book_holes = HoleCollector()
    logging.getLogger("sphinx").addHandler(app.book_holes)
    app.connect("build-finished", fail_on_holes)
    return {"parallel_read_safe": False, "parallel_write_safe": True}
