"""The Lightning data modules of the tasks: what ``Trainer.fit`` reads, around each task's generator.

The tasks themselves need no Lightning: :mod:`.parity` and :mod:`.pointer` draw their samples with
PyTorch alone, :mod:`.mnist` loads and rotates MNIST's tensors. The modules here serve them to a
``Trainer``: :class:`GeneratedDataModule` for the generated tasks (fresh training batches, fixed
validation and per-``k`` test sets), :class:`ParityDataModule`, :class:`PointerDataModule` and
:class:`MNISTDataModule`. A new task is a generator in a module of its own in ``data/`` and its data
module here; an entry in :mod:`pondernet_tutorial.runs.registry` makes it an experiment.
"""

from __future__ import annotations

import functools
import math

import lightning as L
import torch
from torch import Tensor
from torch.utils.data import DataLoader

from ..untrusted import CheckpointError
from . import parity, pointer
from .base import EvalSet, batch_loader, check_batch_size, check_k_range, data_generator, fresh_loader
from .mnist import (
    SPLIT_SEED,
    SWEEPS,
    TRAIN_SIZE,
    RotatedBatches,
    RotationSpec,
    download_mnist,
    load_mnist,
    rotate,
    rotated_test_set,
)


class GeneratedDataModule(L.LightningDataModule):
    """A task generated on the fly whose samples have a difficulty ``k`` (parity's non-zero entries,
    the pointer walk's length): fresh training batches from the run's own generator, a fixed validation
    set over the training range of ``k``, and fixed test sets of ``test_per_k`` samples for every ``k``
    of their ranges, with ``k`` in the evaluation tables. The fixed sets have seeds of their own (plus
    ``size``), independent of the run's seed.

    Subclasses give :meth:`draw` and the seeds; their constructor checks the task's own options and
    calls this one.

    Args:
        size: the length of a sample (the largest ``k``).
        train_k: ``(k_min, k_max)`` of the training and validation samples.
        test_sets: the test sets' names and ``k`` ranges, in order.
        batch_size: batch size of every loader.
        train_subset: training samples per epoch (an "epoch" is a fixed number of fresh batches);
            when given (quick runs), the validation set shrinks to half of it.
        val_size: validation samples.
        test_per_k: test samples for every ``k`` of each test set.
        test_subset: use only the first so many test samples of every ``k`` (quick runs).
        seed: the run's seed, which seeds the training batches' generator.
    """

    stream = "batches"  # the name of the training data's random stream (data_generator)
    val_seed, test_seeds = 0, {}  # seeds of the fixed sets, by name

    def __init__(
        self,
        size: int,
        train_k: tuple[int, int],
        test_sets: dict,
        batch_size: int = 128,
        train_subset: int | None = None,
        val_size: int = 8192,
        test_per_k: int = 1000,
        test_subset: int | None = None,
        seed: int = 0,
    ):
        super().__init__()
        self.size, self.train_k, self.test_sets_k = int(size), train_k, dict(test_sets)
        self.batch_size = check_batch_size(batch_size)
        samples = train_subset or 128_000  # an epoch: 1,000 batches of 128
        self.batches_per_epoch = max(1, samples // self.batch_size)
        if train_subset:  # quick runs: a validation set in proportion
            val_size = min(val_size, max(train_subset // 2, self.batch_size))
        self.val_size, self.test_per_k, self.test_subset = val_size, test_per_k, test_subset
        self.seed = int(seed)

    def draw(self, batch: int, k_range: tuple[int, int], generator: torch.Generator | None = None):
        """``batch`` samples with ``k`` in ``k_range``: ``(inputs, labels, k)``."""
        raise NotImplementedError

    @property
    def test_set_names(self) -> list[str]:
        return list(self.test_sets_k)

    @property
    def train_size(self) -> int:
        """Training samples per epoch."""
        return self.batches_per_epoch * self.batch_size

    def _per_k(self, name: str) -> tuple[Tensor, Tensor, Tensor]:
        """``test_per_k`` samples for every ``k`` of a test set's range (the first ``test_subset`` of
        each), from one generator of the set's own, ``k`` after ``k``."""
        generator = torch.Generator().manual_seed(self.test_seeds[name] + self.size)
        k_min, k_max = self.test_sets_k[name]
        parts = [self.draw(self.test_per_k, (k, k), generator) for k in range(k_min, k_max + 1)]
        if self.test_subset:
            parts = [tuple(t[: self.test_subset] for t in part) for part in parts]
        return tuple(torch.cat(t) for t in zip(*parts))

    def setup(self, stage: str | None = None) -> None:
        if stage in (None, "fit", "validate") and not hasattr(self, "val_inputs"):
            generator = torch.Generator().manual_seed(self.val_seed + self.size)
            self.val_inputs, self.val_labels, _ = self.draw(self.val_size, self.train_k, generator)
        if stage in (None, "test", "predict") and not hasattr(self, "test_sets"):
            self.test_sets = {name: self._per_k(name) for name in self.test_sets_k}

    def train_dataloader(self) -> DataLoader:
        draw = functools.partial(self.draw, k_range=self.train_k)
        loader = fresh_loader(draw, self.batch_size, self.batches_per_epoch, self.seed, self.stream)
        self._train_generator = loader.dataset.generator  # its state goes into every checkpoint
        restored = getattr(self, "_restored_generator_state", None)
        if restored is not None:  # a resumed run: continue the training batches where they stopped
            self._train_generator.set_state(restored)
            self._restored_generator_state = None
        return loader

    def state_dict(self) -> dict:
        """The training batches' generator after the batches drawn so far (in a run's checkpoints)."""
        generator = getattr(self, "_train_generator", None)
        return {"train_generator": generator.get_state()} if generator is not None else {}

    def load_state_dict(self, state_dict: dict) -> None:
        state = state_dict.get("train_generator")
        if state is None:
            return
        try:  # the state of torch's CPU generator, or an error of torch's (a wrong size, an invalid state)
            if not isinstance(state, Tensor):
                raise TypeError(type(state).__name__)
            torch.Generator().set_state(state)
        except (TypeError, RuntimeError):
            raise CheckpointError(
                "the checkpoint's state of the training batches' generator is not one of torch's CPU "
                "generator: continue from a checkpoint that this data module wrote."
            ) from None
        generator = getattr(self, "_train_generator", None)
        if generator is not None:
            generator.set_state(state)
        else:
            self._restored_generator_state = state

    def val_dataloader(self) -> DataLoader:
        return batch_loader(self.val_inputs, self.val_labels, self.batch_size, shuffle=False)

    def test_dataloader(self) -> list[DataLoader]:
        return [
            batch_loader(inputs, labels, self.batch_size, shuffle=False)
            for inputs, labels, _ in self.test_sets.values()
        ]

    def predict_dataloader(self) -> list[DataLoader]:
        return self.test_dataloader()

    def evaluation_sets(self) -> list[EvalSet]:
        """The test sets, with each sample's difficulty ``k``."""
        self.setup("test")
        return [
            EvalSet(name, inputs, labels, per_sample={"k": k})
            for name, (inputs, labels, k) in self.test_sets.items()
        ]


class ParityDataModule(GeneratedDataModule):
    """Parity vectors with ``k`` non-zero entries, for training, validation and a per-``k`` test set
    named ``test`` (see :class:`~pondernet_tutorial.data.modules.GeneratedDataModule`).

    Args:
        n_elements: length of the vectors.
        train_k: ``(k_min, k_max)`` of the training and validation samples (default: all of them).
        test_k: ``(k_min, k_max)`` of the test samples (default: ``train_k``).
        batch_size, train_subset, val_size, test_per_k, test_subset, seed: as for
            :class:`~pondernet_tutorial.data.modules.GeneratedDataModule`.
    """

    stream, val_seed, test_seeds = "parity", parity.VAL_SEED, {"test": parity.TEST_SEED}

    def __init__(
        self,
        n_elements: int = 16,
        train_k: tuple[int, int] | None = None,
        test_k: tuple[int, int] | None = None,
        batch_size: int = 128,
        train_subset: int | None = None,
        val_size: int = 8192,
        test_per_k: int = 1000,
        test_subset: int | None = None,
        data_dir: str | None = None,  # accepted for a uniform interface; nothing is read from disk
        seed: int = 0,
    ):
        if isinstance(n_elements, bool) or int(n_elements) != n_elements or n_elements < 1:
            raise ValueError(f"n_elements must be an integer >= 1, got {n_elements!r}.")
        n = int(n_elements)
        train_k = check_k_range(train_k or (1, n), n, "train_k", "n_elements")
        test_k = check_k_range(test_k or train_k, n, "test_k", "n_elements")
        super().__init__(
            n, train_k, {"test": test_k}, batch_size, train_subset, val_size, test_per_k, test_subset, seed
        )
        self.n_elements, self.test_k = n, test_k
        self.save_hyperparameters(ignore=["data_dir"])

    def draw(self, batch, k_range, generator=None):
        return parity.parity_batch(batch, self.n_elements, k_range, generator)


class PointerDataModule(GeneratedDataModule):
    """Pointer-chasing samples for training, validation and per-``k`` test sets: ``test`` (the
    training range, or ``test_k``) and, given ``beyond_k``, ``beyond`` (longer walks than in training).
    See :class:`~pondernet_tutorial.data.modules.GeneratedDataModule`.

    Args:
        n_slots: slots per sample (also the number of classes: the answer is a slot).
        train_k: ``(k_min, k_max)`` of the training and validation walks.
        test_k: ``(k_min, k_max)`` of the test set ``test`` (default: ``train_k``).
        beyond_k: ``(k_min, k_max)`` of the test set ``beyond``, or None for none.
        end_prob: the probability that a slot ends a distractor chain.
        batch_size, train_subset, val_size, test_per_k, test_subset, seed: as for
            :class:`~pondernet_tutorial.data.modules.GeneratedDataModule`.
    """

    stream, val_seed = "pointer", pointer.VAL_SEED
    test_seeds = {"test": pointer.TEST_SEED, "beyond": pointer.BEYOND_SEED}

    def __init__(
        self,
        n_slots: int,
        train_k: tuple[int, int],
        test_k: tuple[int, int] | None = None,
        beyond_k: tuple[int, int] | None = None,
        end_prob: float = pointer.END_PROB,
        batch_size: int = 128,
        train_subset: int | None = None,
        val_size: int = 8192,
        test_per_k: int = 500,
        test_subset: int | None = None,
        data_dir: str | None = None,  # accepted for a uniform interface; nothing is read from disk
        seed: int = 0,
    ):
        if isinstance(n_slots, bool) or int(n_slots) != n_slots or n_slots < 2:
            raise ValueError(f"n_slots must be an integer >= 2, got {n_slots!r}.")
        n = int(n_slots)
        train_k = check_k_range(train_k, n, "train_k", "n_slots")
        sets = {"test": check_k_range(test_k or train_k, n, "test_k", "n_slots")}
        if beyond_k:
            sets["beyond"] = check_k_range(beyond_k, n, "beyond_k", "n_slots")
        if not 0.0 < float(end_prob) <= 1.0:
            raise ValueError(f"end_prob must lie in (0, 1], got {end_prob!r}.")
        super().__init__(n, train_k, sets, batch_size, train_subset, val_size, test_per_k, test_subset, seed)
        self.n_slots, self.end_prob = n, float(end_prob)
        self.test_k, self.beyond_k = sets["test"], sets.get("beyond")
        self.save_hyperparameters(ignore=["data_dir"])

    def draw(self, batch, k_range, generator=None):
        return pointer.pointer_batch(batch, self.n_slots, k_range, self.end_prob, generator)


class MNISTDataModule(L.LightningDataModule):
    """MNIST with a fixed 55,000 / 5,000 train/val split, optional rotations.

    Args:
        data_dir: where MNIST lives (default: ``$PONDERNET_DATA_DIR``, else a user cache folder).
        batch_size: batch size of every loader.
        train_rotation: rotate training (and validation) digits uniformly in ±``train_rotation``
            degrees; 0 for plain MNIST. Training batches get fresh angles every epoch, drawn on the
            device after transfer; the validation set is rotated once with a fixed seed.
        test_rotations: one test set per entry: a :class:`RotationSpec`, or a number for an exact
            angle (positive: counter-clockwise); or the name of a sweep in :data:`SWEEPS`. Default:
            the unrotated test set.
        train_subset, test_subset: use only the first so many training / test images (quick runs).
        seed: the run's seed, which seeds the generators of the training order and rotations.
    """

    def __init__(
        self,
        data_dir: str | None = None,
        batch_size: int = 128,
        train_rotation: float = 0.0,
        test_rotations: list | None = None,
        train_subset: int | None = None,
        test_subset: int | None = None,
        seed: int = 0,
    ):
        super().__init__()
        self.seed = int(seed)
        self.batch_size = check_batch_size(batch_size)
        if not 0 <= train_rotation < math.inf:
            raise ValueError(
                f"train_rotation is a half-range in degrees and must be finite and >= 0, got {train_rotation}."
            )
        self.data_dir = data_dir
        self.train_rotation = float(train_rotation)
        if isinstance(test_rotations, str):
            if test_rotations not in SWEEPS:
                raise ValueError(f"unknown sweep {test_rotations!r}; choose one of {', '.join(SWEEPS)}.")
            test_rotations = SWEEPS[test_rotations]
        specs = test_rotations if test_rotations is not None else [RotationSpec(0.0)]
        self.test_specs = [s if isinstance(s, RotationSpec) else RotationSpec(float(s)) for s in specs]
        self.train_subset, self.test_subset = train_subset, test_subset
        self.save_hyperparameters(ignore=["data_dir"])

    @property
    def test_set_names(self) -> list[str]:
        """Names of the test sets, in the order of the test dataloaders (e.g. ``rot45``, ``rot_pm45``)."""
        return [spec.name for spec in self.test_specs]

    @property
    def train_size(self) -> int:
        """Training images per epoch."""
        return len(self.train_labels)

    def prepare_data(self) -> None:
        download_mnist(self.data_dir)  # once, on one process; setup() only reads

    def setup(self, stage: str | None = None) -> None:
        if stage in (None, "fit", "validate") and not hasattr(self, "train_images"):
            images, labels = load_mnist(train=True, data_dir=self.data_dir)
            order = torch.randperm(len(labels), generator=torch.Generator().manual_seed(SPLIT_SEED))
            train_idx, val_idx = order[:TRAIN_SIZE], order[TRAIN_SIZE:]
            if self.train_subset:
                train_idx = train_idx[: self.train_subset]
                val_idx = val_idx[: max(self.train_subset // 10, self.batch_size)]
            self.train_images, self.train_labels = images[train_idx], labels[train_idx]
            val_images = images[val_idx].float() / 255.0
            if self.train_rotation:
                val_images = rotated_test_set(val_images, RotationSpec(self.train_rotation, "uniform"))
            self.val_images, self.val_labels = val_images, labels[val_idx]
        if stage in (None, "test", "predict") and not hasattr(self, "test_sets"):
            images, labels = load_mnist(train=False, data_dir=self.data_dir)
            if self.test_subset:
                images, labels = images[: self.test_subset], labels[: self.test_subset]
            self.test_labels = labels
            self.test_sets = [rotated_test_set(images, spec) for spec in self.test_specs]

    def train_dataloader(self) -> DataLoader:
        order = data_generator(self.seed, "order")
        if not self.train_rotation:
            return batch_loader(self.train_images, self.train_labels, self.batch_size, True, order)
        dataset = RotatedBatches(
            self.train_images, self.train_labels, self.train_rotation, data_generator(self.seed, "rotations")
        )
        return batch_loader(self.train_images, self.train_labels, self.batch_size, True, order, dataset)

    def val_dataloader(self) -> DataLoader:
        return batch_loader(self.val_images, self.val_labels, self.batch_size, shuffle=False)

    def test_dataloader(self) -> list[DataLoader]:
        return [batch_loader(x, self.test_labels, self.batch_size, shuffle=False) for x in self.test_sets]

    def predict_dataloader(self) -> list[DataLoader]:
        return self.test_dataloader()

    def evaluation_sets(self) -> list[EvalSet]:
        """The rotated test sets for :func:`~pondernet_tutorial.runs.evaluation.evaluate`."""
        self.setup("test")
        return [
            EvalSet(spec.name, images, self.test_labels, {"mode": spec.mode, "degrees": spec.degrees})
            for spec, images in zip(self.test_specs, self.test_sets)
        ]

    def on_after_batch_transfer(self, batch, dataloader_idx: int):
        """On the device: turn the training batches' bytes into floats in [0, 1], and rotate them by
        their angles (drawn with the batch, see :class:`RotatedBatches`)."""
        images, labels, *angles = batch
        if not images.is_floating_point():
            images = images.float().div_(255.0)
        return (rotate(images, *angles) if angles else images), labels
