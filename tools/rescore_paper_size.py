"""An independent re-score of the shipped paper-size parity study, in NumPy alone.

Nothing of the package and no PyTorch: the weights of each run of ``pretrained/studies/parity-paper-size``
are read with ``safetensors.numpy`` and its method options from the file's ``hparams``; the parity
vectors, the paper's tanh RNN, PonderNet's coins and ACT's halting are this file's own code. Each run
is scored on ``--vectors`` fresh vectors per range, ``k`` (the non-zero entries, each -1 or +1 at
random distinct positions) uniform over the range: at 64 elements the training range 1-64 (``seen``),
at 96 the training range 1-48 (``seen``) and 49-96 (``unseen``); the label is the parity of the +1
entries. The coins and vectors come from a NumPy generator of ``--seed``, not the package's.

A row agrees when the fresh accuracy lies within 3 standard errors of the shipped one,
sqrt(p1(1-p1)/n1 + p2(1-p2)/n2), and the fresh mean halting step (the step T, counted from 1, at which
each vector stops) within 3 standard errors of the shipped mean, s*sqrt(1/n1 + 1/n2), s the fresh
steps' std (at least sqrt(f(1-f)), f the fractional part of the shipped mean: the least std of whole
steps with that mean, so that a shipped 1.00025 is not "infinitely" far from a fresh 1.0).

    OMP_NUM_THREADS=1 python tools/rescore_paper_size.py [--vectors 8000] [--seed S] [--runs 96:act:1 ...]

Exit status: 0 when every row agrees, 1 when one does not, 2 on bad input (one line).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

import numpy as np
import pandas as pd
from safetensors import safe_open

STUDY = Path(__file__).resolve().parents[1] / "pondernet_tutorial/pretrained/studies/parity-paper-size"
RANGES = {64: {"seen": (1, 64)}, 96: {"seen": (1, 48), "unseen": (49, 96)}}  # k of each scored range
SEED = 4_242_017  # none of the package's seeds


def draw_vectors(rng, n: int, k_range: tuple[int, int], count: int):
    """``count`` vectors of ``n`` entries, ``k ~ U{k_min..k_max}`` of them ±1 at distinct positions."""
    k = rng.integers(k_range[0], k_range[1] + 1, size=count)
    ranks = rng.random((count, n)).argsort(1).argsort(1)  # a random permutation of 0..n-1 per row
    signs = rng.integers(0, 2, size=(count, n)) * 2 - 1  # ±1
    x = np.where(ranks < k[:, None], signs, 0).astype(np.float64)  # the k positions of rank < k
    return x, (x == 1).sum(1) % 2  # label: parity of the +1 entries (1 = odd)


def halting_probability(z):
    return 1.0 / (1.0 + np.exp(-z))  # λ_n = η_n = σ(z_n)


def load(path: Path):
    """The run's weights (float64) and its method options."""
    with safe_open(str(path), "np") as f:
        w = {k.removeprefix("model.step_function."): f.get_tensor(k).astype(np.float64) for k in f.keys()}
        return w, json.loads(f.metadata()["hparams"])


def unroll(w, x, last: int, halts):
    """Steps 1..last of the RNN on every row of ``x``; ``halts(n, z_n, y_n, rows)`` says which of the
    running rows stop at step ``n`` (all at ``last``). Returns each row's stopping step T (from 1)."""
    drive = x @ w["cell.weight_ih"].T + w["cell.bias_ih"] + w["cell.bias_hh"]  # W_x x + b, x every step
    h = np.zeros((len(x), w["cell.weight_hh"].shape[0]))  # h_1 = 0
    rows, steps = np.arange(len(x)), np.full(len(x), last)
    for n in range(1, last + 1):
        h = np.tanh(drive + h @ w["cell.weight_hh"].T)  # h_{n+1} = tanh(W_x x + W_h h_n + b)
        y = h @ w["output_head.weight"].T + w["output_head.bias"]  # ŷ_n: logits of even, odd
        # z_n = w_λ · h_{n+1} + b_λ; ACT's halting_bias only initialised b_λ, which then trained
        z = h @ w["halting_head.weight"][0] + w["halting_head.bias"][0]
        stop = halts(n, z, y, rows) | (n == last)
        steps[rows[stop]] = n
        rows, drive, h = rows[~stop], drive[~stop], h[~stop]
        if len(rows) == 0:
            break
    return steps


def pondernet(w, options, x, rng):
    """The answer ŷ_T at the first step T whose coin u_n < λ_n (λ = 1 at eval_max_steps), and T."""
    last, answer = options.get("eval_max_steps") or options["max_steps"], np.zeros(len(x), dtype=int)
    coins = rng.random((len(x), last))  # u_{b,n} ~ U(0, 1)

    def halts(n, z, y, rows):
        stop = (coins[rows, n - 1] < halting_probability(z)) | (n == last)  # Bernoulli(λ_n)
        answer[rows[stop]] = y[stop].argmax(1)
        return stop

    return answer, unroll(w, x, last, halts)


def act(w, options, x, rng):
    """ACT: T the first n with Σ_{j≤n} η_j ≥ 1 − ε (or eval_max_steps); the answer argmax Σ_n p_n ŷ_n,
    p_n = η_n before T and the remainder R = 1 − Σ_{n<T} η_n at T."""
    last, eps = options.get("eval_max_steps") or options["max_steps"], options["epsilon"]
    total, mixed = np.zeros(len(x)), np.zeros((len(x), 2))

    def halts(n, z, y, rows):
        eta = halting_probability(z)
        stop = (total[rows] + eta >= 1.0 - eps) | (n == last)
        weight = np.where(stop, 1.0 - total[rows], eta)  # η_n, or the remainder R at T
        mixed[rows] += weight[:, None] * y  # ŷ = Σ_n p_n ŷ_n
        total[rows] += eta
        return stop

    steps = unroll(w, x, last, halts)
    return mixed.argmax(1), steps


def in_se(diff: float, se: float) -> float:
    return 0.0 if diff == 0 else (diff / se if se > 0 else math.copysign(math.inf, diff))


def rescore(study: Path, runs: list[str] | None, vectors: int, seed: int) -> pd.DataFrame:
    table, rows = pd.read_csv(study / "runs.csv"), []
    table["run"] = table["size"].astype(str) + ":" + table["method"] + ":" + table["seed"].astype(str)
    if unknown := sorted(set(runs or []) - set(table["run"])):
        raise ValueError(f"no run {', '.join(unknown)} in {study / 'runs.csv'} (runs are SIZE:METHOD:SEED)")
    rng = np.random.default_rng(seed)
    for _, run in table[table["run"].isin(runs)].iterrows() if runs else table.iterrows():
        size, method = int(run["size"]), run["method"]
        w, hparams = load(study / "weights" / f"{size}-{method}-seed{int(run['seed'])}.safetensors")
        infer = {"pondernet": pondernet, "act": act}[hparams["method"]]
        for name, k_range in RANGES[size].items():
            x, y = draw_vectors(rng, size, k_range, vectors)
            answer, steps = infer(w, hparams["method_options"], x, rng)
            p1, n1, p2 = float(run[f"{name}_accuracy"]), int(run[f"{name}_n"]), float((answer == y).mean())
            se_acc = math.sqrt(p1 * (1 - p1) / n1 + p2 * (1 - p2) / vectors)  # SE of p2 − p1
            m1, m2 = float(run[f"{name}_steps"]), float(steps.mean())
            f = m1 - math.floor(m1)
            s = max(float(steps.std()), math.sqrt(f * (1 - f)))  # per-vector std of the steps
            se_steps = s * math.sqrt(1 / n1 + 1 / vectors)  # SE of m2 − m1
            acc_se, steps_se = in_se(p2 - p1, se_acc), in_se(m2 - m1, se_steps)
            rows.append(
                {"size": size, "method": method, "seed": int(run["seed"]), "range": name,
                 "shipped_acc": p1, "fresh_acc": p2, "acc_diff_se": acc_se, "shipped_steps": m1,
                 "fresh_steps": m2, "steps_diff_se": steps_se, "agrees": abs(acc_se) <= 3 and abs(steps_se) <= 3}
            )  # fmt: skip
    return pd.DataFrame(rows)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--vectors", type=int, default=8000, help="fresh vectors per run and range")
    parser.add_argument("--seed", type=int, default=SEED, help="the fresh vectors' and coins' seed")
    parser.add_argument("--runs", nargs="+", default=None, help="SIZE:METHOD:SEED (default: every run)")
    args = parser.parse_args(argv)
    try:
        if args.vectors < 2:
            raise ValueError(f"--vectors must be 2 or more, got {args.vectors}")
        table = rescore(STUDY, args.runs, args.vectors, args.seed)
    except (OSError, KeyError, ValueError, json.JSONDecodeError) as error:
        print(f"error: {str(error).splitlines()[0] if str(error) else type(error).__name__}", file=sys.stderr)
        return 2
    print(table.to_string(index=False, float_format=lambda v: f"{v:.4f}"))
    print(f"{int(table['agrees'].sum())} of {len(table)} rows agree (|difference| <= 3 SE)")
    return 0 if table["agrees"].all() else 1


if __name__ == "__main__":
    sys.exit(main())
