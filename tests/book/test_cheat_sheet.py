"""The cheat sheet's code runs as printed, as a plain script: a step function, PonderLitModule, fit on
a data module, and diagnose on its test set (before: it named a datamodule, x_test and steps_needed
that it never defined, and this test handed them in)."""

import re
import subprocess
import sys
from pathlib import Path

import pytest

CHEAT_SHEET = Path(__file__).resolve().parents[2] / "book" / "cheat_sheet.md"
MAX_LINES = 18  # imports, a step function of 10 lines, and five lines that train and diagnose


def snippet() -> str:
    blocks = re.findall(r"```python\n(.*?)```", CHEAT_SHEET.read_text(encoding="utf-8"), re.S)
    assert len(blocks) == 1, "the cheat sheet shows one code block"
    return blocks[0]


def test_the_snippet_is_short():
    lines = [line for line in snippet().splitlines() if line.strip()]
    assert len(lines) <= MAX_LINES


@pytest.mark.slow
def test_the_snippet_runs_as_a_plain_script(tmp_path):
    script = tmp_path / "cheat_sheet.py"
    script.write_text(snippet(), encoding="utf-8")
    done = subprocess.run(
        [sys.executable, str(script)], cwd=tmp_path, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "the prior's mean over 1..N: 2.0" in done.stdout  # λ_p 0.5 over N = 12: about 2 steps
    assert "verdict: " in done.stdout
