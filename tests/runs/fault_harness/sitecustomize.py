"""Installed in the subprocesses of ``test_faults.py`` (this folder is put first on ``PYTHONPATH``):
arms :mod:`fault_injection` from the environment in every Python process started, Lightning's too."""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import fault_injection  # noqa: E402

sys.path.pop(0)
fault_injection.install_from_environment()
