"""Weights-only checkpoints and the pretrained models shipped with the package.

A checkpoint is a ``torch.save`` of plain data: ``{"format", "hparams", "state_dict"}``. It loads with
``torch.load(weights_only=True)``, which never runs code from the file (a Lightning ``.ckpt`` also
works, see :func:`load_model`).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import torch

from .lightning_module import PonderLitModule

FORMAT = "pondernet_tutorial/weights-v1"
PRETRAINED_DIR = Path(__file__).parent / "pretrained"
EXPERIMENTS = ("interpolation", "extrapolation")


class CheckpointError(RuntimeError):
    """A checkpoint file is missing, damaged or does not fit the model."""


def save_weights(module: PonderLitModule, path: str | os.PathLike) -> Path:
    """Save the module's hyperparameters and weights (tensors and plain values only)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    state = {k: v.detach().cpu().clone() for k, v in module.state_dict().items()}
    torch.save({"format": FORMAT, "hparams": dict(module.hparams), "state_dict": state}, path)
    return path


def load_model(path: str | os.PathLike, map_location="cpu") -> PonderLitModule:
    """Load a checkpoint written by :func:`save_weights` (or a Lightning ``.ckpt``), in eval mode.

    Raises:
        CheckpointError: the file is missing, damaged, not a PonderNet checkpoint, or its weights do
            not fit the model its hyperparameters describe.
    """
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(
            f"no checkpoint at {path}; train one with `python -m pondernet_tutorial train`."
        )
    try:
        blob = torch.load(path, map_location=map_location, weights_only=True)
    except Exception as error:
        raise CheckpointError(
            f"{path} could not be read as a weights-only checkpoint ({type(error).__name__}: {error}). "
            "The file is damaged or is not a PonderNet checkpoint: download or train it again."
        ) from error
    if not isinstance(blob, dict) or "state_dict" not in blob:
        raise CheckpointError(f"{path} is not a PonderNet checkpoint: it has no 'state_dict'.")
    hparams = blob.get("hparams") or blob.get("hyper_parameters") or {}
    try:
        module = PonderLitModule(**hparams)
    except (TypeError, ValueError) as error:
        raise CheckpointError(f"{path} has hyperparameters this package does not accept: {error}") from error
    try:
        module.load_state_dict(blob["state_dict"])
    except RuntimeError as error:
        raise CheckpointError(
            f"the weights in {path} do not fit the model its hyperparameters describe: {error}"
        ) from error
    return module.eval()


def pretrained_path(
    experiment: str = "interpolation", seed: int = 0, root: str | os.PathLike | None = None
) -> Path:
    """Folder of a shipped run, e.g. ``pretrained/interpolation/seed0``."""
    if experiment not in EXPERIMENTS:
        raise ValueError(f"experiment must be one of {EXPERIMENTS}, got {experiment!r}.")
    return Path(root or PRETRAINED_DIR) / experiment / f"seed{seed}"


def available_pretrained(root: str | os.PathLike | None = None) -> dict[str, list[int]]:
    """``{experiment: [seeds]}`` of the shipped runs that have weights."""
    root = Path(root or PRETRAINED_DIR)
    found = {}
    for experiment in EXPERIMENTS:
        seeds = sorted(
            int(p.parent.name.removeprefix("seed")) for p in (root / experiment).glob("seed*/model.pt")
        )
        if seeds:
            found[experiment] = seeds
    return found


def load_pretrained(
    experiment: str = "interpolation",
    seed: int = 0,
    root: str | os.PathLike | None = None,
    map_location="cpu",
) -> PonderLitModule:
    """A shipped model, ready in eval mode: ``load_pretrained("interpolation", seed=0)``."""
    folder = pretrained_path(experiment, seed, root)
    if not (folder / "model.pt").is_file():
        have = available_pretrained(root)
        raise CheckpointError(
            f"no shipped {experiment} model for seed {seed} in {folder}; available: {have or 'none'}. "
            "Run `python -m pondernet_tutorial reproduce` to train them."
        )
    return load_model(folder / "model.pt", map_location)


def load_metadata(
    experiment: str = "interpolation", seed: int = 0, root: str | os.PathLike | None = None
) -> dict:
    """The metadata of a shipped run (hyperparameters, epochs, wall time, hardware, versions)."""
    return json.loads((pretrained_path(experiment, seed, root) / "metadata.json").read_text())
