"""Pin the notebooks' Colab install line to a ref that exists in this repository: ``...@main``.

Each notebook installs the package on Colab with

    %pip install -q "pondernet_tutorial @ git+https://github.com/OWNER/REPO@main"

The repository has no release tag yet, so the line names the branch ``main``, the branch the Colab badges
open. When a release is tagged, set ``REF`` below to the tag and run

    python tools/pin_colab_install.py

which rewrites the ref in every notebook; ``tests/test_repository_url.py`` checks with git that the ref
named by every install line exists.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
REF = "main"
INSTALL = re.compile(
    r"(pondernet_tutorial @ git\+https://github\.com/[\w.-]+/[\w.-]+?)(?:@([\w./-]+))?(?=\\?\")"
)


def main() -> int:
    pinned = REF
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
