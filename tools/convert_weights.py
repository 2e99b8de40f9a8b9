"""Convert run folders' ``model.pt`` (weights-only pickles of pondernet_tutorial before issue 31) into
``model.safetensors``, the format the package now reads, and delete each ``model.pt``.

    python tools/convert_weights.py [ROOT ...]    # default: the shipped runs, pondernet_tutorial/pretrained

Each old file is read weights-only (``torch.load(weights_only=True)``: plain data, never code), its
module is rebuilt and written with :func:`~pondernet_tutorial.runs.checkpoints.save_weights`, and the new
file is loaded back with :func:`~pondernet_tutorial.runs.checkpoints.load_model` (every check of a run
folder) and compared tensor by tensor with the old one before the old one is deleted. Only for files you
made or trust: this tool is not part of the package.
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch

from pondernet_tutorial.runs.checkpoints import load_model, save_weights
from pondernet_tutorial.runs.config import PRETRAINED_DIR, WEIGHTS
from pondernet_tutorial.runs.module import RunModule


def convert(old: Path) -> Path:
    blob = torch.load(old, map_location="cpu", weights_only=True)
    module = RunModule(**blob["hparams"])
    module.load_state_dict(blob["state_dict"])
    new = save_weights(module, old.with_name(WEIGHTS))
    loaded = load_model(new).state_dict()
    if loaded.keys() != blob["state_dict"].keys() or not all(
        torch.equal(loaded[k], v) for k, v in blob["state_dict"].items()
    ):
        new.unlink()
        raise SystemExit(f"{new} does not hold the weights of {old}: nothing deleted")
    old.unlink()
    return new


def main(roots: list[str]) -> int:
    olds = sorted(p for root in roots or [PRETRAINED_DIR] for p in Path(root).rglob("model.pt"))
    for old in olds:
        print(convert(old))
    print(f"{len(olds)} model.pt converted to {WEIGHTS}, each tensor equal")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
