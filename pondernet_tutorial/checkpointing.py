"""Lightning checkpoints read as data, and a checkpoint callback that trusts no path it restores.

A checkpoint handed to :func:`~pondernet_tutorial.fitting.fit` (``ckpt_path``), or one that it finds in
its own folder, may come from anyone:

- :func:`read_checkpoint_file` reads it through one descriptor, checked by
  :func:`~pondernet_tutorial.untrusted.open_regular` (a regular file, never a link, a FIFO or a device,
  of bounded size); its archive must be one that torch.save writes (stored members, within the
  bound), and its pickle may name nothing but tensors (:data:`CHECKPOINT_GLOBALS`), before
  ``torch.load`` reads, weights-only, the archive written again from what was checked.
  :class:`CheckedCheckpointIO` makes every load that Lightning does go through it.
- :class:`FolderCheckpoint` is Lightning's ``ModelCheckpoint`` restored without trusting a path: the
  paths that Lightning restores from a checkpoint are later deleted (the k-th best one, recursively)
  or loaded (the best one), so only the recorded file *name* is used, in the callback's own folder,
  and only when it is one of its own checkpoint files.
"""

from __future__ import annotations

import io
import os
import pickletools
import re
import stat
import struct
import warnings
import zipfile
from pathlib import Path

import torch
from lightning.pytorch.callbacks import ModelCheckpoint
from lightning.pytorch.plugins.io import TorchCheckpointIO

from .untrusted import (
    NOT_THERE,
    CheckpointError,
    DamagedFileError,
    open_regular,
    printable,
    says_nothing_of_files,
    shown,
)

CHECKPOINT_OVERHEAD = 64 * 2**20  # a checkpoint's counters, callback states and history, besides weights


def checkpoint_bound(module: torch.nn.Module) -> int:
    """The most bytes a Lightning checkpoint of ``module`` holds, inflated: its weights and Adam's two
    moments, and :data:`CHECKPOINT_OVERHEAD` for the rest."""
    weights = sum(p.numel() * p.element_size() for p in module.state_dict().values() if torch.is_tensor(p))
    return 3 * weights + CHECKPOINT_OVERHEAD


# What the pickle of a Lightning checkpoint may name (``data.pkl`` in torch.save's archive): a tensor's
# rebuild, its storage's type and the ordered dictionary of a state dict. torch's weights-only loader
# allows more, and more again once torch.distributed is imported (it calls any exception,
# ``traceback.FrameSummary``, which reads a named file, and ``DeviceMesh``, which starts a process
# group): none of that is in a checkpoint this package writes.
CHECKPOINT_GLOBALS = frozenset(
    {"collections OrderedDict", "torch._utils _rebuild_tensor_v2"}
    | {
        f"torch {kind}Storage"
        for kind in ("Float", "Double", "Half", "BFloat16", "Long", "Int", "Short", "Char", "Byte", "Bool")
    }
)


# torch.save writes a member per tensor's storage and three more; a member's entry in the zip's central
# directory takes about 100 bytes: a checkpoint of 10,000 tensors, 1 MB
MAX_DIRECTORY_BYTES = 2 * 2**20


def directory_bytes(data: bytes) -> int | None:
    """The size of the central directory that a zip archive's end records declare, read where zipfile
    reads them (zipfile makes an object of every entry of it), or ``None`` for an archive whose end
    record is not its last 22 bytes (a comment, which torch.save never writes) or whose zip64 locator
    leads to no record."""
    at = len(data) - 22  # torch.save writes no comment: its end record is the file's last 22 bytes
    if at < 0 or data[at : at + 4] != b"PK\x05\x06":
        return None
    (size,) = struct.unpack_from("<I", data, at + 12)
    # a zip64 locator just before it, and its record just before that, as zipfile reads them
    locator = at - 20
    if locator >= 56 and data[locator : locator + 4] == b"PK\x06\x07":
        if data[locator - 56 : locator - 52] != b"PK\x06\x06":
            return None
        size = max(size, struct.unpack_from("<Q", data, locator - 56 + 40)[0])
    return size


# what unpickling may build before check_loaded sees it: torch's reader hashes every dictionary key as
# it sets it, and Python hashes a tuple by visiting all of it, shared parts again each time, in C
# (a key of one pair shared 60 levels deep: 2^60 visits from 1 kB; a key nested a million deep:
# the process crashes). A checkpoint of 10,000 tensors with Adam's state builds about 10^6 values.
MAX_PICKLE_VALUES = 10_000_000
MAX_PICKLE_DEPTH = 100
_MARK = object()


def pickle_shape(pickle: bytes) -> tuple[int, int]:
    """The deepest nesting and the number of values of what unpickling ``pickle`` builds, a part
    reached twice counted twice (as a walk or a hash of it visits it), read from its opcodes alone: a
    stack of ``(depth, values)`` in place of the objects, the memo holding the same."""
    stack, memo, deepest, most = [], {}, 0, 0
    for op, arg, _ in pickletools.genops(pickle):
        name = op.name
        if name == "MARK":
            stack.append(_MARK)
        elif name in ("PUT", "BINPUT", "LONG_BINPUT", "MEMOIZE"):
            memo[len(memo) if name == "MEMOIZE" else arg] = stack[-1]
        elif name in ("GET", "BINGET", "LONG_BINGET"):
            stack.append(memo[arg])
        elif name == "DUP":
            stack.append(stack[-1])
        elif name == "POP_MARK":
            while stack.pop() is not _MARK:
                pass
        elif name == "STOP":
            break
        else:
            before, children = op.stack_before, []
            if pickletools.markobject in before:  # the items above the mark, the mark, then the rest
                while (item := stack.pop()) is not _MARK:
                    children.append(item)
                before = before[: before.index(pickletools.markobject)]
            children += [stack.pop() for _ in before]
            if op.stack_after:
                depth = 1 + max((c[0] for c in children), default=0)
                values = min(MAX_PICKLE_VALUES + 1, 1 + sum(c[1] for c in children))
                stack.append((depth, values))
                deepest, most = max(deepest, depth), max(most, values)
    return deepest, most


def checked_archive(data: bytes, path, max_bytes: int) -> io.BytesIO:
    """The archive that ``torch.load`` may read: ``data`` as torch.save writes it (a zip archive of
    stored members, at most ``max_bytes`` in all, one ``data.pkl`` naming only :data:`CHECKPOINT_GLOBALS`),
    written again from the members that were checked, so that torch reads nothing else."""
    directory = directory_bytes(data)  # before zipfile makes an object of each member
    if directory is None:
        raise CheckpointError(
            f"{path} is not an archive that torch.save writes (its end record is not its last)."
        )
    if directory > MAX_DIRECTORY_BYTES:
        raise CheckpointError(
            f"{path} lists more members than a checkpoint holds (a directory of over {MAX_DIRECTORY_BYTES:,} bytes)."
        )
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            members = archive.infolist()
            if any(member.compress_type != zipfile.ZIP_STORED for member in members):
                raise CheckpointError(f"{path} has compressed members, which torch.save never writes.")
            if (size := sum(member.file_size for member in members)) > max_bytes:
                raise CheckpointError(
                    f"{path} holds {size:,} bytes, more than a checkpoint of this model ({max_bytes:,})."
                )
            contents = {member.filename: archive.read(member) for member in members}
    except (zipfile.BadZipFile, zipfile.LargeZipFile, ValueError, EOFError, NotImplementedError) as error:
        raise CheckpointError(f"{path} is not an archive that torch.save writes ({error}).") from None
    pickles = [name for name in contents if name.endswith("/data.pkl")]
    if len(pickles) != 1:
        raise CheckpointError(f"{path} is not an archive that torch.save writes (no single data.pkl).")
    pickle = contents[pickles[0]]
    try:
        named = {  # GLOBAL's "module name" as torch reads it (the raw line, which pickletools would
            # unescape); a name built on the stack (STACK_GLOBAL) or INST: never ours
            b" ".join(pickle[at + 1 :].split(b"\n", 2)[:2]).decode("latin-1")
            if op.name == "GLOBAL"
            else op.name
            for op, _, at in pickletools.genops(pickle)
            if op.name in ("GLOBAL", "STACK_GLOBAL", "INST")
        }
    except Exception as error:  # a pickle that pickletools cannot read, torch cannot either
        raise CheckpointError(f"{path} is not a pickle that torch.save writes ({error}).") from None
    if unknown := sorted(name for name in named - CHECKPOINT_GLOBALS):
        raise CheckpointError(f"{path} names {printable(unknown[0])}, which no checkpoint of a model holds.")
    try:
        depth, values = pickle_shape(pickle)
    except Exception as error:  # an opcode on a stack that does not hold its operands: torch fails too
        raise CheckpointError(
            f"{path} is not a pickle that torch.save writes ({type(error).__name__}: {shown(error)})."
        ) from None
    if depth > MAX_PICKLE_DEPTH or values > MAX_PICKLE_VALUES:
        raise CheckpointError(
            f"{path} builds a structure of more than {MAX_PICKLE_VALUES:,} values or {MAX_PICKLE_DEPTH} "
            "levels (a part shared over and over, or nested without end): no checkpoint does."
        )
    rewritten = io.BytesIO()
    with zipfile.ZipFile(rewritten, "w", zipfile.ZIP_STORED) as archive:
        for name, content in contents.items():
            archive.writestr(name, content)
    rewritten.seek(0)
    return rewritten


def read_checkpoint_file(path, max_bytes: int) -> dict:
    """A Lightning checkpoint read as data: a regular file (never a link, a FIFO or a device) of at most
    ``max_bytes``, checked by :func:`checked_archive` and loaded weights-only.

    Raises:
        CheckpointError: one line on why the file cannot be read; never PyTorch's advice to load it
            unsafely.
        OSError, MemoryError, RuntimeError: the machine failed to read it (an I/O error, no permission,
            no memory), which says nothing of the file: raised as they are, so that no caller takes the
            file for damaged and deletes it.
    """
    try:
        file = open_regular(path, max_bytes, follow_links=False)
    except (*NOT_THERE, DamagedFileError) as error:  # not a regular file, too big, or gone
        raise CheckpointError(f"{path} cannot be read ({error.strerror or error}).") from None
    # any other OSError (an I/O error, no permission) says nothing of the file: it is raised as it is,
    # and so is one of the one read below; the archive is then read from memory, where zipfile cannot
    # take a failed read for a damaged archive
    with file:
        data = file.read(max_bytes + 1)
    if len(data) > max_bytes:
        raise CheckpointError(f"{path} grew past {max_bytes:,} bytes while it was read.")
    archive = checked_archive(data, path, max_bytes)
    del data
    try:
        checkpoint = torch.load(archive, map_location="cpu", weights_only=True)
    except Exception as error:  # a truncated file, a pickle torch refuses: the first line only
        if says_nothing_of_files(error):  # out of memory (torch's allocator raises a RuntimeError)
            raise
        first = printable((str(error).strip().splitlines() or [type(error).__name__])[0])
        if first.startswith("Weights only load failed") or "weights_only" in first:  # torch's advice follows
            first = "its pickle asks for more than weights"
        raise CheckpointError(f"{path} is not a weights-only checkpoint ({first[:160]})") from None
    if not isinstance(checkpoint, dict) or not isinstance(checkpoint.get("state_dict"), dict):
        raise CheckpointError(f"{path} is not a Lightning checkpoint (no state_dict).")
    check_loaded(checkpoint, path)
    return checkpoint


# Lightning's checkpoints of the package's modules hold some thousands of values, a few levels deep
MAX_LOADED_VALUES = 1_000_000
MAX_LOADED_DEPTH = 64


def check_loaded(checkpoint: dict, path) -> None:
    """Raise :class:`CheckpointError` for what a checkpoint's allowed names still build: a tensor that
    covers more elements than its storage holds (a view with a stride of 0: 2^60 elements in a 28 kB
    file, multiplied when used) or an ordered dictionary with attributes besides PyTorch's version
    numbers (``_metadata``'s ``assign_to_params_buffers`` makes ``load_state_dict`` put the file's
    tensors in place of the module's parameters), and a structure that the walk of it (here, and in
    any comparison of its hyperparameters) would not finish: more than :data:`MAX_LOADED_VALUES` values
    counted as they are reached, each time they are reached (a list that holds itself, or 60 levels of
    one list shared twice: 2^60, from a file of 1 kB), or deeper than :data:`MAX_LOADED_DEPTH`."""
    stack, walked = [(checkpoint, 0)], 0
    while stack:
        value, depth = stack.pop()
        walked += 1
        if walked > MAX_LOADED_VALUES or depth > MAX_LOADED_DEPTH:
            raise CheckpointError(
                f"{path} holds a structure of more than {MAX_LOADED_VALUES:,} values or {MAX_LOADED_DEPTH} "
                "levels (one that holds itself, or a part shared over and over): no checkpoint does."
            )
        if isinstance(value, torch.Tensor):
            if value.numel() * value.element_size() > value.untyped_storage().nbytes():
                raise CheckpointError(
                    f"{path} holds a tensor of {value.numel():,} values over a smaller storage."
                )
        elif isinstance(value, dict):
            extra = getattr(value, "__dict__", {})
            metadata = extra.get("_metadata", {})
            if set(extra) - {"_metadata"} or not all(
                isinstance(entry, dict) and set(entry) <= {"version"} for entry in metadata.values()
            ):
                raise CheckpointError(f"{path} holds a state dict whose metadata is not PyTorch's.")
            stack.extend((v, depth + 1) for v in value.values())
        elif isinstance(value, (list, tuple)):
            stack.extend((v, depth + 1) for v in value)


class CheckedCheckpointIO(TorchCheckpointIO):
    """Lightning's checkpoint input and output, with every load made by :func:`read_checkpoint_file`
    (saves are Lightning's own; the run machinery's subclass writes them whole beside their file), and,
    given the ``module`` it restores, checked to fit it (:func:`check_fits`).

    A removal takes only a checkpoint file that this input and output has saved, or a link to one, or a
    file that one of its ``callbacks`` (the ModelCheckpoints of the fit) names, in that callback's folder
    (:meth:`remove_checkpoint`, :func:`is_callbacks_own`): a ``ModelCheckpoint`` of the caller's own restores the paths in a
    checkpoint as they were recorded, and Lightning would remove one of them, recursively, when a
    better epoch comes (anywhere at all for a path with a protocol, ``local://`` or ``s3://``; a file
    of the user's beside the callback's own for any other).
    """

    def __init__(self, max_bytes: int, module: torch.nn.Module | None = None, callbacks=()):
        self.max_bytes, self.module = max_bytes, module
        self.saved: set[str] = set()  # the checkpoints saved (saved_path): the files it removes
        # and the fit's ModelCheckpoints, whose own files (in their folder, by their names) it removes
        self.callbacks = [c for c in callbacks if isinstance(c, ModelCheckpoint)]

    def load_checkpoint(self, path, map_location=None, weights_only=True) -> dict:
        checkpoint = read_checkpoint_file(path, self.max_bytes)
        if self.module is not None:
            check_fits(checkpoint, self.module, path)
        return checkpoint

    def save_checkpoint(self, checkpoint: dict, path, storage_options=None) -> None:
        self.saved.add(saved_path(path))
        super().save_checkpoint(checkpoint, path, storage_options)

    def has_saved(self, path: str) -> bool:
        """Whether ``path`` is a checkpoint file saved by this input and output, or a link to one
        (Lightning's ``save_last="link"`` makes it beside the file, by a relative name), or a file of one
        of its callbacks' own naming in that callback's folder (a resumed top-k)."""
        if saved_path(path) in self.saved or any(is_callbacks_own(c, path) for c in self.callbacks):
            return True
        if "://" not in path and os.path.islink(path):
            return saved_path(os.path.join(os.path.dirname(path), os.readlink(path))) in self.saved
        return False

    def remove_checkpoint(self, path) -> None:
        """Remove the checkpoint file ``path`` (a ``.ckpt``) that this input and output has saved: a
        regular file, or a link to such a file (``save_last="link"``; the link alone goes), never
        through ``..``; a remote one as one file. Any other path, such as one restored from a crafted
        checkpoint or left by an earlier training, is left where it is with a warning."""
        path = os.fspath(path)
        if path.endswith(".ckpt") and ".." not in re.split(r"[/\\]", path):
            try:
                if self.has_saved(path):
                    if "://" in path:  # an fsspec file system: one file, never a tree
                        from lightning.fabric.utilities.cloud_io import get_filesystem

                        fs = get_filesystem(path)
                        if fs.isfile(path):
                            fs.rm(path)
                        return
                    if stat.S_ISREG(mode := os.lstat(path).st_mode) or stat.S_ISLNK(mode):
                        os.unlink(path)
                        return
            except FileNotFoundError:
                return
            except (OSError, ValueError):  # a name too long, a NUL byte, a file on the way
                pass
        warnings.warn(
            f"left {path[:200]!r} where it is: a checkpoint callback asked to remove it, and it is not a "
            "checkpoint file that this training saved.",
            stacklevel=2,
        )


def is_callbacks_own(callback, path: str) -> bool:
    """Whether ``path`` is a file that the ``ModelCheckpoint`` ``callback`` names: directly in its folder,
    named by its ``filename`` template or its last checkpoint's (each field any text, with Lightning's
    ``-v<n>`` of a name taken). A resumed fit's callback removes its top-k files of the earlier fit so;
    a crafted checkpoint can make it remove no other file (a user's model beside them)."""
    if "://" in path or not getattr(callback, "dirpath", None):
        return False
    if os.path.dirname(os.path.abspath(path)) != os.path.abspath(callback.dirpath):
        return False
    name = os.path.basename(path)
    for template in (callback.filename or "{epoch}-{step}", callback.CHECKPOINT_NAME_LAST):
        pattern = "".join(
            (re.escape(part[1:-1].split(":")[0]) + "=" if callback.auto_insert_metric_name else "") + ".*"
            if part.startswith("{") and part.endswith("}")
            else re.escape(part)
            for part in re.split(r"(\{[^{}]*\})", template)
        )
        if re.fullmatch(rf"{pattern}(-v\d+)?{re.escape(callback.FILE_EXTENSION)}", name):
            return True
    return False


def saved_path(path) -> str:
    """A checkpoint path as :class:`CheckedCheckpointIO` records it: a local one absolute, a remote one as given."""
    path = os.fspath(path)
    return path if "://" in path else os.path.abspath(path)


def check_fits(checkpoint: dict, module: torch.nn.Module, path, optimizer: bool = True) -> None:
    """Raise :class:`CheckpointError` (one line) unless the checkpoint's weights are ``module``'s (the
    same names and shapes, dense tensors, floating point where the module's are) and, where the module's
    optimizer is the package's one Adam over its weights in order, Adam's state of those weights
    (:func:`is_adam_state`). Lightning would restore either without a check, and fail in a
    multi-line error there or at the first step. ``optimizer=False``: the weights only."""
    state = checkpoint.get("state_dict")
    state = state if isinstance(state, dict) else {}
    expected = module.state_dict()
    wrong = sorted(set(state) ^ set(expected)) + [
        name
        for name in state.keys() & expected.keys()
        if not torch.is_tensor(state[name])
        or state[name].layout != torch.strided
        or tuple(state[name].shape) != tuple(expected[name].shape)
        or state[name].is_floating_point() != expected[name].is_floating_point()
    ]
    if wrong:
        raise CheckpointError(
            f"{path} is not a checkpoint of this model: its weights differ in {', '.join(map(shown, wrong[:3]))}"
            f"{' and more' if len(wrong) > 3 else ''}."
        )
    from .lightning_module import PonderLitModule

    if (
        not optimizer
        or getattr(type(module), "configure_optimizers", None) is not PonderLitModule.configure_optimizers
    ):
        return  # (another optimizer: its state's order is its own)
    shapes = [tuple(p.shape) for p in module.parameters()]
    for optimizer in checkpoint.get("optimizer_states") or []:
        moments = optimizer.get("state") if isinstance(optimizer, dict) else None
        groups = optimizer.get("param_groups") if isinstance(optimizer, dict) else None
        if (
            not holds_adam_state(moments, shapes)
            or not isinstance(groups, list)
            or [g.get("params") if isinstance(g, dict) else None for g in groups]
            != [list(range(len(shapes)))]
        ):
            raise CheckpointError(
                f"{path} is not a checkpoint of this model: its optimizer's state is not Adam's for its weights."
            )
    check_training_state(checkpoint, module, path)


def check_training_state(checkpoint: dict, module, path) -> None:
    """Raise :class:`CheckpointError` unless what Lightning restores besides the weights and Adam's
    moments is what ``module`` (a PonderLitModule) saves: Adam's settings with a rate within the
    module's ``lr`` (:func:`check_adam_settings`), its plateau schedule or none
    (:func:`check_plateau_schedule`), and a Lightning version from 2.0 on (an older one's migration
    fails on this checkpoint's layout). Lightning restores each as it is found."""
    epoch, hparams = checkpoint.get("epoch"), module.hparams
    version = checkpoint.get("pytorch-lightning_version")
    try:
        if not _lightning_version_ok(version):
            raise CheckpointError(
                f"its Lightning version is {str(version)[:20]!r}, not one from 2.0 to the installed one"
            )
        if isinstance(epoch, bool) or not isinstance(epoch, int) or epoch < 0:
            raise CheckpointError(f"its epoch is {str(epoch)[:20]!r}, not a whole number")
        for optimizer in checkpoint.get("optimizer_states") or []:
            check_adam_settings(
                optimizer.get("param_groups"), float(hparams.lr), len(list(module.parameters()))
            )
        schedules = checkpoint.get("lr_schedulers") or []
        if hparams.get("lr_schedule") != "plateau" and schedules:
            raise CheckpointError(
                f"it holds a learning-rate schedule, and this module's is {hparams.get('lr_schedule')!r}"
            )
        for schedule in schedules:
            check_plateau_schedule(schedule, hparams, epoch, fewest=0)  # a fit continued skips a step
    except CheckpointError as error:
        raise CheckpointError(f"{path} is not a checkpoint of this module: {error}.") from None


def _lightning_version_ok(version) -> bool:
    """Whether ``version`` names a Lightning release from 2.0.0 to the installed one: an older one's
    migration fails on this checkpoint's layout, a text that is no version fails in Lightning."""
    import lightning
    from packaging.version import InvalidVersion, Version

    try:
        installed = Version(lightning.__version__)
        return isinstance(version, str) and Version("2.0.0") <= Version(version) <= installed
    except InvalidVersion:
        return False


def check_plateau_schedule(schedule, hparams, epochs: int, fewest: int | None = None) -> None:
    """Raise ``CheckpointError`` unless ``schedule`` is the state of the plateau schedule that the
    module builds (``lr_factor``, ``lr_patience``, on ``val/acc``), stepped at most once per epoch (and
    ``epochs`` times at least, or ``fewest``), with rates in (0, ``lr``]: torch restores it by
    ``__dict__.update``, whatever it holds."""
    stand_in = torch.optim.SGD([torch.zeros(1)], lr=float(hparams.lr))
    built = torch.optim.lr_scheduler.ReduceLROnPlateau(
        stand_in, mode="max", factor=hparams.lr_factor, patience=hparams.lr_patience
    ).state_dict()
    counters = {"best", "num_bad_epochs", "last_epoch", "_last_lr", "cooldown_counter"}
    if (
        not isinstance(schedule, dict)
        or schedule.keys() != built.keys()
        or any(schedule[key] != built[key] for key in built.keys() - counters)
        or any(isinstance(schedule[key], bool) for key in ("last_epoch", "num_bad_epochs"))
        or not isinstance(schedule["last_epoch"], int)
        or not (epochs if fewest is None else fewest) <= schedule["last_epoch"] <= epochs + 1
        or not isinstance(schedule["num_bad_epochs"], int)
        or not 0 <= schedule["num_bad_epochs"] <= epochs + 1
        or not isinstance(schedule["_last_lr"], list)
        or not all(isinstance(r, float) and 0 < r <= float(hparams.lr) for r in schedule["_last_lr"])
        or schedule["cooldown_counter"] != 0  # no cooldown: forged, it holds the rate
        or isinstance(schedule["cooldown_counter"], bool)
        or not isinstance(schedule["best"], float)
        or not (schedule["best"] == float("-inf") or 0 <= schedule["best"] <= 1)  # an accuracy, or none yet
    ):
        raise CheckpointError("its learning-rate schedule is not this module's plateau schedule")


# Adam's settings as the module builds it (torch's defaults, but the learning rate): a group saved
# with others (maximize=True climbs the loss) is not this module's
ADAM_SETTINGS = {
    "betas": (0.9, 0.999),
    "eps": 1e-8,
    "weight_decay": 0,
    "amsgrad": False,
    "maximize": False,
    "capturable": False,  # the fast path saves its optimiser as the plain module's (fast_path.py)
    "differentiable": False,
    "fused": None,
}


def check_adam_settings(groups, lr: float, n_parameters: int) -> None:
    """Raise ``CheckpointError`` unless ``groups`` is Adam's one parameter group over the module's
    weights in their order, with the settings the module gives it (:data:`ADAM_SETTINGS`,
    plain numbers, never tensors) and a learning rate in (0, ``lr``] (a plateau schedule only lowers
    it)."""
    if not isinstance(groups, list) or len(groups) != 1 or not isinstance(groups[0], dict):
        raise CheckpointError("its optimizer does not hold the module's one parameter group")
    group = groups[0]
    if group.get("params") != list(range(n_parameters)):  # torch maps the state by this order
        raise CheckpointError("its optimizer's parameters are not the model's, in its order")
    for name, expected in ADAM_SETTINGS.items():
        saved = group.get(name)
        if isinstance(saved, list):  # (a tuple saved through a checkpoint may come back a list)
            saved = tuple(saved)
        plain_values = not any(torch.is_tensor(v) for v in (saved if isinstance(saved, tuple) else (saved,)))
        if not plain_values or saved != expected:
            raise CheckpointError(f"its optimizer's {name} is {saved!r}, not the module's {expected!r}")
    rate = group.get("lr")  # a plain number: a tensor would reach plain Adam as one
    if isinstance(rate, bool) or not isinstance(rate, (int, float)) or not 0 < rate <= lr:
        raise CheckpointError(f"its learning rate {rate!r} is not in (0, {lr:g}], the module's lr")


ADAM_STATE = {"step", "exp_avg", "exp_avg_sq"}  # what Adam keeps per parameter


def number(value):
    """A one-element tensor's number (torch keeps Adam's step and a captured rate as tensors); anything
    else as it is."""
    return value.item() if torch.is_tensor(value) and value.numel() == 1 else value


def holds_adam_state(moments, shapes: list[tuple]) -> bool:
    """Whether ``moments`` (an optimizer's saved ``state``, by the index of a weight) is a dictionary of
    Adam's state (:func:`is_adam_state`) of weights of ``shapes``."""
    return isinstance(moments, dict) and all(
        isinstance(i, int) and 0 <= i < len(shapes) and is_adam_state(values, shapes[i])
        for i, values in moments.items()
    )


def is_adam_state(values, shape: tuple) -> bool:
    """Adam's state of one weight of ``shape``: a step count of at least 1, and both moments dense
    floating-point tensors of the weight's shape, finite, the second never negative."""
    if not isinstance(values, dict) or values.keys() != ADAM_STATE:
        return False
    step, first, second = number(values["step"]), values["exp_avg"], values["exp_avg_sq"]
    return (
        isinstance(step, (int, float))
        and not isinstance(step, bool)
        and step >= 1
        and float(step).is_integer()
        and all(
            torch.is_tensor(v)
            and v.layout == torch.strided
            and v.is_floating_point()
            and tuple(v.shape) == shape
            and torch.isfinite(v).all()
            for v in (first, second)
        )
        and bool((second >= 0).all())
    )


def _is_score(value) -> bool:
    return isinstance(value, (float, int, torch.Tensor)) and torch.as_tensor(value).numel() == 1


class FolderCheckpoint(ModelCheckpoint):
    """Lightning's ``ModelCheckpoint``, restored from a checkpoint without trusting the paths in it.

    Lightning restores the paths of the best and the k-th best checkpoints as they were recorded, later
    deletes the k-th best one (recursively, when a better epoch comes) and loads the best one: a
    recorded ``checkpoints/../victim`` would be deleted, a recorded FIFO would block the load. Here only
    the recorded best file's *name* is used, in this callback's own folder, and only when it is one of
    its own checkpoint files (``best.ckpt``, ``best-v1.ckpt``, ...), a regular file within the bound,
    with a numeric score; anything else restores nothing (the next epoch's checkpoint is the best so
    far). :meth:`load_best` reads the best file through :func:`read_checkpoint_file`.
    """

    def setup(self, trainer, pl_module, stage: str) -> None:
        super().setup(trainer, pl_module, stage)
        self.max_bytes = checkpoint_bound(pl_module)

    def on_validation_end(self, trainer, pl_module) -> None:
        # at Lightning's sanity check, before the first step, or at the first validation without one
        logged = trainer.callback_metrics
        if str(self.monitor).startswith("val/") and self.monitor not in logged:
            raise ValueError(
                f"select_by={self.monitor!r} is not logged in validation: choose one of "
                f"{', '.join(sorted(name for name in logged if name.startswith('val/')))}."
            )
        super().on_validation_end(trainer, pl_module)

    def load_state_dict(self, state_dict: dict) -> None:
        if self.dirpath is None or not isinstance(state_dict, dict):
            return
        name = Path(str(state_dict.get("best_model_path") or "")).name
        path = Path(self.dirpath) / name
        score = state_dict.get("best_model_score")
        if not re.fullmatch(rf"{re.escape(self.filename or '')}(-v\d+)?\.ckpt", name):
            return
        if self.monitor is not None and not _is_score(score):
            return
        try:  # the best epoch's file must be one that load_best can use, or its record is not kept
            _epoch_of(read_checkpoint_file(path, getattr(self, "max_bytes", CHECKPOINT_OVERHEAD)), path)
        except CheckpointError:
            return
        self.best_model_path = self.kth_best_model_path = str(path)
        if self.monitor is not None:
            self.best_model_score = self.kth_value = torch.as_tensor(float(score))
            self.best_k_models = {str(path): self.best_model_score}

    def load_best(self, module: torch.nn.Module) -> int | None:
        """Load the best epoch's weights into ``module``; its epoch, or ``None`` when none was kept."""
        if not self.best_model_path:
            return None
        checkpoint = read_checkpoint_file(self.best_model_path, checkpoint_bound(module))
        epoch = _epoch_of(checkpoint, self.best_model_path)
        check_fits(checkpoint, module, self.best_model_path)
        module.load_state_dict(checkpoint["state_dict"])
        return epoch


def _epoch_of(checkpoint: dict, path) -> int:
    """A checkpoint's epoch, a whole number >= 0 with a state dict beside it, or a CheckpointError."""
    epoch = checkpoint.get("epoch")
    if isinstance(epoch, bool) or not isinstance(epoch, int) or epoch < 0 or "state_dict" not in checkpoint:
        raise CheckpointError(f"{path} is not a checkpoint of an epoch (its epoch is {str(epoch)[:20]!r}).")
    return epoch
