"""A Sphinx extension, loaded by ``_config.yml`` (``sphinx.local_extensions``): launch buttons (Colab,
Binder, ...) only on the pages whose source is a Jupyter notebook (``.ipynb``).

sphinx-book-theme adds them to every page it can execute, the MyST Markdown chapters included, and
Colab cannot open a ``.md`` file.
"""

from __future__ import annotations

from pathlib import Path


def drop_launch_buttons(app, pagename, templatename, context, doctree) -> None:
    """Remove the theme's launch buttons from a page whose source is not an ``.ipynb`` file."""
    if pagename not in app.env.all_docs or Path(app.env.doc2path(pagename)).suffix == ".ipynb":
        return
    buttons = context.get("header_buttons")
    if buttons:
        context["header_buttons"] = [b for b in buttons if b.get("label") != "launch-buttons"]


def setup(app):
    # After the theme's add_launch_buttons (priority 501), before the page is rendered.
    app.connect("html-page-context", drop_launch_buttons, priority=502)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
