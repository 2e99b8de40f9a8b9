"""Round 8 of attacks, each confirmed before its fix.

Each test failed on the code before its fix (the break is named in its docstring).
"""

import errno
import io
import os
import pickle
import struct
import traceback
import zipfile
from pathlib import Path

import lightning  # noqa: F401 (imports torch.distributed, which widens torch's weights-only list)
import pytest
import test_untrusted_runs
import tiny_parity
import torch
from test_faults import tiny_study  # noqa: F401 (a fixture, used by name)
from test_round4 import QUIET, data

from pondernet_tutorial import untrusted
from pondernet_tutorial.checkpointing import CHECKPOINT_GLOBALS, read_checkpoint_file
from pondernet_tutorial.fitting import fit
from pondernet_tutorial.runs import cli
from pondernet_tutorial.runs.checkpoints import load_model, save_weights
from pondernet_tutorial.runs.config import WEIGHTS
from pondernet_tutorial.runs.module import RunModule
from pondernet_tutorial.untrusted import CheckpointError


class _Calls:
    """Pickled as a call of ``function(*args)``, as a forged checkpoint holds one."""

    def __init__(self, function, *args):
        self.function, self.args = function, args

    def __reduce__(self):
        return self.function, self.args


def _checkpoint(path: Path, payload=None) -> Path:
    torch.save({"state_dict": {"w": torch.zeros(3)}, "epoch": 0, "payload": payload}, path)
    return path


def _with_pickle(tmp_path: Path, pickle_bytes: bytes, name="forged.ckpt") -> Path:
    """A torch.save archive whose data.pkl is ``pickle_bytes``."""
    buffer = io.BytesIO()
    torch.save({"state_dict": {}}, buffer)
    with zipfile.ZipFile(io.BytesIO(buffer.getvalue())) as source:
        members = {info.filename: source.read(info) for info in source.infolist()}
    (data,) = [n for n in members if n.endswith("/data.pkl")]
    members[data] = pickle_bytes
    path = tmp_path / name
    with zipfile.ZipFile(path, "w") as archive:
        for member, content in members.items():
            archive.writestr(member, content)
    return path


def test_a_checkpoint_that_calls_a_global_torch_allows_is_refused_before_it_is_unpickled(tmp_path):
    """Importing torch.distributed (Lightning does) adds builtin exceptions and
    ``traceback.FrameSummary`` to what torch's weights-only loader will call. A ~1 kB checkpoint that
    calls ``FrameSummary(path, 1, "x")`` made fit(ckpt_path=...) read any file of the machine (a FIFO
    blocked it, /dev/zero filled the memory). Now its pickle may name only a tensor's rebuild, storage
    types and an ordered dictionary. (Before: the secret's line was in the loaded checkpoint.)"""
    assert "traceback.FrameSummary" in {
        f"{g.__module__}.{g.__qualname__}" for g in torch.serialization.get_safe_globals() if callable(g)
    }, "torch no longer allows FrameSummary: the attack would be refused without the package's check"
    secret = tmp_path / "outside" / "secret.txt"
    secret.parent.mkdir()
    secret.write_text("a secret line outside every run folder\n")
    forged = _checkpoint(tmp_path / "forged.ckpt", _Calls(traceback.FrameSummary, str(secret), 1, "x"))
    with pytest.raises(CheckpointError, match="names traceback FrameSummary"):
        read_checkpoint_file(forged, 2**20)
    with test_untrusted_runs.time_limit(60), pytest.raises(CheckpointError, match="FrameSummary"):
        fit(tiny_parity.module(), data(), 1, ckpt_path=forged, default_root_dir=tmp_path, **QUIET)
    import linecache

    assert not any(str(secret) == name for name in linecache.cache)
    exception = _checkpoint(tmp_path / "exception.ckpt", _Calls(ValueError, "x"))
    with pytest.raises(CheckpointError, match="ValueError"):
        read_checkpoint_file(exception, 2**20)


def test_every_dtype_a_checkpoint_of_a_model_holds_is_read(tmp_path):
    """The names the check allows cover every storage a checkpoint holds: the trained dtypes of the
    weights, Adam's step and the generators' states, masks. (Break: take BFloat16 out of the list.)"""
    dtypes = [torch.float16, torch.bfloat16, torch.float32, torch.float64, torch.int64, torch.int32]
    dtypes += [torch.int16, torch.int8, torch.uint8, torch.bool]
    state = {str(dtype): torch.zeros(2, dtype=dtype) for dtype in dtypes}
    path = tmp_path / "all.ckpt"
    torch.save({"state_dict": state}, path)
    read = read_checkpoint_file(path, 2**20)["state_dict"]
    assert {name: tensor.dtype for name, tensor in read.items()} == dict(zip(state, dtypes, strict=True))
    assert len(CHECKPOINT_GLOBALS) == 12


def _appended_end_record(path: Path) -> None:
    """A cut-off end-of-archive record after the archive: Python's zipfile no longer finds the archive,
    torch's reader still does."""
    path.write_bytes(path.read_bytes() + b"PK\x05\x06\0\0\0\0")


def test_an_archive_that_zipfile_cannot_read_is_refused(tmp_path):
    """A deflated archive with four bytes appended: zipfile.is_zipfile() said False, so the bound on
    what the members inflate to was skipped, and torch.load inflated 200 MB from a 195 kB file read
    under a 1 MiB bound. (Before: the archive below was loaded.)"""
    path = _checkpoint(tmp_path / "last.ckpt")
    _appended_end_record(path)
    with pytest.raises(CheckpointError, match="not an archive that torch.save writes"):
        read_checkpoint_file(path, 2**20)


def test_members_that_share_their_bytes_are_counted_each_time(tmp_path):
    """Stored members are read as they are, but a central directory may point many entries at the
    same bytes: each is counted. (Break: drop the sum of the members' sizes; the archive below is then
    read whole, 40 times its size.)"""
    plain = io.BytesIO()
    torch.save({"state_dict": {"w": torch.zeros(2**16)}}, plain)  # 256 kB of weights
    archive = plain.getvalue()
    end = archive.rindex(b"PK\x05\x06")
    size, directory_start = struct.unpack("<II", archive[end + 12 : end + 20])
    directory = archive[directory_start : directory_start + size]  # (torch's zip64 records left out)
    entries, at = [], 0
    while at < len(directory):  # each central entry: 46 bytes, then its name, extra field and comment
        name, extra, comment = struct.unpack("<HHH", directory[at + 28 : at + 34])
        entries.append(directory[at : at + 46 + name + extra + comment])
        at += 46 + name + extra + comment
    (big,) = [e for e in entries if struct.unpack("<I", e[24:28])[0] >= 2**18]  # the weights' member
    directory = b"".join(entries + [big] * 40)  # 40 more entries of the weights' bytes
    count = len(entries) + 40
    end_record = archive[end : end + 8] + struct.pack("<HHII", count, count, len(directory), directory_start)
    forged = tmp_path / "shared.ckpt"
    forged.write_bytes(archive[:directory_start] + directory + end_record + b"\0\0")
    assert forged.stat().st_size < 2**19
    with pytest.raises(CheckpointError, match="more than a checkpoint of this model"):
        read_checkpoint_file(forged, 2**20)


def test_a_pickle_that_builds_a_global_from_the_stack_is_refused(tmp_path):
    """Only GLOBAL names what it calls where the check can read it; a name built on the stack
    (STACK_GLOBAL, protocol 4) is refused whatever it names, in one line. (Before: torch refused it
    too, with its advice to load the file unsafely.)"""
    forged = _with_pickle(tmp_path, pickle.dumps({"state_dict": {}, "x": _Calls(print, "hi")}, protocol=4))
    with pytest.raises(CheckpointError, match="names STACK_GLOBAL"):
        read_checkpoint_file(forged, 2**20)


def test_a_run_without_its_per_sample_table_is_evaluated_again(tmp_path, capsys, tiny_study):  # noqa: F811
    """``reproduce`` on a run whose per-sample table was removed (to save space), when its halting
    table must be drawn again, ended in a traceback (a FileNotFoundError without an errno). Now the run
    is evaluated again. (Break: restore the old condition in run_and_evaluate.)"""
    argv = ["reproduce", "--study", "faults", "--quick", "--output-dir", str(tmp_path)]
    assert cli.main(argv) == 0
    per_sample = sorted(tmp_path.rglob("per_sample.csv.gz"))
    assert len(per_sample) == 2
    for path in per_sample:
        path.unlink()
        (path.parent / "halting.json").unlink()
    capsys.readouterr()
    assert cli.main(argv) == 0, capsys.readouterr().err
    assert all(path.is_file() and (path.parent / "halting.json").is_file() for path in per_sample)


def test_a_stray_file_named_like_a_history_version_is_one_line_and_kept(tmp_path, monkeypatch, capsys):
    """Lightning's csv logger takes the next ``version_<n>`` that no folder holds; a file of that name
    made it fail with "File exists" at every rerun, with no word of the file. (Before: the second
    train() raised FileExistsError.) The run is kept until ``overwrite`` trains it again."""
    config = test_untrusted_runs.stopped_run(tmp_path, monkeypatch)
    (config.run_dir / "logs" / "version_1").write_text("a stray file\n")
    test_untrusted_runs.kept_then_overwritten(
        config, capsys, "logs/version_1 is not a folder of the run's history"
    )


def test_a_model_files_header_cannot_switch_on_compilation_or_clipping(tmp_path):
    """``compile`` and ``grad_clip`` are RunModule arguments that a model file never holds; a header
    that held ``"compile": true`` made a loaded model run Inductor (generated code, the C compiler) at
    its first use, and a NaN ``grad_clip`` clip every gradient to NaN. (Before: the file loaded.)"""
    from safetensors.torch import load_file, save_file

    module = RunModule(step="parity_gru", n_classes=2, step_options={"n_elements": 8, "hidden_size": 8})
    path = tmp_path / "exported.safetensors"
    save_weights(module, path)
    from safetensors import safe_open

    with safe_open(str(path), "pt") as file:
        metadata = file.metadata()
    import json

    hparams = json.loads(metadata["hparams"])
    save_file(load_file(path), path, {**metadata, "hparams": json.dumps({**hparams, "compile": True})})
    with pytest.raises(CheckpointError, match="does not know: compile"):
        load_model(path)


def test_a_refused_read_is_not_given_a_refused_writes_advice(tmp_path, monkeypatch, capsys, tiny_study):  # noqa: F811
    """A model file that the permissions refuse to read ended ``evaluate``/``reproduce`` with the advice
    for a refused write (choose another --output-dir, the free space). Now: one line that says nothing
    was deleted. The refusal comes from os.open itself, as the system gives it. (Before: "choose a
    folder you can write to".)"""
    argv = ["reproduce", "--study", "faults", "--quick", "--output-dir", str(tmp_path)]
    assert cli.main(argv) == 0
    real = os.open

    def refusing(path, *args, **kwargs):
        if str(path).endswith(WEIGHTS):
            raise PermissionError(errno.EACCES, "Permission denied", str(path))
        return real(path, *args, **kwargs)

    monkeypatch.setattr(untrusted.os, "open", refusing)
    capsys.readouterr()
    code = cli.main([*argv, "--reevaluate"])
    monkeypatch.setattr(untrusted.os, "open", real)
    err = capsys.readouterr().err.strip()
    assert code == 1 and len(err.splitlines()) == 1, err
    assert "Permission denied" in err and "nothing was deleted" in err and "--output-dir" not in err


# ---------------------------------------------------------------------------------------------------
# The re-check of round 8: what the allowed names still build. Each failed on 46a09f7.


def test_a_tensor_wider_than_its_storage_is_refused(tmp_path):
    """A stride-0 view of 2^40 values over one stored value (a plateau schedule's "best" so forged made
    every rerun end "out of memory", and the run was never trained again)."""
    path = tmp_path / "wide.ckpt"
    torch.save({"state_dict": {}, "best": torch.zeros(1).expand(2**40)}, path)
    with pytest.raises(
        CheckpointError, match="holds a tensor of 1,099,511,627,776 values over a smaller storage"
    ):
        read_checkpoint_file(path, 2**20)


def test_a_state_dict_whose_metadata_is_not_pytorchs_is_refused(tmp_path):
    """``_metadata``'s ``assign_to_params_buffers`` made load_state_dict put the file's tensors in place
    of the module's parameters (a float64 weight then failed the first step). PyTorch's own version
    numbers still load."""
    from collections import OrderedDict

    state = OrderedDict(w=torch.zeros(3))
    state._metadata = OrderedDict({"": {"version": 1, "assign_to_params_buffers": True}})
    torch.save({"state_dict": state}, tmp_path / "assign.ckpt")
    with pytest.raises(CheckpointError, match="metadata is not PyTorch's"):
        read_checkpoint_file(tmp_path / "assign.ckpt", 2**20)
    torch.save({"state_dict": nn_state()}, tmp_path / "plain.ckpt")
    assert read_checkpoint_file(tmp_path / "plain.ckpt", 2**20)["state_dict"]._metadata


def nn_state():
    return torch.nn.BatchNorm1d(3).state_dict()


def test_a_name_is_read_as_torch_reads_it_and_torchs_advice_is_never_quoted(tmp_path):
    """pickletools unescapes a GLOBAL's name (Ordered\\x44ict read as OrderedDict) where torch reads the
    line as it is; and a pickle that torch refuses gave torch's first line, its advice to load the
    file unsafely."""
    escaped = _with_pickle(tmp_path, b"\x80\x02ccollections\nOrdered\\x44ict\n)R.", "escaped.ckpt")
    with pytest.raises(CheckpointError, match=r"names collections Ordered\\x44ict"):
        read_checkpoint_file(escaped, 2**20)
    refused = _with_pickle(tmp_path, b"\x80\x02}(X\n\x00\x00\x00state_dict}X\x01\x00\x00\x00xI5\nu.")
    with pytest.raises(CheckpointError) as raised:
        read_checkpoint_file(refused, 2**20)
    assert "its pickle asks for more than weights" in str(raised.value) and "unsafe" not in str(raised.value)


def test_numpy_numbers_given_to_the_module_are_kept_as_pythons(tmp_path):
    """np.float64 for lr was pickled into best.ckpt as a numpy object, which the checkpoint reader then
    refused at the end of the whole training. (np.int64 for lr_patience was refused up front.)"""
    import numpy as np

    from pondernet_tutorial.fast_path import GraphedPonderLitModule

    for cls in (tiny_parity.module().__class__, GraphedPonderLitModule):
        module = cls(
            tiny_parity.module().model,
            lr=np.float64(1e-3),
            lr_patience=np.int64(2),
            lr_factor=np.float32(0.5),
        )
        assert {type(module.hparams[k]) for k in ("lr", "lr_patience", "lr_factor")} == {float, int}
    module = tiny_parity.module().__class__(tiny_parity.module().model, lr=np.float64(1e-3))
    fit(module, data(), 1, default_root_dir=tmp_path, **QUIET)
