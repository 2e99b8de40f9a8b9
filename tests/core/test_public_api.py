"""The package's public names are what its docstring says, whatever was imported before them."""

import pondernet_tutorial


def test_every_public_name_resolves_to_what_it_names():
    for name in pondernet_tutorial.__all__:
        value = getattr(pondernet_tutorial, name)
        assert getattr(value, "__name__", name) == name, (name, value)
