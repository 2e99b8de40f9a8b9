"""Set the book's GitHub repository in every place that needs it.

The repository is declared once, as ``Repository`` under ``[project.urls]`` in ``pyproject.toml``. The
Colab badges and install cells of the notebooks, ``_config.yml`` (launch and repository buttons) and the
README need the literal URL; this script rewrites them all from the old value to a new one, and
``tests/test_repository_url.py`` checks that they agree.

    python tools/set_repository_url.py https://github.com/OWNER/REPO
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FILES = [
    "pyproject.toml",
    "_config.yml",
    "README.md",
    *sorted(str(p.relative_to(ROOT)) for p in (ROOT / "book").glob("*.ipynb")),
]
URL = re.compile(r"^https://github\.com/([\w.-]+)/([\w.-]+)$")


def declared_url() -> str:
    match = re.search(r'^Repository = "([^"]+)"', (ROOT / "pyproject.toml").read_text(), re.MULTILINE)
    if not match:
        raise SystemExit("pyproject.toml declares no Repository under [project.urls].")
    return match.group(1)


def slug(url: str) -> str:
    match = URL.match(url)
    if not match:
        raise SystemExit(f"expected https://github.com/OWNER/REPO, got {url!r}")
    return f"{match.group(1)}/{match.group(2)}"


def main(argv=None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print(__doc__)
        return 2
    old, new = declared_url(), args[0].rstrip("/")
    old_slug, new_slug = slug(old), slug(new)
    for name in FILES:
        path = ROOT / name
        text = path.read_text()
        updated = text.replace(old, new).replace(f"github/{old_slug}/", f"github/{new_slug}/")
        if updated != text:
            path.write_text(updated)
            print(f"updated {name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
