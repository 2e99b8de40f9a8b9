"""MNIST as tensors, batched rotation, and the Lightning data module.

The whole of MNIST fits in memory (47 MB as uint8), so it is loaded once into tensors and served in
batches by index: no per-image PIL transform. Rotation is applied to whole batches on the device with
``affine_grid``/``grid_sample``, so a rotated epoch costs little more than a plain one.

Where the data lives (:func:`resolve_data_dir`, the one place that decides it, for the package, its
tests and the notebooks alike): the ``data_dir`` argument if given; else the environment variable
``PONDERNET_DATA_DIR``, which must be an absolute path; else, when the package runs from a clone of its
repository, ``shared/data`` beside the clone, if it holds MNIST; else a user cache folder
(``~/.cache/pondernet_tutorial``) where torchvision downloads MNIST on a machine with internet.
"""

from __future__ import annotations

import contextlib
import io
import math
import os
import stat
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import Tensor

from .base import TensorBatches

DATA_DIR_VARIABLE = "PONDERNET_DATA_DIR"
DEFAULT_DATA_DIR = Path.home() / ".cache" / "pondernet_tutorial"
MNIST_FILES = (
    "train-images-idx3-ubyte",
    "train-labels-idx1-ubyte",
    "t10k-images-idx3-ubyte",
    "t10k-labels-idx1-ubyte",
)
TRAIN_SIZE, VAL_SIZE = 55_000, 5_000
MAX_ARCHIVE_BYTES = 16 * 2**20  # MNIST's largest archive, train-images-idx3-ubyte.gz, holds 9.9 MB
SPLIT_SEED = 1234  # the fixed 55,000 / 5,000 split does not depend on the training seed


class MNISTNotFoundError(FileNotFoundError):
    """MNIST is neither on disk nor downloadable."""


class MNISTDamagedError(RuntimeError):
    """An MNIST file is on disk but truncated or corrupt."""


class RelativeDataDirError(MNISTNotFoundError):
    """``PONDERNET_DATA_DIR`` is a relative path."""


def checkout_data_dir() -> Path | None:
    """``shared/data`` beside the clone of the repository that this package is imported from, when it
    holds MNIST; None for an installed package, or when there is no such folder.

    A clone is recognised by its ``pyproject.toml`` beside the package folder. The folder is found
    from the package's own location, so it is the same from any working directory (the notebooks run
    from ``book/``).
    """
    root = Path(__file__).resolve().parents[2]
    if not (root / "pyproject.toml").is_file():
        return None
    shared = root.parent / "shared" / "data"
    return shared if all((shared / "MNIST" / "raw" / name).is_file() for name in MNIST_FILES) else None


def resolve_data_dir(data_dir: str | os.PathLike | None = None) -> Path:
    """The folder that holds (or will hold) ``MNIST/raw``: ``data_dir`` if given; else
    ``$PONDERNET_DATA_DIR`` if set; else :func:`checkout_data_dir` if it finds one; else
    ``~/.cache/pondernet_tutorial``.

    Raises:
        RelativeDataDirError: ``$PONDERNET_DATA_DIR`` is relative. Each process would resolve it
            against its own working directory (the book runs the notebooks from ``book/``, the tests run
            from the repository), so it is refused rather than guessed.
    """
    if data_dir is not None:
        return Path(data_dir).expanduser()
    env = os.environ.get(DATA_DIR_VARIABLE)
    if env:
        path = Path(env).expanduser()
        if not path.is_absolute():
            raise RelativeDataDirError(
                f"{DATA_DIR_VARIABLE}={env!r} is a relative path, which names another folder in every "
                f"working directory (the notebooks run from book/): set it to an absolute path, for "
                f'example export {DATA_DIR_VARIABLE}="$(realpath {env})", or unset it to use '
                "shared/data beside the clone."
            )
        return path
    return checkout_data_dir() or DEFAULT_DATA_DIR


def _split_files(train: bool) -> tuple[str, str]:
    prefix = "train" if train else "t10k"
    return f"{prefix}-images-idx3-ubyte", f"{prefix}-labels-idx1-ubyte"


def read_idx(path: Path, shape: tuple[int, ...]) -> Tensor:
    """Read an uncompressed IDX file of unsigned bytes with the given shape, or raise
    :class:`MNISTDamagedError` naming the file. The header and the file's size are checked before the
    data is read: a file of another shape or size (a huge sparse file included) is never read whole."""
    magic = 0x800 + len(shape)  # 0x00000803 for images, 0x00000801 for labels
    header = 4 + 4 * len(shape)
    expected = (magic, *shape)
    size = header + math.prod(shape)
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))  # a FIFO never blocks the open
    except OSError as error:
        raise MNISTDamagedError(
            f"{path} cannot be read ({error.strerror}). Delete it and download MNIST again."
        ) from None
    with open(fd, "rb") as file:
        info = os.fstat(fd)
        head = file.read(header) if stat.S_ISREG(info.st_mode) else b""
        found = tuple(int.from_bytes(head[4 * i : 4 * i + 4], "big") for i in range(len(shape) + 1))
        if found != expected or info.st_size != size:
            raise MNISTDamagedError(
                f"{path} is damaged: expected an IDX file of shape {shape} ({size} bytes), "
                f"found header {found[1:]} and {info.st_size} bytes. Delete it and download MNIST again."
            )
        data = file.read(size - header)
    if len(data) != size - header:
        raise MNISTDamagedError(f"{path} changed while it was read. Download MNIST again.")
    return torch.frombuffer(bytearray(data), dtype=torch.uint8).view(shape)


def download_mnist(data_dir: str | os.PathLike | None = None) -> Path:
    """Make sure the four MNIST files are on disk, downloading them with torchvision if needed.

    Returns:
        the folder ``<data dir>/MNIST/raw`` that holds them.

    Raises:
        MNISTNotFoundError: offline with no copy on disk; the message names the files and the variable.
    """
    root = resolve_data_dir(data_dir)
    raw = root / "MNIST" / "raw"
    if all((raw / name).is_file() for name in MNIST_FILES):
        return raw
    # torchvision reads every archive it finds there whole (its MD5 check) and writes beside it: refuse
    # what is no archive of MNIST's first (a 1 TB sparse file, a FIFO, a link out of the folder)
    for name in (*MNIST_FILES, *(f"{name}.gz" for name in MNIST_FILES)):
        try:
            info = os.lstat(raw / name)
        except OSError:  # not there: torchvision downloads it
            continue
        if not stat.S_ISREG(info.st_mode) or (name.endswith(".gz") and info.st_size > MAX_ARCHIVE_BYTES):
            raise MNISTDamagedError(
                f"{raw / name} is not an MNIST file (not a regular file, or more than {MAX_ARCHIVE_BYTES:,} "
                "bytes): delete it, then download MNIST again."
            )
    from torchvision.datasets import MNIST

    messages = io.StringIO()  # torchvision prints every mirror it tries: keep that for the error
    try:
        with contextlib.redirect_stdout(messages), contextlib.redirect_stderr(messages):
            for train in (True, False):
                MNIST(root=str(root), train=train, download=True)
    except Exception as error:  # no network, or a partial download
        reason = (str(error).strip().splitlines() or [""])[0]
        # a folder given by the caller (--data-dir) comes before the variable: name what helps
        elsewhere = (
            "or give the folder that holds MNIST/raw/ instead (--data-dir, data_dir=)"
            if data_dir is not None
            else f"or set the environment variable {DATA_DIR_VARIABLE} to the folder that holds MNIST/raw/"
        )
        raise MNISTNotFoundError(
            f"MNIST could not be found under {raw} nor downloaded ({type(error).__name__}: {reason}). "
            f"Put the four IDX files ({', '.join(MNIST_FILES)}) in {raw}, {elsewhere}, or go online once "
            "so that torchvision can download them."
        ) from error
    return raw


def load_mnist(train: bool, data_dir: str | os.PathLike | None = None) -> tuple[Tensor, Tensor]:
    """Load an MNIST split as tensors, downloading it with torchvision if it is missing.

    Returns:
        images ``(M, 1, 28, 28)`` uint8 and labels ``(M,)`` int64.

    Raises:
        MNISTNotFoundError: offline with no copy on disk; the message names the files and the variable.
        MNISTDamagedError: a file is truncated or corrupt; the message names it.
    """
    raw = download_mnist(data_dir)
    images_file, labels_file = _split_files(train)
    count = 60_000 if train else 10_000
    images = read_idx(raw / images_file, (count, 28, 28))
    labels = read_idx(raw / labels_file, (count,))
    if int(labels.max()) > 9:  # unsigned bytes: never below 0
        raise MNISTDamagedError(
            f"{raw / labels_file} is damaged: it holds label {int(labels.max())}, where digits are 0-9. "
            "Delete it and download MNIST again."
        )
    return images.unsqueeze(1).contiguous(), labels.long()


def rotate(images: Tensor, angles_deg: Tensor) -> Tensor:
    """Rotate a batch of images by per-image angles (counter-clockwise, degrees), bilinearly.

    Args:
        images: ``(B, C, H, W)`` float images; the background (0) fills the corners.
        angles_deg: ``(B,)`` angles in degrees.

    Returns:
        ``(B, C, H, W)`` rotated images.
    """
    if images.dim() != 4 or angles_deg.shape != images.shape[:1]:
        raise ValueError(
            f"expected images (B, C, H, W) and angles (B,), got {tuple(images.shape)} and "
            f"{tuple(angles_deg.shape)}."
        )
    theta = angles_deg.to(images.device, torch.float32) * (math.pi / 180.0)
    cos, sin = torch.cos(theta), torch.sin(theta)
    zero = torch.zeros_like(cos)
    # The grid maps output to input pixel coordinates (x right, y down); this matrix turns the digit
    # counter-clockwise on screen, like torchvision's rotate and np.rot90.
    affine = torch.stack([torch.stack([cos, -sin, zero], 1), torch.stack([sin, cos, zero], 1)], 1)
    if not images.is_floating_point():
        raise ValueError(f"rotate needs float images, got {images.dtype}; use images.float() / 255.")
    grid = F.affine_grid(affine.to(images.dtype), list(images.shape), align_corners=False)
    return F.grid_sample(images, grid, mode="bilinear", padding_mode="zeros", align_corners=False)


def uniform_angles(n: int, max_deg: float, generator: torch.Generator | None = None) -> Tensor:
    """``(n,)`` angles drawn uniformly in ``[−max_deg, +max_deg]``."""
    return (torch.rand(n, generator=generator) * 2.0 - 1.0) * max_deg


EXACT_ANGLES = tuple(range(-180, 181, 15))  # signed: positive turns counter-clockwise
REFERENCE_ANGLES = (22.5, 45.0, 67.5, 90.0)  # RandomRotation(θ) of the popular implementations
MAX_ROTATIONS = 64  # rotated test sets of one evaluation: the default sweep has 29
ROTATIONS_REASON = "each keeps a rotated copy of the 10,000 test digits, 31 MB, in memory"


@dataclass(frozen=True)
class RotationSpec:
    """How a test set is rotated: by exactly ``degrees`` (positive: counter-clockwise, negative:
    clockwise), or uniformly within ±``degrees``."""

    degrees: float
    mode: str = "exact"  # "exact" or "uniform"

    def __post_init__(self):
        if self.mode not in ("exact", "uniform"):
            raise ValueError(f"rotation mode must be 'exact' or 'uniform', got {self.mode!r}.")
        if not -360 <= self.degrees <= 360:  # (NaN too) one turn each way names every rotation
            raise ValueError(f"a rotation's angle must lie in [-360, 360] degrees, got {self.degrees}.")
        if self.mode == "uniform" and not 0 <= self.degrees <= 180:  # ±180° is every angle
            raise ValueError(
                f"a uniform rotation's half-range must lie in [0, 180] degrees, got {self.degrees}."
            )

    @property
    def name(self) -> str:
        deg = f"{self.degrees:g}"
        return f"rot{deg}" if self.mode == "exact" else f"rot_pm{deg}"

    def apply(self, images: Tensor, generator: torch.Generator | None = None) -> Tensor:
        """Rotate float images ``(B, 1, H, W)`` as specified (``generator`` for the uniform draw)."""
        n = images.shape[0]
        if self.mode == "exact":
            angles = torch.full((n,), float(self.degrees))
        else:
            angles = uniform_angles(n, self.degrees, generator)
        return rotate(images, angles) if self.degrees else images


def rotation_sweep(
    angles: tuple[float, ...] = EXACT_ANGLES, uniform: tuple[float, ...] = REFERENCE_ANGLES
) -> list[RotationSpec]:
    """Exact signed angles (default −180° to 180° in steps of 15°) and uniform ranges ±θ: at most
    :data:`MAX_ROTATIONS` sets in all (each keeps a rotated copy of the test set in memory)."""
    if len(angles) + len(uniform) > MAX_ROTATIONS:
        raise ValueError(
            f"at most {MAX_ROTATIONS} rotated test sets at once ({ROTATIONS_REASON}), got "
            f"{len(angles)} angles and {len(uniform)} uniform ranges: evaluate the rest in another call."
        )
    return [RotationSpec(float(a)) for a in angles] + [RotationSpec(float(a), "uniform") for a in uniform]


SWEEPS = {"full": rotation_sweep()}  # every 15° in both directions, and the reference protocol


def rotated_test_set(images: Tensor, spec: RotationSpec, seed: int = 0, batch_size: int = 2048) -> Tensor:
    """Rotate a whole test set reproducibly: float images in [0, 1], ``(M, 1, 28, 28)``."""
    generator = torch.Generator().manual_seed(seed)
    floats = images.float() / 255.0 if not images.is_floating_point() else images
    return torch.cat([spec.apply(chunk, generator) for chunk in floats.split(batch_size)])


class RotatedBatches(TensorBatches):
    """Training batches with fresh uniform angles in ±``max_deg``: ``(images, labels, angles)``.

    The angles are drawn on the CPU from ``generator`` and travel with the batch; the data module
    rotates the images on the device (:meth:`MNISTDataModule.on_after_batch_transfer`).
    """

    def __init__(self, images: Tensor, labels: Tensor, max_deg: float, generator: torch.Generator):
        super().__init__(images, labels)
        self.max_deg, self.generator = max_deg, generator

    def __getitem__(self, indices):
        images, labels = super().__getitem__(indices)
        return images, labels, uniform_angles(len(labels), self.max_deg, self.generator)
