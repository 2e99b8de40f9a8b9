"""The paper-size parity runs (tools/paper_size.py): a run killed mid-training and continued ends on
the weights of the run trained in one go (Adam's moments and the batches' generator travel in its
checkpoint), and a quick run records its curve, update count and measured time."""

import importlib.util
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest
import torch
from safetensors.torch import load_file

from pondernet_tutorial.runs.checkpoints import load_model
from pondernet_tutorial.runs.evaluation import evaluate_set

ROOT = Path(__file__).resolve().parents[2]
TOOL = ROOT / "tools" / "paper_size.py"
spec = importlib.util.spec_from_file_location("paper_size", TOOL)
paper_size = importlib.util.module_from_spec(spec)
spec.loader.exec_module(paper_size)


def test_a_quick_run_records_its_curve_count_and_time(tmp_path):
    paper_size.main([str(tmp_path), "--quick", "--runs", "96:act:0"])
    folder = tmp_path / "96-act-seed0"
    curve = pd.read_csv(folder / "curve.csv")
    assert list(curve["updates"]) == [4, 8]
    assert {"seen_accuracy", "unseen_accuracy", "seen_steps", "unseen_steps", "wall_s"} <= set(curve)
    # trained on k 1-48, scored on 1-48 and 49-96 (k drawn uniformly: 50 vectors reach near the ends)
    assert curve["seen_n"].eq(50).all() and curve["unseen_n"].eq(50).all()
    assert curve["wall_s"].is_monotonic_increasing and curve["wall_s"].iloc[-1] > 0
    record = json.loads((folder / "metadata.json").read_text())
    assert record["updates"] == 8 and record["sittings"] == 1
    assert record["scored"]["seen"][1] <= 48 < record["scored"]["unseen"][0]
    assert record["method_options"]["halting_bias"] == 1.0 and record["method_options"]["tau"] == 2e-3
    load_model(folder / "model.safetensors")  # the package's own model file


def test_a_run_is_named_size_method_seed():
    for bad in ("64:pondernet", "32:act:0", "64:fixed:0", "96:act:x", "pondernet:0"):
        with pytest.raises(SystemExit, match="SIZE:METHOD:SEED"):
            paper_size.parse_run(bad)


def _train(out: Path, updates: int, batches: int) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    command = [sys.executable, str(TOOL), str(out), "--runs", "64:pondernet:0", "--updates", str(updates)]
    command += ["--batches", str(batches)]
    return subprocess.Popen(
        [*command, "--no-compile"], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
    )


@pytest.mark.slow
def test_a_killed_and_continued_run_ends_on_the_weights_of_one_run_in_one_go(tmp_path):
    # two epochs of 1,000 updates (the 2,000): killed in the second, continued from the first's
    # last.ckpt
    updates, batches = 2_000, 1_000
    straight, killed = tmp_path / "straight", tmp_path / "killed"
    one_go = _train(straight, updates, batches)
    interrupted = _train(killed, updates, batches)
    last = killed / "64-pondernet-seed0" / "checkpoints" / "last.ckpt"
    deadline = time.monotonic() + 600
    while not last.is_file() and interrupted.poll() is None and time.monotonic() < deadline:
        time.sleep(0.2)
    assert last.is_file(), interrupted.stderr.read()[-2000:]
    time.sleep(0.5)  # into the second epoch (about 20 s long here)
    interrupted.send_signal(signal.SIGKILL)
    interrupted.wait()
    assert not (killed / "64-pondernet-seed0" / "model.safetensors").exists(), "killed after the end"
    checkpoint = torch.load(last, weights_only=True)
    assert checkpoint["global_step"] == batches
    assert checkpoint["optimizer_states"][0]["state"], "last.ckpt holds no Adam moments"
    continued = _train(killed, updates, batches)
    for process in (one_go, continued):
        assert process.wait(timeout=900) == 0, process.stderr.read()[-2000:]
    a = load_file(straight / "64-pondernet-seed0" / "model.safetensors")
    b = load_file(killed / "64-pondernet-seed0" / "model.safetensors")
    assert a.keys() == b.keys()
    for name in a:
        assert torch.equal(a[name], b[name]), name
    record = json.loads((killed / "64-pondernet-seed0" / "metadata.json").read_text())
    assert record["updates"] == updates and record["sittings"] == 2


def test_ship_writes_each_runs_last_weights_and_marks_an_unfinished_run(tmp_path):
    out, study = tmp_path / "runs", tmp_path / "study"
    paper_size.main([str(out), "--quick", "--runs", "64:pondernet:1", "96:act:0"])
    unfinished = out / "96-act-seed0"
    (unfinished / "model.safetensors").unlink()  # as a run stopped in its last sitting leaves it
    (unfinished / "metadata.json").unlink()
    paper_size.main([str(out), "--ship", str(study)])
    runs = pd.read_csv(study / "runs.csv").set_index("method")
    assert list(runs["finished"]) == [True, False] and list(runs["updates"]) == [8, 8]
    assert runs.loc["act", "stopped_by"] == "not finished: 8 of 500,000"
    assert runs.loc["pondernet", "stopped_by"] == "update count"
    assert (runs["seen_low"] <= runs["seen_accuracy"]).all() and (
        runs["seen_accuracy"] <= runs["seen_high"]
    ).all()
    curves = pd.read_csv(study / "curves.csv")
    assert len(curves) == 4 and set(curves["size"]) == {64, 96}
    only = tmp_path / "only"  # --runs picks the runs shipped: one that has only just started stays out
    paper_size.main([str(out), "--ship", str(only), "--runs", "64:pondernet:1"])
    assert list(pd.read_csv(only / "runs.csv")["method"]) == ["pondernet"]
    assert [path.name for path in (only / "weights").iterdir()] == ["64-pondernet-seed1.safetensors"]
    # the shipped weights are the ones the curve's last point scored: re-scored, the same numbers
    for spec, folder in (("64:pondernet:1", "64-pondernet-seed1"), ("96:act:0", "96-act-seed0")):
        n, method, seed = paper_size.parse_run(spec)
        module = load_model(study / "weights" / f"{folder}.safetensors")
        datamodule = paper_size.make_datamodule(paper_size.run_config(n, method, seed))
        end = curves[(curves["size"] == n) & (curves["method"] == method)].iloc[-1]
        for name, eval_set in paper_size.score_sets(datamodule, 50).items():
            per_sample, _ = evaluate_set(module, eval_set, seed=0)
            assert (per_sample.label == per_sample.prediction).mean() == pytest.approx(
                end[f"{name}_accuracy"]
            )


def test_rescore_compares_the_shipped_weights_on_fresh_vectors_within_3_standard_errors(tmp_path, capsys):
    out, study = tmp_path / "runs", tmp_path / "study"
    paper_size.main([str(out), "--quick", "--runs", "96:pondernet:0"])
    paper_size.main([str(out), "--ship", str(study)])
    table = paper_size.rescore(study, vectors=2000)
    assert list(table["range"]) == ["seen", "unseen"] and table["agrees"].all()
    assert (table["fresh"] != table["shipped"]).any()  # other vectors: not the same count to the digit
    runs = pd.read_csv(study / "runs.csv")
    runs["seen_accuracy"] = 1.0  # a shipped point that its weights do not give
    runs.to_csv(study / "runs.csv", index=False)
    assert paper_size.main([str(out), "--rescore", str(study)]) == 1


def test_the_chapters_gpu_recipe_trains_the_runs_it_shows():
    """Chapter 12's "With a GPU" prints a command line for each size and method; each must describe the
    run that tools/paper_size.py trained and shipped (before: the 16-element study's early stopping, and
    a control and one step that the paper-size study never trained)."""
    import contextlib
    import io
    import shlex

    from pondernet_tutorial.analysis import paper_claims
    from pondernet_tutorial.runs.cli import build_parser, config_names
    from pondernet_tutorial.runs.config import TrainConfig

    notebook = json.loads((TOOL.parents[1] / "book" / "12_parity_paper.ipynb").read_text(encoding="utf-8"))
    (cell,) = ["".join(c["source"]) for c in notebook["cells"] if "--select-by epoch" in "".join(c["source"])]
    printed = io.StringIO()
    names = dict(paper_size.EXPERIMENTS)
    with contextlib.redirect_stdout(printed):
        exec(
            cell,
            {"GPU": names, "here": {"act": {"tau": 2e-3}}, "paper_claims": paper_claims, "PER_EPOCH": 1_000},
        )
    commands = [c for c in printed.getvalue().replace("\\\n", " ").splitlines() if c.startswith("python")]
    assert len(commands) == len(paper_size.EXPERIMENTS) * len(paper_size.METHODS)
    for command, (n, method) in zip(commands, [(n, m) for n in names for m in paper_size.METHODS]):
        args = build_parser().parse_args(shlex.split(command)[3:])
        values = {k: v for k, v in vars(args).items() if k in config_names() and v is not None}
        config = TrainConfig.from_options(**{k: v for k, v in values.items() if k not in ("accelerator",)})
        shipped = paper_size.run_config(n, method, 0)
        # the tool keeps the last update's weights itself; the command line says so with select_by
        mine = {k: v for k, v in config.identity().items() if k != "select_by"}
        assert mine == {k: v for k, v in shipped.identity().items() if k != "select_by"}, command
        assert config.select_by == "epoch"
