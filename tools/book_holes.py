"""A Sphinx extension, loaded by ``_config.yml`` (``sphinx.local_extensions``): a page with holes is a
failed build, for the plain ``jupyter-book build .`` too, not only with ``-W``.

myst-nb only warns when a notebook fails to execute or when a ``{glue:text}`` or ``{glue:figure}``
names a value that no cell glued, and the page then shows blanks ("...is , and the mean λ_n stays
between and..."). This extension collects those warnings and fails the build at its end with one
short message per page: the notebook, the error its cell raised (for a missing MNIST, the package's
message says where to put the files), and how many glued values are missing.
"""

from __future__ import annotations

import logging
import re

from sphinx.errors import ExtensionError

ANSI = re.compile(r"\x1b\[[0-9;]*m")
ERROR_LINE = re.compile(r"^[\w.]*(?:Error|Exception|Interrupt|Exit)\b[^:\n]*: .+$", re.MULTILINE)
GLUE_KEY = re.compile(r"No key '([^']+)' found in glue data")


def docname_of(record: logging.LogRecord) -> str:
    location = getattr(record, "location", None)
    if isinstance(location, tuple):
        location = location[0]
    return str(location or getattr(record, "docname", "") or "?").split(":")[0]


class HoleCollector(logging.Handler):
    def __init__(self):
        super().__init__(level=logging.WARNING)
        self.failed: dict[str, str] = {}  # page -> the error of its notebook
        self.missing: dict[str, list[str]] = {}  # page -> glued values it names and no cell glued

    def emit(self, record: logging.LogRecord) -> None:
        message = ANSI.sub("", record.getMessage())
        kind = f"{getattr(record, 'type', '') or ''}.{getattr(record, 'subtype', '') or ''}"
        if message.startswith("Executing notebook failed") or kind in ("mystnb.exec", "myst-nb.exec"):
            errors, page = ERROR_LINE.findall(message), docname_of(record)
            if errors:  # the traceback's last error: what the cell raised
                self.failed[page] = errors[-1]
            elif page not in self.failed:  # myst-nb's other lines about it (where the log went)
                self.failed[page] = message.splitlines()[0]
        elif kind.startswith(("mystnb.glue", "myst-nb.glue")) or GLUE_KEY.search(message):
            key = GLUE_KEY.search(message)
            self.missing.setdefault(docname_of(record), []).append(key.group(1) if key else message)


def report(collector: HoleCollector) -> str:
    lines = []
    for page in sorted(set(collector.failed) | set(collector.missing)):
        missing = collector.missing.get(page, [])
        if page in collector.failed:
            line = f"{page}: its notebook failed: {collector.failed[page]}"
            if missing:
                line += f" ({len(missing)} glued values missing as a result)"
        else:
            line = f"{page}: glued values missing: {', '.join(missing)}"
        lines.append(line)
    return "the book has pages with holes, so the build fails:\n  " + "\n  ".join(lines)


def fail_on_holes(app, exception) -> None:
    collector = app.book_holes
    if exception is None and (collector.failed or collector.missing):
        raise ExtensionError(report(collector))


def setup(app):
    app.book_holes = HoleCollector()
    logging.getLogger("sphinx").addHandler(app.book_holes)
    app.connect("build-finished", fail_on_holes)
    return {"parallel_read_safe": False, "parallel_write_safe": True}
