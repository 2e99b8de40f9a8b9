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
through the same ``Trainer`` with its own data module and LightningModule: on the CPU once eagerly and
once with ``torch.compile`` (its default; the compilation falls in the warm-up batches and is reported
apart); on CUDA (``--device cuda``) once eagerly and once with each training step replayed from one
CUDA graph (its default there, :mod:`pondernet_tutorial.runs.cuda_graph`).

    python benchmarks/throughput.py               # a few minutes on 2 CPU cores
    python benchmarks/throughput.py --batches 100 --threads 2 --json results.json
    python benchmarks/throughput.py --device cuda --batches 500

Prints images per second for training (reference, package eager, package's default path) and
inference (the reference's forward pass, this package's full unroll and its early exit with a shipped
model).
"""

from __future__ import annotations

import argparse
import json
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
    def now(pl_module) -> float:
        """The time once the device has finished what was queued (CUDA runs asynchronously)."""
        if pl_module.device.type == "cuda":
            torch.cuda.synchronize()
        return time.perf_counter()

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        if batch_idx in (0, self.warmup):
            self.marks[batch_idx] = self.now(pl_module)

    def on_train_end(self, trainer, pl_module):
        self.marks["end"] = self.now(pl_module)


def time_fit(
    module, train_loader=None, datamodule=None, warmup=5, timed=60, batch_size=128, device="cpu", clip=None
) -> dict:
    """Images per second of ``timed`` training batches after ``warmup`` ones (``clip``: the Trainer's
    gradient clipping; the package's module clips by itself)."""
    clock = BatchClock(warmup)
    with tempfile.TemporaryDirectory() as logs:
        trainer = L.Trainer(
            max_epochs=1,
            limit_train_batches=warmup + timed,
            limit_val_batches=0,
            num_sanity_val_steps=0,
            accelerator="gpu" if device == "cuda" else "cpu",
            devices=1,
            gradient_clip_val=clip,
            callbacks=[clock],
            logger=CSVLogger(logs),
            enable_checkpointing=False,
            enable_progress_bar=False,
            enable_model_summary=False,
        )
        trainer.fit(module, train_dataloaders=train_loader, datamodule=datamodule)
    steady = clock.marks["end"] - clock.marks[warmup]
    return {"img_s": timed * batch_size / steady, "warmup_s": clock.marks[warmup] - clock.marks[0]}


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--batches", type=int, default=60, help="training batches timed per pipeline")
    parser.add_argument("--warmup", type=int, default=10, help="training batches before the timing starts")
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's choice)")
    parser.add_argument("--eval-images", type=int, default=10_000)
    parser.add_argument("--json", default=None, help="also write the numbers to this file")
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu", help="where to train [cpu]")
    parser.add_argument(
        "--peak-gflops",
        type=float,
        default=None,
        help="the device's matmul rate for the FLOP share [default: measured on the step's own matmuls]",
    )
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    device = args.device
    results = {
        "device": torch.cuda.get_device_name(0) if device == "cuda" else "cpu",
        "threads": torch.get_num_threads(),
        "batch_size": 128,
        "timed_batches": args.batches,
    }
    timing = {"warmup": args.warmup, "timed": args.batches, "device": device}

    L.seed_everything(0, verbose=False)
    reference = time_fit(ReferencePonder(), reference_loader(128), clip=0.5, **timing)
    results["train_reference_img_s"] = reference["img_s"]
    # the package's paths: eager, compiled (the default on the CPU) and, on CUDA, the compiled step
    # replayed from one CUDA graph (the default there)
    paths = {"eager": (False, False), "compiled": (True, False)}
    if device == "cuda":
        paths["cuda_graph"] = (True, True)
    config = TrainConfig(experiment="mnist-interpolation", compile=False)  # counted eagerly
    flops = step_flops_per_image(config)
    peak = measured_gflops(step_matmul_shapes(config)) if args.peak_gflops is None else args.peak_gflops
    results["train_mflop_per_image"] = flops / 1e6
    results["matmul_gflop_s"] = peak
    for key, (compiled, graphed) in paths.items():
        L.seed_everything(0, verbose=False)
        config = TrainConfig(experiment="mnist-interpolation", compile=compiled)
        module = make_module(config, graphed=graphed)
        ours = time_fit(module, datamodule=make_datamodule(config), **timing)
        results[f"train_package_{key}_img_s"] = ours["img_s"]
        results[f"train_package_{key}_warmup_s"] = ours["warmup_s"]
        results[f"train_speedup_{key}"] = ours["img_s"] / reference["img_s"]
        # the share of the FLOP bound: the step's FLOPs at this rate, against the matmul rate
        results[f"train_package_{key}_flop_share"] = ours["img_s"] * flops / (peak * 1e9)

    results.update(inference(args.eval_images, device))
    results = {k: round(v, 2) if isinstance(v, float) else v for k, v in results.items()}
    print(json.dumps(results, indent=2))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=2)
    return results


def step_flops_per_image(config: TrainConfig, batch: int = 128) -> float:
    """FLOPs of one training step (forward, loss and backward of the full unroll) per image, counted
    by PyTorch's FlopCounterMode on one batch of random images."""
    from torch.utils.flop_counter import FlopCounterMode

    module = make_module(config)
    images, labels = torch.rand(batch, 1, 28, 28), torch.randint(0, 10, (batch,))
    with FlopCounterMode(display=False) as counter:
        module.step_values(images, labels)["loss"].backward()
    return counter.get_total_flops() / batch


def step_matmul_shapes(config: TrainConfig, batch: int = 128) -> list[tuple[int, int, int]]:
    """The ``(m, k, n)`` of every matrix product in one training step, forward and backward: the
    linear layers' products, and each convolution as the product it computes (im2col: ``m`` output
    positions, ``k`` inputs per position, ``n`` output channels) with its two backward products."""
    from torch.utils._python_dispatch import TorchDispatchMode

    shapes = []

    class Shapes(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            if func in (torch.ops.aten.mm.default, torch.ops.aten.addmm.default):
                a, b = args[-2], args[-1]
                shapes.append((a.shape[0], a.shape[1], b.shape[1]))
            elif func is torch.ops.aten.convolution.default:
                weight = args[1]
                m = out.shape[0] * out.shape[2] * out.shape[3]
                k, n = weight[0].numel(), weight.shape[0]
                shapes.extend([(m, k, n), (m, n, k), (k, m, n)])  # forward, input gradient, weight gradient
            return out

    module = make_module(config)
    images, labels = torch.rand(batch, 1, 28, 28), torch.randint(0, 10, (batch,))
    with Shapes():
        module.step_values(images, labels)["loss"].backward()
    return shapes


def measured_gflops(shapes, repeats: int = 20) -> float:
    """GFLOP/s of ``torch.mm`` over the given ``(m, k, n)`` products, each timed on its own: the rate
    this machine reaches on the step's own matrix shapes, the bound against which the step is set."""
    flops = seconds = 0.0
    for m, k, n in sorted(set(shapes)):
        a, b = torch.randn(m, k), torch.randn(k, n)
        for _ in range(3):
            a @ b
        start = time.perf_counter()
        for _ in range(repeats):
            a @ b
        count = shapes.count((m, k, n))
        seconds += (time.perf_counter() - start) / repeats * count
        flops += 2 * m * k * n * count
    return flops / seconds / 1e9


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
