"""What the data modules share: batches served from tensors, named evaluation sets, and the random
streams of the training data.

The training data of a run (its order, MNIST's rotations, parity's vectors) draws from generators of
its own, seeded from the run's seed and a stream name (:func:`data_generator`), never from PyTorch's
global generator: the weights, dropout and anything a change to the model or to what is logged draws
can then never change the data a run trains on.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass, field

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
    single samples into every batch. Integer (uint8) images are served as they are: the data module
    turns them into floats on the device (a quarter of the bytes to send, and no work for the host).
    """

    def __init__(self, inputs: Tensor, labels: Tensor):
        self.inputs, self.labels = inputs, labels

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, indices):
        index = torch.as_tensor(indices)
        return self.inputs[index], self.labels[index]


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
