"""Lightning checkpoints read as data, and a checkpoint callback that trusts no path it restores.

A checkpoint handed to :func:`~pondernet_tutorial.fitting.fit` (``ckpt_path``), or one that it finds in
its own folder, may come from anyone:

- :func:`read_checkpoint_file` reads it through one descriptor, checked by
  :func:`~pondernet_tutorial.untrusted.open_regular` (a regular file, never a link, a FIFO or a device,
  of bounded size); the sizes its archive's members inflate to are added up before anything is
  inflated, and ``torch.load`` runs weights-only (it never runs code from the file).
  :class:`CheckedCheckpointIO` makes every load that Lightning does go through it.
- :class:`FolderCheckpoint` is Lightning's ``ModelCheckpoint`` restored without trusting a path: the
  paths that Lightning restores from a checkpoint are later deleted (the k-th best one, recursively)
  or loaded (the best one), so only the recorded file *name* is used, in the callback's own folder,
  and only when it is one of its own checkpoint files.
"""

from __future__ import annotations

import io
import re
import zipfile
from pathlib import Path

import torch
from lightning.pytorch.callbacks import ModelCheckpoint
from lightning.pytorch.plugins.io import TorchCheckpointIO

from .untrusted import NOT_THERE, CheckpointError, DamagedFileError, open_regular

CHECKPOINT_OVERHEAD = 64 * 2**20  # a checkpoint's counters, callback states and history, besides weights


def checkpoint_bound(module: torch.nn.Module) -> int:
    """The most bytes a Lightning checkpoint of ``module`` holds, inflated: its weights and Adam's two
    moments, and :data:`CHECKPOINT_OVERHEAD` for the rest."""
    weights = sum(p.numel() * p.element_size() for p in module.state_dict().values() if torch.is_tensor(p))
    return 3 * weights + CHECKPOINT_OVERHEAD


def read_checkpoint_file(path, max_bytes: int) -> dict:
    """A Lightning checkpoint read as data: a regular file (never a link, a FIFO or a device) of at most
    ``max_bytes``, whose archive members inflate to at most ``max_bytes`` in all, loaded weights-only
    from the descriptor that was checked.

    Raises:
        CheckpointError: one line on why the file cannot be read; never PyTorch's advice to load it
            unsafely.
        OSError, MemoryError: the machine failed to read it (an I/O error, no permission, no memory),
            which says nothing of the file: raised as they are, so that no caller takes the file for
            damaged and deletes it.
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
    buffer = io.BytesIO(data)
    try:
        if zipfile.is_zipfile(buffer):  # torch.save's format: its members' sizes, before inflating
            with zipfile.ZipFile(buffer) as archive:
                inflated = sum(member.file_size for member in archive.infolist())
            if inflated > max_bytes:
                raise CheckpointError(
                    f"{path} inflates to {inflated:,} bytes, more than a checkpoint of this model "
                    f"({max_bytes:,})."
                )
        buffer.seek(0)
        checkpoint = torch.load(buffer, map_location="cpu", weights_only=True)
    except (CheckpointError, MemoryError):  # the allocator's refusal says nothing of the file
        raise
    except Exception as error:  # a pickle that asks for code, a truncated file: the first line only
        first = (str(error).strip().splitlines() or [type(error).__name__])[0][:160]
        raise CheckpointError(f"{path} is not a weights-only checkpoint ({first})") from None
    if not isinstance(checkpoint, dict) or not isinstance(checkpoint.get("state_dict"), dict):
        raise CheckpointError(f"{path} is not a Lightning checkpoint (no state_dict).")
    return checkpoint


class CheckedCheckpointIO(TorchCheckpointIO):
    """Lightning's checkpoint input and output, with every load made by :func:`read_checkpoint_file`
    (saves are Lightning's own; the run machinery's subclass writes them whole beside their file), and,
    given the ``module`` it restores, checked to fit it (:func:`check_fits`)."""

    def __init__(self, max_bytes: int, module: torch.nn.Module | None = None):
        self.max_bytes, self.module = max_bytes, module

    def load_checkpoint(self, path, map_location=None, weights_only=True) -> dict:
        checkpoint = read_checkpoint_file(path, self.max_bytes)
        if self.module is not None:
            check_fits(checkpoint, self.module, path)
        return checkpoint


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
            f"{path} is not a checkpoint of this model: its weights differ in {', '.join(wrong[:3])}"
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
