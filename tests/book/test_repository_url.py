"""The repository URL is declared once (pyproject.toml) and every copy of it agrees; the notebooks'
Colab install line names a ref (pin.REF) that git finds in this repository."""

import importlib.util
import re
import subprocess
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
buttons_spec = importlib.util.spec_from_file_location(
    "notebook_launch_buttons", ROOT / "tools" / "notebook_launch_buttons.py"
)
launch_buttons = importlib.util.module_from_spec(buttons_spec)
buttons_spec.loader.exec_module(launch_buttons)


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
    branch = launch_buttons.COLAB_BRANCH  # the badge opens the notebook's Colab copy, as the button does
    for name in notebooks:  # every notebook has its Colab badge and install cell
        text = (ROOT / name).read_text()
        assert f"colab.research.google.com/github/{expected}/blob/{branch}/{name}" in text, name
        assert f"git+https://github.com/{expected}" in text, name


def ref_exists(ref: str) -> bool:
    """Whether git knows ``ref`` in this repository (locally, or as origin's branch in a fresh clone)."""
    for candidate in (ref, f"origin/{ref}", f"refs/tags/{ref}"):
        result = subprocess.run(
            ["git", "rev-parse", "--verify", "--quiet", f"{candidate}^{{commit}}"],
            cwd=ROOT,
            capture_output=True,
        )
        if result.returncode == 0:
            return True
    return False


def install_refs() -> dict[str, list[str | None]]:
    """The ref named by every notebook's Colab install line."""
    refs = {}
    for name in (n for n in tool.FILES if n.endswith(".ipynb")):
        text = (ROOT / name).read_text()
        refs[name] = [m.group(2) for m in pin.INSTALL.finditer(text) if "%pip install" in text]
    return refs


def test_every_colab_install_line_names_a_ref_that_exists_in_the_repository():
    refs = install_refs()
    assert refs and all(refs.values()), refs  # every notebook has an install line, each names a ref
    missing = {name: r for name, names in refs.items() for r in names if r is None or not ref_exists(r)}
    assert not missing, f"install lines name refs that git does not know: {missing}"
    assert {r for names in refs.values() for r in names} == {pin.REF}, refs


def test_ref_exists_refuses_a_missing_tag():
    assert ref_exists(pin.REF)
    assert not ref_exists("v0.3.0-no-such-tag")
