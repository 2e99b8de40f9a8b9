"""Issue 39's attacks (round 4) on what fit() and a resumed run trust: a checkpoint handed to the public
fit() names no path that it deletes or reads, a FIFO never blocks it, an archive that inflates beyond a
checkpoint of the model is refused before it is inflated, a hard-linked file in a run folder is never
written through, and an epoch count outside 1 to MAX_EPOCHS is one clear error. Each test failed on the
code before the change (4115801), as the closing note of issue 39 tells.

The second part (from test_4_a_model_file_swapped_for_a_fifo...): a model file is read through the one
open file that was checked, its weights must be finite floating-point numbers, a table is refused when
it is over its bound, holds no text or holds text where numbers belong, and the listed tracebacks are
one line (exit status 2 on a command line). Each failed on 5c66e89 (its source file restored alone).
The taught code's bound on N is tested in tests/core/test_pondernet.py."""

from __future__ import annotations

import gzip
import importlib.util
import io
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pandas as pd
import pytest
import test_faults
import tiny_parity
import torch
from stand_in_tables import write_run_tables
from test_untrusted_runs import stopped_run, time_limit

from pondernet_tutorial import untrusted
from pondernet_tutorial.data.modules import ParityDataModule
from pondernet_tutorial.fitting import MAX_EPOCHS, fit
from pondernet_tutorial.runs import cli, studies
from pondernet_tutorial.runs.checkpoints import load_model, load_pretrained, save_weights
from pondernet_tutorial.runs.config import WEIGHTS
from pondernet_tutorial.runs.evaluation import load_run_tables
from pondernet_tutorial.runs.files import write_json
from pondernet_tutorial.runs.training import train
from pondernet_tutorial.untrusted import CheckpointError, DamagedFileError

QUIET = dict(accelerator="cpu", logger=False, enable_progress_bar=False, enable_model_summary=False)


def data():
    return ParityDataModule(n_elements=8, train_subset=256, val_size=128, batch_size=64)


def shared_checkpoint(tmp_path: Path, edit) -> tuple[Path, Path]:
    """A checkpoint of one epoch of fit() in ``tmp_path/run``, its best-epoch callback's state edited
    by ``edit(state, checkpoints_folder)``, saved as plain data to ``tmp_path/shared.ckpt``: what a
    user could be handed. Returns the checkpoint and the run's folder."""
    run = tmp_path / "run"
    trainer, _ = fit(tiny_parity.module(), data(), 1, default_root_dir=run, **QUIET)
    checkpoints = Path(trainer.checkpoint_callback.dirpath)
    checkpoint = torch.load(trainer.checkpoint_callback.best_model_path, weights_only=True)
    (key,) = [k for k in checkpoint["callbacks"] if "Checkpoint" in k and "val/acc" in k]
    edit(checkpoint["callbacks"][key], checkpoints)
    shared = tmp_path / "shared.ckpt"
    torch.save(checkpoint, shared)
    return shared, run


def test_1_a_checkpoint_given_to_fit_never_deletes_a_folder_it_names(tmp_path):
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "keep").write_text("mine")

    def name_the_victim(state, checkpoints):
        outside = str(checkpoints / ".." / ".." / "victim")  # checkpoints/../../victim
        state["dirpath"] = str(checkpoints)  # Lightning restores the paths only for its own folder
        state["best_model_path"] = state["kth_best_model_path"] = outside
        state["best_model_score"] = state["kth_value"] = torch.tensor(0.0)  # every epoch beats it
        state["best_k_models"] = {outside: torch.tensor(0.0)}

    shared, run = shared_checkpoint(tmp_path, name_the_victim)
    fit(tiny_parity.module(), data(), 3, ckpt_path=shared, default_root_dir=run, **QUIET)
    assert (victim / "keep").read_text() == "mine"


def test_4_a_fifo_named_as_the_best_checkpoint_never_blocks_fit(tmp_path):
    def name_a_fifo(state, checkpoints):
        os.mkfifo(checkpoints / "best-v7.ckpt")
        state["dirpath"] = str(checkpoints)
        state["best_model_path"] = str(checkpoints / "best-v7.ckpt")
        state["best_model_score"] = torch.tensor(2.0)  # no epoch beats it: fit() would read it at the end

    shared, run = shared_checkpoint(tmp_path, name_a_fifo)
    with time_limit(60):
        _, best_epoch = fit(tiny_parity.module(), data(), 2, ckpt_path=shared, default_root_dir=run, **QUIET)
    assert best_epoch == 1  # the only epoch trained after the restore: the FIFO was never the best


def test_4_a_fifo_given_as_ckpt_path_is_one_error_at_once(tmp_path):
    fifo = tmp_path / "shared.ckpt"
    os.mkfifo(fifo)
    with time_limit(60), pytest.raises(CheckpointError, match="is not a regular file"):
        fit(tiny_parity.module(), data(), 1, ckpt_path=fifo, default_root_dir=tmp_path, **QUIET)


def test_5_a_checkpoint_that_inflates_beyond_the_models_size_is_refused_before_inflating(tmp_path):
    stored = io.BytesIO()
    torch.save({"state_dict": {"w": torch.zeros(40 * 2**20)}, "epoch": 0}, stored)  # 160 MiB of zeros
    bomb = tmp_path / "bomb.ckpt"
    with zipfile.ZipFile(stored) as plain, zipfile.ZipFile(bomb, "w", zipfile.ZIP_DEFLATED) as packed:
        for member in plain.infolist():
            packed.writestr(member.filename, plain.read(member.filename))
    assert bomb.stat().st_size < 2 * 2**20
    with pytest.raises(CheckpointError, match="compressed members"):
        fit(tiny_parity.module(), data(), 1, ckpt_path=bomb, default_root_dir=tmp_path, **QUIET)


def test_2_a_hard_linked_log_file_of_a_resumed_run_is_never_written_through(tmp_path, monkeypatch, capsys):
    config = stopped_run(tmp_path / "runs", monkeypatch)
    logs = [p for p in (config.run_dir / "logs").rglob("*") if p.is_file()]
    assert logs, "the stopped run wrote no log file"
    outside = tmp_path / "outside"
    outside.mkdir()
    before = {}
    for i, path in enumerate(logs):  # as cp -al or rsync --link-dest leave a copied run
        kept = outside / f"{i}-{path.name}"
        kept.write_bytes(path.read_bytes())  # the same bytes: the history must still read
        before[kept] = kept.read_bytes()
        path.unlink()
        os.link(kept, path)
    try:  # (until round 11 kept until overwrite; a resumed sitting writes its own files whole or new)
        _, metadata = train(config)
        assert metadata["resumed"]
    finally:  # the other names of the files never change
        assert {path: path.read_bytes() for path in before} == before


@pytest.mark.parametrize("epochs", [-1, 0, True, 1.5, MAX_EPOCHS + 1])
def test_4_an_epoch_count_outside_1_to_the_maximum_is_one_clear_error(epochs):
    with pytest.raises(ValueError, match="max_epochs must be a whole number from 1"):
        fit(tiny_parity.module(), data(), epochs, **QUIET)


def tiny_model_file(tmp_path: Path, edit=None) -> Path:
    """A tiny PonderNet's model file, its hyperparameters and tensors edited by ``edit(hparams, state)``
    and written back without the package's checks."""
    path = save_weights(tiny_parity.run_module(max_steps=3), tmp_path / WEIGHTS)
    if edit is not None:
        hparams, state = test_faults.read_weights(path)
        edit(hparams, state)
        test_faults.write_weights(path, hparams, state)
    return path


def one_error_line(capsys) -> str:
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), lines
    return lines[0]


def test_4_a_model_file_swapped_for_a_fifo_after_its_check_is_never_opened_again(tmp_path, monkeypatch):
    """load_model reads the bytes of the file it checked: safetensors' safe_open reopened the path by
    name, and a FIFO put there after the check blocked it (where SIGALRM cannot reach: a writer process
    ends the wait after 20 s, so that the old code fails instead of hanging)."""
    path = tiny_model_file(tmp_path)
    expected = load_model(path).state_dict()
    checked = untrusted.open_regular  # what load_model's read (untrusted.read_regular) opens through

    def check_then_swap(name, *args, **kwargs):
        handle = checked(name, *args, **kwargs)
        os.unlink(name)
        os.mkfifo(name)  # the attacker's swap, between the check and any second open
        return handle

    monkeypatch.setattr(untrusted, "open_regular", check_then_swap)
    unblock = "import os, sys, time; time.sleep(20); os.write(os.open(sys.argv[1], os.O_WRONLY | os.O_NONBLOCK), b'x')"
    writer = subprocess.Popen([sys.executable, "-c", unblock, str(path)], stderr=subprocess.DEVNULL)
    try:
        with time_limit(60):
            loaded = load_model(path)
    finally:
        writer.kill()
        writer.wait()
    assert all(torch.equal(loaded.state_dict()[k], v) for k, v in expected.items())


@pytest.mark.parametrize(
    "spoil, message",
    [
        (lambda t: torch.full_like(t, float("nan")), "NaN or infinite values"),
        (lambda t: torch.full_like(t, float("inf")), "NaN or infinite values"),
        (lambda t: (t * 100).to(torch.int8), "as int8, not floating point"),
    ],
    ids=["nan", "inf", "int8"],
)
def test_7_nan_infinite_or_integer_weights_are_refused_on_load(tmp_path, spoil, message):
    def spoil_one(hparams, state):
        name = sorted(state)[0]
        state[name] = spoil(state[name])

    path = tiny_model_file(tmp_path, spoil_one)
    with pytest.raises(CheckpointError, match=message) as caught:
        load_model(path)
    assert "\n" not in str(caught.value)


@pytest.mark.parametrize("checkpoint", ["", "/"])
def test_6_evaluate_with_an_empty_or_nameless_checkpoint_path_is_one_line(checkpoint, capsys):
    assert cli.main(["evaluate", "--checkpoint", checkpoint]) == 2
    one_error_line(capsys)


@pytest.mark.parametrize("name", ["step_options", "method_options"])
def test_6_a_model_header_whose_options_are_a_list_is_one_line(tmp_path, name, capsys):
    path = tiny_model_file(tmp_path, lambda hparams, state: hparams.update({name: [16, 8]}))
    for trust_code in (False, True):
        with pytest.raises(CheckpointError, match=f"its {name} are list, not a dictionary"):
            load_model(path, trust_code=trust_code)
    assert cli.main(["evaluate", "--checkpoint", str(path), "--experiment", "parity-interpolation"]) == 2
    assert name in one_error_line(capsys)


def test_6_a_corrupt_per_sample_table_is_damaged_in_one_line(tmp_path):
    """A damaged deflate stream raises zlib.error, which is neither an OSError nor a ValueError."""
    write_run_tables(tmp_path)
    packed = gzip.compress(b"set,label,prediction\n" + b"test,0,1\n" * 10_000)
    flipped = packed[:20] + bytes(b ^ 0xFF for b in packed[20:60]) + packed[60:]
    (tmp_path / "per_sample.csv.gz").write_bytes(flipped)
    with pytest.raises(DamagedFileError, match="per_sample.csv.gz is not a readable table") as caught:
        load_run_tables(tmp_path, per_sample=True)
    assert "\n" not in str(caught.value)


def test_6_text_in_a_degrees_column_during_reproduce_is_one_line(tmp_path, monkeypatch, capsys):
    study = studies.Study("round4", "one tiny parity run", ({**test_faults.TINY, "seeds": (0,)},))
    monkeypatch.setitem(studies.STUDIES, "round4", study)
    studies.reproduce(["round4"], output_dir=tmp_path, quick=True)
    (config,) = study.configs(quick=True, output_dir=str(tmp_path))
    summary = config.run_dir / "summary.csv"
    pd.read_csv(summary).assign(mode="exact", degrees="ninety").to_csv(summary, index=False)
    capsys.readouterr()
    assert cli.main(["reproduce", "--study", "round4", "--quick", "--output-dir", str(tmp_path)]) == 2
    errors = [line for line in capsys.readouterr().err.splitlines() if not line.startswith("==")]
    assert len(errors) == 1 and "summary.csv" in errors[0] and "column degrees holds 'ninety'" in errors[0]


def test_6_load_pretrained_with_an_output_dir_names_the_arguments_it_takes(tmp_path):
    with pytest.raises(
        TypeError, match="unexpected keyword output_dir.*load_model.*It takes experiment"
    ) as caught:
        load_pretrained("parity-interpolation", output_dir=str(tmp_path))
    assert "\n" not in str(caught.value)


@pytest.mark.parametrize("run", ["pondernet:", "act:one"])
def test_6_continue_extrapolation_with_a_run_without_a_seed_exits_2_in_one_line(tmp_path, run):
    tool = test_faults.ROOT / "tools" / "continue_extrapolation.py"
    result = subprocess.run(
        [sys.executable, str(tool), str(tmp_path / "out"), "--runs", run],
        capture_output=True,
        text=True,
        env=test_faults.env(),
        timeout=300,
    )
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 2 and len(lines) == 1 and repr(run) in lines[0], result.stderr
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("where", ["_config.yml", "notebook"])
def test_6_execute_notebooks_with_a_timeout_that_is_not_a_number_exits_2_in_one_line(
    tmp_path, monkeypatch, capsys, where
):
    import nbformat

    spec = importlib.util.spec_from_file_location(
        "execute_notebooks", test_faults.ROOT / "tools" / "execute_notebooks.py"
    )
    tool = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tool)
    monkeypatch.setattr(tool, "ROOT", tmp_path)  # its _config.yml
    (tmp_path / "_config.yml").write_text(
        f"execute:\n  timeout: {'ten' if where == '_config.yml' else 300}\n"
    )
    notebook = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("x = 1")])
    if where == "notebook":
        notebook.metadata["execution"] = {"timeout": "ten"}
    nbformat.write(notebook, tmp_path / "nb.ipynb")
    assert tool.main([str(tmp_path / "nb.ipynb"), "--kernel", "python3", "--out", str(tmp_path / "out")]) == 2
    assert "timeout" in one_error_line(capsys) and not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    "batch, difficulty", [(1, float("nan")), (4, [1.0, 2.0, float("inf"), 4.0])], ids=["nan", "inf"]
)
def test_7_diagnose_refuses_a_non_finite_difficulty(batch, difficulty):
    from pondernet_tutorial import diagnose

    x = torch.randint(-1, 2, (batch, 8)).float()
    with pytest.raises(ValueError, match="NaN or infinite"):
        diagnose(tiny_parity.model(), x, difficulty=difficulty, show=False)


@pytest.mark.parametrize("size", [16 * 2**20, 2**30], ids=["16MiB", "1GiB"])
def test_5_a_sparse_study_table_is_refused_at_once_not_read_as_an_empty_table(tmp_path, size):
    folder = tmp_path / "studies" / "round4"
    folder.mkdir(parents=True)
    write_json(folder / "study.json", {"study": "round4"})
    with open(folder / "summary.csv", "wb") as sparse:
        sparse.truncate(size)  # NUL bytes, none of them on the disk
    with time_limit(10), pytest.raises(DamagedFileError, match="summary.csv") as caught:
        studies.load_study("round4", tmp_path)
    assert "\n" not in str(caught.value)


def test_4_a_curve_csv_that_is_a_fifo_is_one_line_at_once(tmp_path, capsys):
    """Before: tools/continue_extrapolation.py blocked writing its curve into a FIFO named curve.csv
    (tools/paper_size.py shares the callback's way of writing)."""
    tool = test_faults.ROOT / "tools" / "paper_size.py"
    spec = importlib.util.spec_from_file_location("paper_size_fifo", tool)
    paper_size = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(paper_size)
    (tmp_path / "64-pondernet-seed0").mkdir()
    os.mkfifo(tmp_path / "64-pondernet-seed0" / "curve.csv")
    with time_limit(120):
        code = paper_size.main([str(tmp_path), "--quick", "--runs", "64:pondernet:0"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and err[-1].startswith("error: ") and "curve.csv is not a regular file" in err[-1]
