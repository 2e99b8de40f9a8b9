"""Weights-only checkpoints and the pretrained runs shipped with the package.

A checkpoint is a ``torch.save`` of plain data: ``{"format", "hparams", "state_dict"}``. It loads with
``torch.load(weights_only=True)``, which never runs code from the file. The hyperparameters name the
step function, the halting method and the loss by registered name or import path, so any run that the
registry describes is rebuilt from its file (a Lightning ``.ckpt`` of a :class:`PonderLitModule` also
works, see :func:`load_model`).

Shipped runs live in ``pretrained/<experiment>/<variant>/seed<k>/`` like any run folder, and
:func:`load_pretrained` finds them by experiment, method, options and seed.
"""

from __future__ import annotations

import inspect
import json
import os
from pathlib import Path

import torch

from .config import PRETRAINED_DIR, TrainConfig, check_same_identity
from .lightning_module import PonderLitModule

FORMAT = "pondernet_tutorial/weights-v2"


class CheckpointError(RuntimeError):
    """A checkpoint file is missing, damaged or does not fit the model."""


def save_weights(module: PonderLitModule, path: str | os.PathLike) -> Path:
    """Save the module's hyperparameters and weights (tensors and plain values only)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    state = {k: v.detach().cpu().clone() for k, v in module.state_dict().items()}
    torch.save({"format": FORMAT, "hparams": dict(module.hparams), "state_dict": state}, path)
    return path


def _accepted_hparams() -> set[str]:
    return set(inspect.signature(PonderLitModule.__init__).parameters) - {"self", "compile", "cuda_graph"}


def load_model(path: str | os.PathLike, map_location="cpu") -> PonderLitModule:
    """Load a checkpoint written by :func:`save_weights` (or a Lightning ``.ckpt``), in eval mode.

    Raises:
        CheckpointError: the file is missing, damaged, of another format, not a PonderNet checkpoint,
            has hyperparameters this package does not know (named in the message), or its weights do
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
    if "format" in blob and blob["format"] != FORMAT:
        raise CheckpointError(
            f"{path} has format {blob['format']!r}, this package reads {FORMAT!r}: it was written by "
            "another version of pondernet_tutorial; train the run again with this one."
        )
    hparams = dict(blob.get("hparams") or blob.get("hyper_parameters") or {})
    unknown = sorted(set(hparams) - _accepted_hparams())
    if unknown:
        raise CheckpointError(f"{path} has hyperparameters this package does not know: {', '.join(unknown)}.")
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


def pretrained_config(experiment: str, method: str = "pondernet", seed: int = 0, **options) -> TrainConfig:
    """The configuration of a shipped run (``options`` as in :class:`TrainConfig`)."""
    return TrainConfig(
        experiment=experiment, method=method, seed=seed, output_dir=str(PRETRAINED_DIR), **options
    )


def available_pretrained(root: str | os.PathLike | None = None) -> list[dict]:
    """Every shipped run with weights: ``[{"experiment", "variant", "seed", "path"}, ...]``."""
    root = Path(root or PRETRAINED_DIR)
    runs = []
    for model in sorted(root.glob("*/*/seed*/model.pt")):
        run = model.parent
        runs.append(
            {
                "experiment": run.parent.parent.name,
                "variant": run.parent.name,
                "seed": int(run.name.removeprefix("seed")),
                "path": run,
            }
        )
    return runs


def load_pretrained(
    experiment: str, method: str = "pondernet", seed: int = 0, map_location="cpu", **options
) -> PonderLitModule:
    """A shipped model, ready in eval mode.

    ``load_pretrained("mnist-interpolation")`` is the reference PonderNet (seed 0);
    ``load_pretrained("parity-extrapolation", "act", seed=1, tau=0.01)`` an ACT run on parity. The
    ``options`` are :class:`TrainConfig` fields; they pick the run folder, and the run's recorded
    configuration must equal them.
    """
    config = pretrained_config(experiment, method, seed, **options)
    folder = config.run_dir
    if not (folder / "model.pt").is_file():
        have = sorted({f"{r['experiment']}/{r['variant']}" for r in available_pretrained()})
        raise CheckpointError(
            f"no shipped model {experiment}/{config.variant} for seed {seed}; shipped: "
            f"{', '.join(have) or 'none'}. Train it with `python -m pondernet_tutorial reproduce`."
        )
    metadata = json.loads((folder / "metadata.json").read_text())
    try:
        check_same_identity(metadata["identity"], config.identity(), f"the shipped run in {folder}")
    except ValueError as error:
        raise CheckpointError(str(error)) from error
    return load_model(folder / "model.pt", map_location)


def load_metadata(experiment: str, method: str = "pondernet", seed: int = 0, **options) -> dict:
    """The metadata of a shipped run (configuration, epochs, stopping, wall time, hardware, versions)."""
    folder = pretrained_config(experiment, method, seed, **options).run_dir
    return json.loads((folder / "metadata.json").read_text())
