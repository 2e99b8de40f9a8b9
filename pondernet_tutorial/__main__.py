"""``python -m pondernet_tutorial``: the command line (:mod:`pondernet_tutorial.runs.cli`)."""

import sys

from .runs.cli import main

if __name__ == "__main__":
    sys.exit(main())
