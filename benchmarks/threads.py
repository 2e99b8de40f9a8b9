"""Seconds for 100 training updates through ``fit`` with a given number of PyTorch threads.

A network the size of the own-model chapter's (PonderNet over a GRU of 32 units on parity of 8
entries, batch 128, 12 steps), trained by ``fit(..., threads=T)``. Time it with one thread and with
PyTorch's default, on an idle machine and with other work on the cores, to choose
:func:`~pondernet_tutorial.fitting.default_threads` by measurement:

    farm-bench -n 5 --timeout 600 --vs 'python benchmarks/threads.py --threads 0' -- \\
        python benchmarks/threads.py --threads 1

``--threads 0`` is PyTorch's own default (``torch.get_num_threads()`` at start-up). Prints the seconds
of the training alone (start-up excluded) on standard error.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time

import lightning as L
import torch
from torch.utils.data import TensorDataset

from pondernet_tutorial import ParityStep, PonderLitModule, PonderNet
from pondernet_tutorial.data.parity import parity_batch
from pondernet_tutorial.fitting import fit

UPDATES, BATCH = 100, 128


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--threads", type=int, default=1, help="PyTorch's threads; 0: its default")
    args = parser.parse_args(argv)
    threads = args.threads or torch.get_num_threads()
    x, y, _ = parity_batch(UPDATES * BATCH + 512, 8, (1, 8), torch.Generator().manual_seed(0))
    data = L.LightningDataModule.from_datasets(
        TensorDataset(x[:-512], y[:-512]), TensorDataset(x[-512:], y[-512:]), batch_size=BATCH
    )
    torch.manual_seed(0)
    module = PonderLitModule(PonderNet(ParityStep(n_elements=8, hidden_size=32), max_steps=12), lr=1e-2)
    with tempfile.TemporaryDirectory() as folder:
        start = time.perf_counter()
        fit(module, data, 1, threads=threads, default_root_dir=folder, logger=False, accelerator="cpu",
            enable_progress_bar=False, enable_model_summary=False)  # fmt: skip
        seconds = time.perf_counter() - start
    print(f"{UPDATES} updates on {threads} thread(s): {seconds:.1f} s", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
