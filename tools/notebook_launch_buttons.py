"""A Sphinx extension, loaded by ``_config.yml`` (``sphinx.local_extensions``): launch buttons (Colab,
Binder, ...) only on the pages whose source is a Jupyter notebook (``.ipynb``), and the Colab button
opens the notebook's Colab copy.

sphinx-book-theme adds them to every page it can execute, the MyST Markdown chapters included, and
Colab cannot open a ``.md`` file. Its Colab button opens the book's MyST source on ``main``, whose
roles and directives Colab shows as raw text; the Pages workflow publishes a copy of each executed
notebook in plain Markdown (``tools/colab_copies.py``) on the branch ``COLAB_BRANCH``, and the button
opens that copy instead.
"""

from __future__ import annotations

from pathlib import Path

COLAB_BRANCH = "colab"


def colab_copy_url(url: str, branch: str) -> str:
    """``.../github/OWNER/REPO/blob/<branch>/PATH`` -> the same path on ``COLAB_BRANCH``."""
    marker = f"/blob/{branch}/"
    if "colab.research.google.com" not in url or marker not in url:
        return url
    return url.replace(marker, f"/blob/{COLAB_BRANCH}/", 1)


def adjust_launch_buttons(app, pagename, templatename, context, doctree) -> None:
    """Drop the launch buttons of a page whose source is not an ``.ipynb`` file; point the Colab
    button of a notebook's page at its Colab copy."""
    if pagename not in app.env.all_docs:
        return
    buttons = context.get("header_buttons")
    if not buttons:
        return
    if Path(app.env.doc2path(pagename)).suffix != ".ipynb":
        context["header_buttons"] = [b for b in buttons if b.get("label") != "launch-buttons"]
        return
    branch = app.config.html_theme_options.get("repository_branch") or "main"
    for group in buttons:
        if group.get("label") == "launch-buttons":
            for button in group.get("buttons", []):
                if "url" in button:
                    button["url"] = colab_copy_url(button["url"], branch)


def setup(app):
    # After the theme's add_launch_buttons (priority 501), before the page is rendered.
    app.connect("html-page-context", adjust_launch_buttons, priority=502)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
