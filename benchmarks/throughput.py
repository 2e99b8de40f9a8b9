"""Training and inference throughput: this package against the article notebook's pipeline, side by side.

The reference is the pipeline of the article's notebook (conradkun/PonderNet_MNIST), re-implemented here
from its design, every costly part included:

* data: torchvision's ``MNIST`` dataset with per-image ``ToTensor`` and ``Normalize`` transforms, split
  55,000 / 5,000 with ``random_split``, served by a ``DataLoader`` (batch 128, no worker processes, as
  the notebook's configuration sets);
* model: the CNN recomputed at every step (N + 1 times per forward pass), an MLP with ``Dropout(0.2)``,
  ``p_n`` built in a Python loop, a Bernoulli coin per step;
* losses: computed step by step (mean-reduced cross-entropy weighted by ``p_n``, then
  ``KLDivLoss(reduction="batchmean")``), accuracy with torchmetrics, and ``self.log`` at every step;
* loop: a Lightning ``Trainer`` with a logger (CSV here, W&B in the notebook) and gradient clipping.

The notebook trains in 16-bit precision on a GPU; here both pipelines run in 32-bit. This package runs
through the same ``Trainer`` with its own data module and LightningModule, eagerly and with
``torch.compile`` (its default on the CPU; the compilation falls in the first run's warm-up batches and
is reported apart); on CUDA (``--device cuda``) also with each compiled step replayed from one CUDA
graph (its default there, :mod:`pondernet_tutorial.fast_path`).

The pipelines take turns (reference, eager, compiled, reference, ...), each run a new ``Trainer``'s
fit of the pipeline's one module, timed apart; the speed-up is the package's rate over the
reference's in the same round, and the median over the rounds is quoted with its minimum and
maximum. All run on the threads this package trains with (one on a machine of at most two cores,
where two wait for each other under any other load), unless ``--threads`` says otherwise.

The bound is the time this package's two convolutions and two max-poolings alone take, forward and
backward, on the same training batches, in the same process and threads; the share of the bound is
that time over the package's training time for those batches (100% would mean the rest of the step
costs nothing).

    python benchmarks/throughput.py               # 5 to 15 minutes on 2 CPU cores
    python benchmarks/throughput.py --batches 100 --threads 2 --json results.json
    python benchmarks/throughput.py --device cuda --batches 500

Prints, for each pipeline, images per second for training and the speed-up and share of the bound
of this package's paths, as median, minimum and maximum over ``--runs`` rounds; then images per
second for inference (the reference's forward pass, this package's full unroll and its early exit
with a shipped model), measured once.
"""

from __future__ import annotations

import argparse
import copy
import itertools
import json
import statistics
import tempfile
import time
from math import floor

import lightning as L
import torch
import torch.nn.functional as F
import torchmetrics
from lightning.pytorch.callbacks import Callback
from lightning.pytorch.loggers import CSVLogger
from torch import nn
from torch.utils.data import DataLoader, random_split

from pondernet_tutorial.data.mnist import load_mnist, resolve_data_dir
from pondernet_tutorial.runs.config import TrainConfig
from pondernet_tutorial.runs.training import make_datamodule, make_module
from pondernet_tutorial.threads import default_threads

# ------------------------------------------------------------------------------ the reference design


class ReferenceCNN(nn.Module):
    def __init__(self, n_input=28, n_hidden=64, kernel_size=5):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 10, kernel_size=kernel_size)
        self.conv2 = nn.Conv2d(10, 20, kernel_size=kernel_size)
        self.conv2_drop = nn.Dropout2d()
        side = floor((floor((n_input - (kernel_size - 1)) / 2) - (kernel_size - 1)) / 2)
        self.fc1 = nn.Linear(side**2 * 20, n_hidden)

    def forward(self, x):
        x = F.relu(F.max_pool2d(self.conv1(x), 2))
        x = F.relu(F.max_pool2d(self.conv2_drop(self.conv2(x)), 2))
        return F.relu(self.fc1(torch.flatten(x, 1)))


class ReferenceMLP(nn.Module):
    def __init__(self, n_input, n_hidden, n_output):
        super().__init__()
        self.i2h, self.h2o, self.dropout = (
            nn.Linear(n_input, n_hidden),
            nn.Linear(n_hidden, n_output),
            nn.Dropout(0.2),
        )

    def forward(self, x):
        return F.relu(self.h2o(self.dropout(F.relu(self.i2h(x)))))


class ReferencePonder(L.LightningModule):
    """The notebook's design: CNN at every step, loops over steps, per-step logging."""

    def __init__(self, max_steps=20, hidden=64, lambda_p=0.2, beta=0.01, lr=1e-3):
        super().__init__()
        self.max_steps, self.hidden, self.beta, self.lr = max_steps, hidden, beta, lr
        self.cnn = ReferenceCNN()
        self.mlp = ReferenceMLP(64 + hidden, 64, hidden)
        self.output_layer, self.lambda_layer = nn.Linear(hidden, 10), nn.Linear(hidden, 1)
        prior, not_halted = [], 1.0
        for _ in range(max_steps):
            prior.append(not_halted * lambda_p)
            not_halted *= 1 - lambda_p
        self.register_buffer("p_g", torch.tensor(prior))
        self.kl_div = nn.KLDivLoss(reduction="batchmean")
        self.accuracy = torchmetrics.Accuracy(task="multiclass", num_classes=10)

    def forward(self, x):
        batch = x.shape[0]
        h = self.mlp(torch.cat([self.cnn(x), x.new_zeros(batch, self.hidden)], 1))
        un_halted, halted = x.new_ones(batch), x.new_zeros(batch)
        p, y, y_m, step_halted = [], [], x.new_zeros(batch, 10), x.new_zeros(batch)
        for n in range(1, self.max_steps + 1):
            lam = x.new_ones(batch) if n == self.max_steps else torch.sigmoid(self.lambda_layer(h))[:, 0]
            y_n = self.output_layer(h)
            p.append(un_halted * lam)
            un_halted = un_halted * (1 - lam)
            halt = torch.bernoulli(lam) * (1 - halted)
            y.append(y_n)
            y_m = y_m * (1 - halt[:, None]) + y_n * halt[:, None]
            halted, step_halted = halted + halt, step_halted + n * halt
            h = self.mlp(torch.cat([self.cnn(x), h], 1))  # the CNN again, at every step
            if not self.training and halted.sum() == batch:
                break
        return torch.stack(p), torch.stack(y), step_halted, y_m

    def training_step(self, batch, batch_idx):
        data, target = batch
        p, y_hat, halted, y_m = self(data)
        rec = p.new_tensor(0.0)
        for n in range(p.shape[0]):  # step by step, mean-reduced cross-entropy
            rec = rec + (p[n] * F.cross_entropy(y_hat[n], target)).mean()
        reg = self.kl_div(p.transpose(0, 1).log(), self.p_g[None, : p.shape[0]].expand(p.shape[1], -1))
        loss = rec + self.beta * reg
        self.log("train/steps", halted.mean())
        self.log("train/accuracy", self.accuracy(y_m.argmax(1), target))
        self.log("train/loss", loss)
        return loss

    def configure_optimizers(self):
        return torch.optim.Adam(self.parameters(), lr=self.lr)


def reference_loader(batch_size: int) -> DataLoader:
    from torchvision import transforms
    from torchvision.datasets import MNIST

    transform = transforms.Compose([transforms.ToTensor(), transforms.Normalize((0.1307,), (0.3081,))])
    train = MNIST(str(resolve_data_dir()), train=True, transform=transform)
    train, _ = random_split(train, [55_000, 5_000], generator=torch.Generator().manual_seed(1234))
    return DataLoader(train, batch_size=batch_size, num_workers=0)


# ------------------------------------------------------------------------------ timing


class BatchClock(Callback):
    """Wall time of training batches ``warmup .. warmup + timed``, data loading included."""

    def __init__(self, warmup: int):
        self.warmup, self.marks = warmup, {}

    @staticmethod
    def now(device: torch.device) -> float:
        """The time once ``device`` has finished what was queued (CUDA runs asynchronously)."""
        if torch.device(device).type == "cuda":
            torch.cuda.synchronize()
        return time.perf_counter()

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        if batch_idx in (0, self.warmup):
            self.marks[batch_idx] = self.now(pl_module.device)

    def on_train_end(self, trainer, pl_module):
        self.marks["end"] = self.now(pl_module.device)


def training_trainer(batches: int, device: str, callbacks, **options) -> L.Trainer:
    """A Trainer of one epoch of ``batches`` training batches on ``device`` (``"cuda"`` or the CPU), with
    no validation, checkpoint, progress bar or summary; ``options``: any other of its arguments."""
    return L.Trainer(
        max_epochs=1,
        limit_train_batches=batches,
        limit_val_batches=0,
        num_sanity_val_steps=0,
        accelerator="gpu" if device == "cuda" else "cpu",
        devices=1,
        callbacks=callbacks,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        **options,
    )


def time_fit(
    module, train_loader=None, datamodule=None, warmup=5, timed=60, batch_size=128, device="cpu", clip=None
) -> dict:
    """Images per second of ``timed`` training batches after ``warmup`` ones (``clip``: the Trainer's
    gradient clipping; the package's module clips by itself)."""
    clock = BatchClock(warmup)
    with tempfile.TemporaryDirectory() as logs:
        trainer = training_trainer(
            warmup + timed, device, [clock], gradient_clip_val=clip, logger=CSVLogger(logs)
        )
        trainer.fit(module, train_dataloaders=train_loader, datamodule=datamodule)
    steady = clock.marks["end"] - clock.marks[warmup]
    return {"img_s": timed * batch_size / steady, "warmup_s": clock.marks[warmup] - clock.marks[0]}


def kernel_seconds(module, datamodule, warmup: int, timed: int, device: str = "cpu") -> float:
    """Seconds that a copy of ``module``'s convolutions and max-poolings alone takes, forward and
    backward, on the ``timed`` training batches that follow ``warmup`` ones (run first, untimed)."""
    net = module.model.step_function.embedding.net
    kernels = copy.deepcopy(nn.Sequential(*(m for m in net if isinstance(m, (nn.Conv2d, nn.MaxPool2d)))))
    kernels.to(device).train()
    datamodule.setup("fit")
    batches = itertools.islice(datamodule.train_dataloader(), warmup + timed)
    images = [batch[0].to(device).float() / 255.0 for batch in batches]  # as the module gets them
    for i, x in enumerate(images):
        if i == warmup:
            start = BatchClock.now(device)
        kernels.zero_grad(set_to_none=True)
        out = kernels(x)
        out.backward(torch.ones_like(out))
    return BatchClock.now(device) - start


def spread(results: dict, key: str, values: list[float], words: str, form: str) -> None:
    """Store the median of ``values`` under ``key`` (and its minimum and maximum under ``key_min`` and
    ``key_max``), and print them in a row."""
    low, mid, high = min(values), statistics.median(values), max(values)
    results.update({key: mid, f"{key}_min": low, f"{key}_max": high})
    print(f"  {words:<40}{mid:>8{form}}   ({low:{form}} to {high:{form}})")


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--batches", type=int, default=60, help="training batches timed per run")
    parser.add_argument("--warmup", type=int, default=10, help="training batches before the timing starts")
    parser.add_argument("--runs", type=int, default=5, help="alternated runs of each pipeline [5]")
    parser.add_argument(
        "--threads",
        type=int,
        default=None,
        help="torch threads [as the package trains: one on at most two cores]",
    )
    parser.add_argument("--eval-images", type=int, default=10_000)
    parser.add_argument("--json", default=None, help="also write the numbers to this file")
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu", help="where to train [cpu]")
    args = parser.parse_args(argv)
    if args.runs < 1 or args.batches < 1 or args.warmup < 0:
        parser.error("--runs and --batches take a whole number of at least 1, --warmup of at least 0")
    torch.set_num_threads(args.threads or default_threads())  # both pipelines, and the bound
    device = args.device
    results = {
        "device": torch.cuda.get_device_name(0) if device == "cuda" else "cpu",
        "threads": torch.get_num_threads(),
        "batch_size": 128,
        "timed_batches": args.batches,
        "runs": args.runs,
    }
    timing = {"warmup": args.warmup, "timed": args.batches, "device": device}

    L.seed_everything(0, verbose=False)
    pipelines = {"reference": (ReferencePonder(), {"train_loader": reference_loader(128), "clip": 0.5})}
    # the package's paths: eager, compiled (the default on the CPU) and, on CUDA, the compiled step
    # replayed from one CUDA graph (the default there); one data module serves them all
    paths = {"eager": (False, False), "compiled": (True, False)}
    if device == "cuda":
        paths["cuda_graph"] = (True, True)
    datamodule = make_datamodule(TrainConfig(experiment="mnist-interpolation"))
    for key, (compiled, graphed) in paths.items():
        config = TrainConfig(experiment="mnist-interpolation", compile=compiled)
        pipelines[key] = (make_module(config, graphed=graphed), {"datamodule": datamodule})
    fits, kernels = {key: [] for key in pipelines}, []
    for _ in range(args.runs):  # in turns, each module trained on by a new Trainer, timed apart
        for key, (module, data) in pipelines.items():
            fits[key].append(time_fit(module, **data, **timing))
        kernels.append(kernel_seconds(pipelines["eager"][0], datamodule, args.warmup, args.batches, device))

    words = f"{results['device']}, {results['threads']} thread(s), {args.runs} alternated runs"
    print(f"training on {words} of {args.batches} batches of 128: median (min to max)")
    reference = [fit["img_s"] for fit in fits.pop("reference")]
    bound = [args.batches * 128 / seconds for seconds in kernels]
    spread(results, "train_reference_img_s", reference, "reference, images/s", ",.0f")
    spread(results, "train_bound_img_s", bound, "bound (conv and pool alone), images/s", ",.0f")
    for key, runs in fits.items():
        rates = [fit["img_s"] for fit in runs]
        results[f"train_package_{key}_warmup_s"] = runs[0]["warmup_s"]  # the first run's: compilation
        spread(results, f"train_package_{key}_img_s", rates, f"package {key}, images/s", ",.0f")
        speedup = [ours / theirs for ours, theirs in zip(rates, reference)]
        spread(results, f"train_speedup_{key}", speedup, f"package {key}, speed-up (times)", ".1f")
        share = [ours / limit for ours, limit in zip(rates, bound)]
        spread(results, f"train_package_{key}_bound_share", share, f"package {key}, bound share", ".0%")

    print(f"inference on {args.eval_images:,} test images in batches of 1,000, one run:")
    for key, value in inference(args.eval_images, device).items():
        results[key] = value
        print(f"  {key:<40}{value:>8,.1f}")
    results = {k: round(v, 2) if isinstance(v, float) else v for k, v in results.items()}
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=2)
    return results


@torch.no_grad()
def inference(n_images: int, device: str = "cpu") -> dict:
    """Test-set throughput in batches of 1,000: the reference forward pass, and a trained package
    model with a full unroll and with early exit (the reference model is untrained: its cost does
    not depend on its weights beyond when it halts, and it halts no earlier than a trained one)."""
    from pondernet_tutorial.runs.checkpoints import load_pretrained

    images = (load_mnist(train=False)[0][:n_images].float() / 255.0).to(device)
    try:
        model = load_pretrained("mnist-interpolation").model
    except Exception:  # nothing shipped: an untrained model costs the same
        model = make_module(TrainConfig()).model
    model.to(device).eval()
    reference = ReferencePonder().to(device).eval()
    generator = torch.Generator().manual_seed(0)

    def rate(fn) -> tuple[float, float]:
        fn(images[:1000])
        if device == "cuda":
            torch.cuda.synchronize()
        start, steps = time.perf_counter(), []
        for chunk in images.split(1000):
            steps.append(fn(chunk))
        if device == "cuda":
            torch.cuda.synchronize()
        return len(images) / (time.perf_counter() - start), sum(steps) / len(steps)

    out = {}
    out["eval_reference_img_s"], _ = rate(lambda x: (reference((x - 0.1307) / 0.3081), 20)[1])
    out["eval_package_full_img_s"], _ = rate(lambda x: model(x).logits.shape[0])  # every step
    out["eval_package_early_exit_img_s"], out["eval_early_exit_mean_steps_run"] = rate(
        lambda x: int(model.infer(x, generator)[1].max())  # the loop runs until the last sample halts
    )
    return out


if __name__ == "__main__":
    main()
