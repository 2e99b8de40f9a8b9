"""The repository URL is declared once (pyproject.toml) and every copy of it agrees; the notebooks'
Colab install line is pinned to the release of the package's version."""

import importlib.util
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
spec = importlib.util.spec_from_file_location("set_repository_url", ROOT / "tools" / "set_repository_url.py")
tool = importlib.util.module_from_spec(spec)
spec.loader.exec_module(tool)
pin_spec = importlib.util.spec_from_file_location(
    "pin_colab_install", ROOT / "tools" / "pin_colab_install.py"
)
pin = importlib.util.module_from_spec(pin_spec)
pin_spec.loader.exec_module(pin)


def test_every_copy_of_the_repository_url_agrees():
    expected = tool.slug(tool.declared_url())
    found = {}
    pattern = re.compile(
        r"(?:github\.com/|colab\.research\.google\.com/github/)([\w.-]+/[\w.-]+?)(?:\.git)?(?=[/\"')\s@]|$)"
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


def test_the_colab_install_line_is_pinned_to_the_package_version():
    import pondernet_tutorial

    assert pin.version() == pondernet_tutorial.__version__
    expected = f"git+https://github.com/{tool.slug(tool.declared_url())}@v{pondernet_tutorial.__version__}"
    for name in (n for n in tool.FILES if n.endswith(".ipynb")):
        lines = [line for line in (ROOT / name).read_text().splitlines() if "%pip install" in line]
        assert lines and all(expected + '\\"' in line for line in lines), (name, lines)
