"""The package's public names are what its docstring says, whatever was imported before them."""

import subprocess
import sys

import pytest

import pondernet_tutorial


@pytest.mark.parametrize(
    "before",
    [
        "",
        "import pondernet_tutorial.fit",
        "import pondernet_tutorial.runs.training",
        "import pondernet_tutorial",
    ],
)
def test_fit_is_the_function_whatever_was_imported_first(before):
    # `fit` is both a submodule and the function it defines; the import system binds the submodule
    # to the package's attribute, so without care `from pondernet_tutorial import fit` is the module
    code = f"{before}\nfrom pondernet_tutorial import fit\nimport pondernet_tutorial as p\n"
    code += "assert callable(fit) and fit.__name__ == 'fit', fit\nassert p.fit is fit, p.fit\n"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr


def test_every_public_name_resolves_to_what_it_names():
    for name in pondernet_tutorial.__all__:
        value = getattr(pondernet_tutorial, name)
        assert getattr(value, "__name__", name) == name, (name, value)
