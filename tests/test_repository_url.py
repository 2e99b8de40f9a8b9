"""The repository URL is declared once (pyproject.toml) and every copy of it agrees."""

import importlib.util
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location("set_repository_url", ROOT / "tools" / "set_repository_url.py")
tool = importlib.util.module_from_spec(spec)
spec.loader.exec_module(tool)


def test_every_copy_of_the_repository_url_agrees():
    expected = tool.slug(tool.declared_url())
    found = {}
    pattern = re.compile(
        r"(?:github\.com/|colab\.research\.google\.com/github/)([\w.-]+/[\w.-]+?)(?:\.git)?(?=[/\"')\s]|$)"
    )
    for name in tool.FILES:
        for match in pattern.finditer((ROOT / name).read_text()):
            found.setdefault(match.group(1), []).append(name)
    assert found, "no repository URL found"
    assert set(found) == {expected}, found
    notebooks = [n for n in tool.FILES if n.endswith(".ipynb")]
    for name in notebooks:  # every notebook has its Colab badge and install cell
        text = (ROOT / name).read_text()
        assert f"colab.research.google.com/github/{expected}/blob/main/{name}" in text, name
        assert f"git+https://github.com/{expected}" in text, name
