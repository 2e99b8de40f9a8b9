"""``tools/rescore_paper_size.py``: the shipped paper-size parity runs, scored again in NumPy alone (no
PyTorch, nothing of the package) on fresh vectors, agree with ``runs.csv`` in accuracy and mean halting
step; a re-score whose halting is wrong is flagged.

Deliberate breaks these tests catch (each was tried):
- the steps counted from 0, the input fed at the first step only, the unseen range drawn as the seen
  one, or ``import torch`` added to the tool: test_a_pondernet_run_agrees_in_numpy_alone;
- the halting probability left as σ(z) in the broken tool (no break): test_wrong_halting_is_flagged.
"""

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

TOOL = Path(__file__).resolve().parents[2] / "tools" / "rescore_paper_size.py"
spec = importlib.util.spec_from_file_location("rescore_paper_size", TOOL)
rescore_paper_size = importlib.util.module_from_spec(spec)
spec.loader.exec_module(rescore_paper_size)

RUN = "96:pondernet:0"  # both ranges, and PonderNet's coins: about 5 steps where ACT's runs take 1


def test_a_pondernet_run_agrees_in_numpy_alone():
    """In a fresh interpreter: exit 0 on 2,000 vectors per range, and neither torch nor the package loaded."""
    code = (
        "import importlib.util, sys\n"
        f"spec = importlib.util.spec_from_file_location('tool', {str(TOOL)!r})\n"
        "tool = importlib.util.module_from_spec(spec); spec.loader.exec_module(tool)\n"
        f"status = tool.main(['--runs', {RUN!r}, '--vectors', '2000'])\n"
        "print('loaded:', sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'pondernet_tutorial')))\n"
        "sys.exit(status)\n"
    )
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "loaded: []" in result.stdout
    assert " seen " in result.stdout and " unseen " in result.stdout


def test_wrong_halting_is_flagged(monkeypatch, capsys):
    """With λ_n replaced by 1 − λ_n the steps fall far from the shipped ones: those rows disagree, exit 1."""
    table = rescore_paper_size.rescore(rescore_paper_size.STUDY, [RUN], 1500, seed=5)
    assert table["agrees"].all(), table
    sigmoid = rescore_paper_size.halting_probability
    monkeypatch.setattr(rescore_paper_size, "halting_probability", lambda z: 1.0 - sigmoid(z))
    broken = rescore_paper_size.rescore(rescore_paper_size.STUDY, [RUN], 1500, seed=5)
    assert list(broken["range"]) == ["seen", "unseen"]
    assert (broken["steps_diff_se"].abs() > 3).all() and not broken["agrees"].any(), broken
    assert rescore_paper_size.main(["--runs", RUN, "--vectors", "1500"]) == 1
    assert "False" in capsys.readouterr().out
