"""Pin the notebooks' Colab install line to the package's release: ``...@v<version>``.

The version is declared once, as ``__version__`` in ``pondernet_tutorial/__init__.py`` (``pyproject.toml``
reads it from there); its release is the repository's tag ``v<version>``. Each notebook installs the
package on Colab with

    %pip install -q "pondernet_tutorial @ git+https://github.com/OWNER/REPO@v<version>"

so that a reader gets the code the notebook was written for, not whatever the repository holds today.
After changing the version, run

    python tools/pin_colab_install.py

which rewrites the tag in every notebook; ``tests/test_repository_url.py`` checks that they agree.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
INSTALL = re.compile(
    r"(pondernet_tutorial @ git\+https://github\.com/[\w.-]+/[\w.-]+?)(?:@[\w.-]+)?(?=\\?\")"
)


def version() -> str:
    """``__version__`` of the package, read from its source (nothing is imported)."""
    text = (ROOT / "pondernet_tutorial" / "__init__.py").read_text()
    match = re.search(r'^__version__ = "([^"]+)"', text, re.MULTILINE)
    if not match:
        raise SystemExit("pondernet_tutorial/__init__.py declares no __version__.")
    return match.group(1)


def tag() -> str:
    """The repository tag of this version's release."""
    return f"v{version()}"


def main() -> int:
    pinned = tag()
    for path in sorted((ROOT / "book").glob("*.ipynb")):
        text = path.read_text()
        updated, found = INSTALL.subn(lambda m: f"{m.group(1)}@{pinned}", text)
        if not found:
            print(f"{path.relative_to(ROOT)}: no Colab install line", file=sys.stderr)
            return 1
        if updated != text:
            path.write_text(updated)
            print(f"pinned {path.relative_to(ROOT)} to {pinned}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
