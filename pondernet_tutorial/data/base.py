"""What the data modules share: batches served from tensors, named evaluation sets, and the random
streams of the training data.

The training data of a run (its order, MNIST's rotations, parity's vectors) draws from generators of
its own, seeded from the run's seed and a stream name (:func:`data_generator`), never from PyTorch's
global generator: the weights, dropout and anything a change to the model or to what is logged draws
can then never change the data a run trains on.
"""

from __future__ import annotations

import functools
import zlib
from dataclasses import dataclass, field

import lightning as L
import torch
from torch import Tensor
from torch.utils.data import BatchSampler, DataLoader, Dataset, RandomSampler, SequentialSampler


@dataclass
class EvalSet:
    """One named test set for :mod:`~pondernet_tutorial.runs.evaluation`.

    Attributes:
        name: e.g. ``rot45`` or ``test``; the column ``set`` of the per-sample tables.
        inputs: the model's inputs, first axis the samples.
        labels: ``(M,)`` class indices.
        columns: values shared by the whole set (``{"mode": "exact", "degrees": 45.0}``).
        per_sample: ``(M,)`` tensors of per-sample facts (parity's number of non-zeros ``k``).
    """

    name: str
    inputs: Tensor
    labels: Tensor
    columns: dict = field(default_factory=dict)
    per_sample: dict = field(default_factory=dict)


class TensorBatches(Dataset):
    """A dataset whose items are whole batches: ``dataset[list_of_indices] -> (inputs, labels)``.

    Used with ``DataLoader(..., batch_size=None, sampler=BatchSampler(...))``, which avoids stacking
    single samples into every batch. Integer (uint8) images are turned into floats in [0, 1].
    """

    def __init__(self, inputs: Tensor, labels: Tensor):
        self.inputs, self.labels = inputs, labels

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, indices):
        index = torch.as_tensor(indices)
        inputs = self.inputs[index]
        if not inputs.is_floating_point():
            inputs = inputs.float().div_(255.0)
        return inputs, self.labels[index]


class FreshBatches(Dataset):
    """``batches_per_epoch`` fresh batches per epoch, drawn when asked for (no two alike): ``draw(batch,
    generator=generator) -> (inputs, labels, ...)`` for a task generated on the fly (parity, pointers)."""

    def __init__(self, draw, batch_size: int, batches_per_epoch: int, generator: torch.Generator):
        self.draw, self.generator = draw, generator
        self.batch_size, self.batches_per_epoch = batch_size, batches_per_epoch

    def __len__(self) -> int:
        return self.batches_per_epoch

    def __getitem__(self, index: int):
        inputs, labels, *_ = self.draw(self.batch_size, generator=self.generator)
        return inputs, labels


def fresh_loader(draw, batch_size: int, batches_per_epoch: int, seed: int, stream: str) -> DataLoader:
    """The training loader of a generated task: :class:`FreshBatches` from the run's own generator."""
    dataset = FreshBatches(draw, batch_size, batches_per_epoch, data_generator(seed, stream))
    return DataLoader(dataset, batch_size=None, shuffle=False, pin_memory=pin())


def data_generator(seed: int, stream: str) -> torch.Generator:
    """A CPU generator for one random stream of a run's data (``"order"``, ``"rotations"``, …), seeded
    from the run's seed and the stream's name: independent of the global generator and of each other."""
    return torch.Generator().manual_seed(int(seed) * 1_000_003 + zlib.crc32(stream.encode()))


def pin() -> bool:
    """Pin the loaders' batches where there is a CUDA device, so that they travel without a wait."""
    return torch.cuda.is_available()


def batch_loader(
    inputs: Tensor,
    labels: Tensor,
    batch_size: int,
    shuffle: bool,
    generator: torch.Generator | None = None,
    dataset: Dataset | None = None,
) -> DataLoader:
    """A DataLoader that serves ``(inputs, labels)`` batches straight from tensors.

    Args:
        shuffle: training: a new order every epoch, drawn from ``generator``, and only full batches
            (the last, partial one is dropped, so that every training step has the same shapes).
        dataset: serve batches of this dataset instead (a :class:`TensorBatches` subclass).
    """
    dataset = dataset if dataset is not None else TensorBatches(inputs, labels)
    sampler = RandomSampler(dataset, generator=generator) if shuffle else SequentialSampler(dataset)
    batches = BatchSampler(sampler, batch_size, drop_last=shuffle and len(dataset) >= batch_size)
    return DataLoader(dataset, batch_size=None, sampler=batches, pin_memory=pin())


def check_batch_size(batch_size: int) -> int:
    if isinstance(batch_size, bool) or int(batch_size) != batch_size or batch_size < 1:
        raise ValueError(f"batch_size must be an integer >= 1, got {batch_size!r}.")
    return int(batch_size)


def check_k_range(k_range, size: int, name: str, size_name: str = "size") -> tuple[int, int]:
    """``(k_min, k_max)`` as ints with ``1 <= k_min <= k_max <= size``, or a ``ValueError``."""
    k_min, k_max = (int(v) for v in k_range)
    if not 1 <= k_min <= k_max <= size:
        raise ValueError(f"{name} must satisfy 1 <= k_min <= k_max <= {size_name}={size}, got {k_range}.")
    return k_min, k_max


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
        return fresh_loader(draw, self.batch_size, self.batches_per_epoch, self.seed, self.stream)

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
