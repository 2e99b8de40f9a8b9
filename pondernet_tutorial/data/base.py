"""What the data modules share: batches served from tensors, and named evaluation sets."""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import Tensor
from torch.utils.data import BatchSampler, DataLoader, Dataset, RandomSampler, SequentialSampler


@dataclass
class EvalSet:
    """One named test set for :mod:`~pondernet_tutorial.evaluation`.

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


def batch_loader(inputs: Tensor, labels: Tensor, batch_size: int, shuffle: bool) -> DataLoader:
    """A DataLoader that serves ``(inputs, labels)`` batches straight from tensors."""
    dataset = TensorBatches(inputs, labels)
    sampler = RandomSampler(dataset) if shuffle else SequentialSampler(dataset)
    return DataLoader(dataset, batch_size=None, sampler=BatchSampler(sampler, batch_size, False))


def check_batch_size(batch_size: int) -> int:
    if isinstance(batch_size, bool) or int(batch_size) != batch_size or batch_size < 1:
        raise ValueError(f"batch_size must be an integer >= 1, got {batch_size!r}.")
    return int(batch_size)
