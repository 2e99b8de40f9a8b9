"""PonderNet in about 40 lines (a step function, the halting distribution, the loss and the coins), and a
training loop.

The chapter "PonderNet in 40 lines" shows this module. The rest of the package computes the same
quantities for any step function and any halting method, with argument checks, early exit and
Lightning around them (``methods/pondernet.py``, ``methods/base.py``, ``steps/parity.py``);
``tests/core/test_minimal.py`` checks that both give the same ``p_n`` and the same loss.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn


class MinimalPonderNet(nn.Module):
    """A GRU cell as the step function s(x, h_n), unrolled N steps."""

    def __init__(self, n_inputs, n_classes, hidden_size, max_steps):
        super().__init__()
        self.max_steps = max_steps  # N
        self.cell = nn.GRUCell(n_inputs, hidden_size)  # h_{n+1}
        self.output = nn.Linear(hidden_size, n_classes)  # ŷ_n
        self.halt = nn.Linear(hidden_size, 1)  # z_n, λ_n = σ(z_n)

    def forward(self, x):  # x (B, D) -> ŷ (N, B, C), z (N, B)
        h = x.new_zeros(len(x), self.cell.hidden_size)  # h_1 = 0
        y_hat, z = [], []
        for _ in range(self.max_steps):
            h = self.cell(x, h)
            y_hat.append(self.output(h))
            z.append(self.halt(h).squeeze(1))
        return torch.stack(y_hat), torch.stack(z)


def halting_log_p(z):  # z (N, B) -> log p_n (N, B)
    zero = z.new_zeros(1, z.shape[1])
    log_lambda = torch.cat([F.logsigmoid(z[:-1]), zero])  # λ_N = 1
    log_go_on = F.logsigmoid(-z[:-1]).cumsum(0)  # log S_n, n < N
    return log_lambda + torch.cat([zero, log_go_on])  # + log S_{n-1}


def ponder_loss(y_hat, z, y, lambda_p=0.2, beta=0.01):
    """L = Σ_n p_n ℒ(y, ŷ_n) + β KL(p ‖ p_G), batch mean."""
    n_steps, batch, n_classes = y_hat.shape
    log_p = halting_log_p(z)  # (N, B)
    task = F.cross_entropy(  # ℒ(y, ŷ_n) per sample and step
        y_hat.reshape(-1, n_classes),
        y.repeat(n_steps),
        reduction="none",
    ).view(n_steps, batch)
    rec = (log_p.exp() * task).sum(0).mean()  # L_Rec
    n_1 = torch.arange(n_steps, dtype=log_p.dtype)[:, None]  # n − 1
    log_prior = math.log(lambda_p) + n_1 * math.log(1 - lambda_p)
    kl = (log_p.exp() * (log_p - log_prior)).sum(0).mean()  # KL
    return rec + beta * kl


@torch.no_grad()
def sample_halting_step(z, generator=None):  # z (N, B) -> T (B,)
    n_steps, batch = z.shape
    u = torch.rand(batch, n_steps, generator=generator).T  # uniform
    heads = u < torch.sigmoid(z)  # halt with probability λ_n
    heads[-1] = True  # λ_N = 1
    return heads.float().argmax(0) + 1  # the first heads


def train_on_parity(model, updates, lr=3e-3, beta=0.01, generator=None):
    """Adam on fresh parity batches of 128; each update's loss."""
    from .data.parity import parity_batch
    from .threads import training_threads

    n = model.cell.input_size  # entries per vector
    optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    losses = []
    with training_threads():  # one thread on two cores: the two would wait for each other
        for _ in range(updates):
            x, y, _ = parity_batch(128, n, (1, n), generator)
            loss = ponder_loss(*model(x), y, beta=beta)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            losses.append(loss.item())
    return losses
