"""Training and inference throughput: this package against the reference design.

The reference design (the seed notebook and the popular implementations) recomputes the CNN at every
pondering step although the image never changes, builds p with a Python loop, and computes the losses
step by step. ``ReferencePonderNet`` below re-implements that design faithfully with the same layers and
hyperparameters, so that both run in one process, on the same batches, with the same optimiser.

    python benchmarks/throughput.py                # about 2 minutes on 2 CPU cores
    python benchmarks/throughput.py --batches 100 --threads 2

Prints images per second for training (both models), for inference (the reference's full unroll, this
package's full unroll, and this package's early exit on a trained model), and the ratios.
"""

from __future__ import annotations

import argparse
import json
import time

import torch
import torch.nn.functional as F
from torch import nn

from pondernet_tutorial import mnist_pondernet
from pondernet_tutorial.checkpoints import available_pretrained, load_pretrained
from pondernet_tutorial.data import load_mnist
from pondernet_tutorial.halting import geometric_prior
from pondernet_tutorial.losses import PonderLoss


class ReferenceCNN(nn.Module):
    def __init__(self, n_out=64):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 10, kernel_size=5)
        self.conv2 = nn.Conv2d(10, 20, kernel_size=5)
        self.conv2_drop = nn.Dropout2d()
        self.fc = nn.Linear(320, n_out)

    def forward(self, x):
        x = F.relu(F.max_pool2d(self.conv1(x), 2))
        x = F.relu(F.max_pool2d(self.conv2_drop(self.conv2(x)), 2))
        return F.relu(self.fc(x.flatten(1)))


class ReferencePonderNet(nn.Module):
    """The reference design: the CNN runs at every step, p is built in a Python loop."""

    def __init__(self, max_steps=20, hidden=64):
        super().__init__()
        self.max_steps, self.hidden = max_steps, hidden
        self.cnn = ReferenceCNN(64)
        self.mlp = nn.Sequential(
            nn.Linear(64 + hidden, hidden), nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU()
        )
        self.out, self.lam = nn.Linear(hidden, 10), nn.Linear(hidden, 1)

    def forward(self, x):
        x = (x - 0.1307) / 0.3081
        b = x.shape[0]
        h = x.new_zeros(b, self.hidden)
        un_halted = x.new_ones(b)
        ys, ps = [], []
        for n in range(1, self.max_steps + 1):
            h = self.mlp(torch.cat([self.cnn(x), h], 1))  # the CNN again, at every step
            lam = torch.ones(b) if n == self.max_steps else torch.sigmoid(self.lam(h)).squeeze(1)
            ys.append(self.out(h))
            ps.append(un_halted * lam)
            un_halted = un_halted * (1 - lam)
        return torch.stack(ys), torch.stack(ps, 1)  # (N, B, C), (B, N)


def reference_loss(ys, p, y, p_g, beta=0.01):
    """The loop losses of the popular implementations (with their KL direction)."""
    rec = 0.0
    for n in range(ys.shape[0]):
        rec = rec + (p[:, n] * F.cross_entropy(ys[n], y, reduction="none")).mean()
    reg = nn.KLDivLoss(reduction="batchmean")(p.log(), p_g.expand_as(p))
    return rec + beta * reg


def time_training(step, batches) -> float:
    step(*batches[0])  # warm-up
    start = time.perf_counter()
    for x, y in batches:
        step(x, y)
    return sum(len(y) for _, y in batches) / (time.perf_counter() - start)


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--batches", type=int, default=60, help="training batches timed per model")
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's choice)")
    parser.add_argument("--eval-images", type=int, default=10_000)
    parser.add_argument("--json", default=None, help="also write the numbers to this file")
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    images, labels = load_mnist(train=True)
    n = args.batches * args.batch_size
    x_all = images[:n].float() / 255.0
    batches = list(zip(x_all.split(args.batch_size), labels[:n].split(args.batch_size)))

    ours = mnist_pondernet().train()
    loss_fn = PonderLoss(0.2, 20, 0.01)
    opt = torch.optim.Adam(ours.parameters(), 1e-3)

    def ours_step(x, y):
        out = ours(x, halting="full")
        loss = loss_fn(out.logits, out.log_p, y)["loss"]
        opt.zero_grad()
        loss.backward()
        nn.utils.clip_grad_norm_(ours.parameters(), 0.5)
        opt.step()

    ref = ReferencePonderNet().train()
    ref_opt = torch.optim.Adam(ref.parameters(), 1e-3)
    p_g = geometric_prior(0.2, 20)

    def ref_step(x, y):
        ys, p = ref(x)
        loss = reference_loss(ys, p, y, p_g)
        ref_opt.zero_grad()
        loss.backward()
        nn.utils.clip_grad_norm_(ref.parameters(), 0.5)
        ref_opt.step()

    results = {
        "threads": torch.get_num_threads(),
        "batch_size": args.batch_size,
        "timed_batches": args.batches,
    }
    results["train_reference_img_s"] = time_training(ref_step, batches)
    results["train_package_img_s"] = time_training(ours_step, batches)
    results["train_speedup"] = results["train_package_img_s"] / results["train_reference_img_s"]

    test_x, _ = load_mnist(train=False)
    test_x = test_x[: args.eval_images].float() / 255.0
    model = load_pretrained("interpolation", 0).model if available_pretrained() else ours
    model.eval()
    ref.eval()

    def eval_rate(fn) -> tuple[float, float]:
        steps = []
        with torch.no_grad():
            fn(test_x[:1000])
            start = time.perf_counter()
            for chunk in test_x.split(1000):
                steps.append(fn(chunk))
            return len(test_x) / (time.perf_counter() - start), sum(steps) / len(steps)

    generator = torch.Generator().manual_seed(0)
    results["eval_reference_full_img_s"], _ = eval_rate(lambda x: (ref(x), 20)[1])
    results["eval_package_full_img_s"], _ = eval_rate(lambda x: model(x, halting="full").steps_run)
    results["eval_package_early_exit_img_s"], results["eval_early_exit_mean_steps_run"] = eval_rate(
        lambda x: model(x, halting="sample", generator=generator).steps_run
    )
    results["eval_early_exit_vs_full"] = (
        results["eval_package_early_exit_img_s"] / results["eval_package_full_img_s"]
    )
    results["eval_early_exit_vs_reference"] = (
        results["eval_package_early_exit_img_s"] / results["eval_reference_full_img_s"]
    )
    results = {k: round(v, 2) if isinstance(v, float) else v for k, v in results.items()}
    print(json.dumps(results, indent=2))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=2)
    return results


if __name__ == "__main__":
    main()
