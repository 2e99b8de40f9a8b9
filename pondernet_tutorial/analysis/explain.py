"""The book's interactive figure: from the conditional ``λ_n`` of a few steps to ``p_n``, and from
``λ_p`` and ``β`` to the prior and the terms of the KL regulariser.

:func:`halting_terms` computes every number the figure shows with the package's own functions
(``log_halting_distribution``, ``log_geometric_prior``, ``RegularizationLoss``); :func:`explore_figure`
draws them; :func:`interactive_explorer` puts sliders in front of it (ipywidgets, which Colab ships;
elsewhere ``pip install ipywidgets``). The notebook ``book/explore_halting.ipynb`` uses all three, and
the rendered book shows the figure for fixed slider values.
"""

from __future__ import annotations

import math

import torch

from ..halting import log_geometric_prior
from ..methods.pondernet import RegularizationLoss, log_halting_distribution

DEFAULT_LAMBDAS = (0.2, 0.5, 0.3, 0.6)  # λ_1..λ_{N−1} of the figure; λ_N = 1 is added
DEFAULT_LAMBDA_P, DEFAULT_BETA = 0.2, 0.01  # the package's reference values


def halting_terms(lambdas, lambda_p: float = DEFAULT_LAMBDA_P, beta: float = DEFAULT_BETA) -> dict:
    """Every quantity of the figure, in float64.

    Args:
        lambdas: ``λ_1 .. λ_{N−1}`` in [0, 1]; the last step's ``λ_N = 1`` is added, so ``N = len + 1``.
        lambda_p: the prior's per-step halting probability, in (0, 1).
        beta: the weight of the KL term, >= 0.

    Returns:
        ``lambda`` and ``p`` and ``prior`` (each ``(N,)``), ``survival`` ``S_{n−1}`` ``(N,)``, and the
        numbers ``entropy`` H(p), ``expected_steps`` E[n], ``kl`` KL(p ‖ p_G), ``tau_eff``
        ``−β log(1 − λ_p)``, ``cost`` ``τ_eff E[n]``, ``bonus`` ``−β H(p)``, ``constant`` (the rest of
        ``β KL``) and ``beta_kl``.
    """
    lam = torch.tensor([*lambdas, 1.0], dtype=torch.float64)
    if lam.dim() != 1 or len(lam) < 2 or not bool(((lam >= 0) & (lam <= 1)).all()):
        raise ValueError(f"lambdas must be at least one number in [0, 1], got {list(lambdas)}.")
    if not beta >= 0:
        raise ValueError(f"beta must be >= 0, got {beta}.")
    n_steps = len(lam)
    logits = torch.logit(lam.clamp(1e-12, 1 - 1e-12))[:, None]  # (N, 1); the last row is ignored
    log_p = log_halting_distribution(logits)  # (N, 1)
    p = log_p.exp()[:, 0]
    prior = log_geometric_prior(lambda_p, n_steps, dtype=torch.float64).exp()  # p_G(n), truncated
    steps = torch.arange(1, n_steps + 1, dtype=torch.float64)
    entropy = float(-(p * log_p[:, 0]).nan_to_num().sum())  # 0 · log 0 = 0
    expected = float((steps * p).sum())
    kl = float(RegularizationLoss(lambda_p, n_steps).to(torch.float64)(log_p))  # KL(p ‖ p_G)
    tau_eff = -beta * math.log1p(-lambda_p)
    cost, bonus = tau_eff * expected, -beta * entropy
    return {
        "lambda": lam,
        "p": p,
        "survival": torch.cat([torch.ones(1, dtype=torch.float64), torch.cumprod(1 - lam, 0)[:-1]]),
        "prior": prior,
        "entropy": entropy,
        "expected_steps": expected,
        "kl": kl,
        "beta_kl": beta * kl,
        "tau_eff": tau_eff,
        "cost": cost,
        "bonus": bonus,
        "constant": beta * kl - cost - bonus,
    }


def explore_figure(lambdas=DEFAULT_LAMBDAS, lambda_p: float = DEFAULT_LAMBDA_P, beta: float = DEFAULT_BETA):
    """Three stacked panels for the book's column: λ_n and p_n; p_n and the prior; the parts of β·KL.
    Legends sit above their panels, outside the data."""
    import matplotlib.pyplot as plt

    from .plots import COLUMN_WIDTH, HALTING_COLORS, shades

    t = halting_terms(lambdas, lambda_p, beta)
    n = torch.arange(1, len(t["p"]) + 1).numpy()
    fig, axes = plt.subplots(
        3, 1, figsize=(COLUMN_WIDTH, 8.6), height_ratios=[1, 1, 0.8], layout="constrained"
    )

    ax = axes[0]
    width = 0.38
    ax.bar(
        n - width / 2,
        t["lambda"].numpy(),
        width,
        color=HALTING_COLORS["lambda"],
        label=r"$\lambda_n$ (halt now, if still running)",
    )
    ax.bar(
        n + width / 2, t["p"].numpy(), width, color=HALTING_COLORS["p"], label=r"$p_n = \lambda_n S_{n-1}$"
    )
    ax.plot(n, t["survival"].numpy(), "k.--", lw=1, label=r"$S_{n-1}$ (still running)")
    ax.set_ylim(0, 1.05)
    ax.set_xticks(n)
    ax.set_xlabel("step $n$")
    ax.set_ylabel("probability")
    handles, labels = ax.get_legend_handles_labels()
    order = [1, 2, 0]  # the bars first, in the order drawn, then the line
    ax.legend(
        [handles[i] for i in order],
        [labels[i] for i in order],
        frameon=False,
        loc="lower center",
        bbox_to_anchor=(0.5, 1.0),
        ncol=2,
    )

    ax = axes[1]
    p_label = rf"$p_n$: $E[n]={t['expected_steps']:.2f}$, KL$(p\,\|\,p_G)={t['kl']:.3f}$"
    ax.bar(n, t["p"].numpy(), 0.6, color=HALTING_COLORS["p"], label=p_label)
    prior_label = (
        rf"prior $p_G(n)$, $\lambda_p={lambda_p:g}$ (untruncated mean $1/\lambda_p={1 / lambda_p:.3g}$)"
    )
    ax.plot(n, t["prior"].numpy(), "ko-", ms=4, lw=1, label=prior_label)
    ax.set_ylim(0, 1.05)
    ax.set_xticks(n)
    ax.set_xlabel("step $n$")
    ax.set_ylabel("probability")
    ax.legend(frameon=False, loc="lower center", bbox_to_anchor=(0.5, 1.0), ncol=1)

    ax = axes[2]
    names = [
        r"$\tau_\mathrm{eff}\,E[n]$" + "\ncost per step",
        r"$-\beta H(p)$" + "\nentropy bonus",
        "constant",
        r"$\beta$ KL",
    ]
    values = [t["cost"], t["bonus"], t["constant"], t["beta_kl"]]
    ax.barh(names, values, color=shades(len(names)))  # all parts of PonderNet's loss: its colour, in shades
    ax.axvline(0, color="black", lw=0.8)
    ax.invert_yaxis()
    ax.set_xlabel(
        rf"contribution to the loss ($\beta={beta:g}$, $\tau_\mathrm{{eff}}={t['tau_eff']:.4f}$ per step)"
    )
    return fig


def interactive_explorer(n_steps: int = len(DEFAULT_LAMBDAS) + 1):
    """Sliders for ``λ_1 .. λ_{N−1}``, ``λ_p`` and ``β`` in front of :func:`explore_figure`.

    Needs ipywidgets (preinstalled on Colab; elsewhere ``pip install ipywidgets``) and a running
    kernel: in a static page the sliders do nothing.
    """
    try:
        import ipywidgets as widgets
    except ImportError as error:
        raise ImportError(
            "the sliders need ipywidgets: run `pip install ipywidgets` and restart the kernel "
            "(the static figure above shows the same plot for fixed values)."
        ) from error
    import matplotlib.pyplot as plt

    defaults = list(DEFAULT_LAMBDAS) + [0.5] * max(0, n_steps - 1 - len(DEFAULT_LAMBDAS))
    style = {"description_width": "initial"}
    sliders = {
        f"lambda_{i}": widgets.FloatSlider(
            value=defaults[i - 1], min=0.0, max=1.0, step=0.01, description=f"λ_{i}", style=style
        )
        for i in range(1, n_steps)
    }
    sliders["lambda_p"] = widgets.FloatSlider(
        value=DEFAULT_LAMBDA_P, min=0.02, max=0.98, step=0.01, description="λ_p (prior)", style=style
    )
    sliders["beta"] = widgets.FloatLogSlider(
        value=DEFAULT_BETA, base=10, min=-4, max=0, step=0.1, description="β (KL weight)", style=style
    )

    def draw(**values):
        lambdas = [values[f"lambda_{i}"] for i in range(1, n_steps)]
        explore_figure(lambdas, values["lambda_p"], values["beta"])
        plt.show()

    return widgets.interactive(draw, **sliders)


IDEA_INPUTS = {  # λ_1..λ_{N−1} of the landing page's two inputs; λ_N = 1 is added
    "an easy input": (0.7, 0.8, 0.8, 0.8),
    "a hard input": (0.05, 0.1, 0.3, 0.6),
}


def idea_figure(inputs=None):
    """The landing page's picture: one step function applied again and again, a coin after every step,
    and the halting distributions ``p_n`` of an easy and a hard input."""
    import matplotlib.pyplot as plt
    from matplotlib.patches import FancyBboxPatch

    from .plots import HALTING_COLORS

    inputs = inputs or IDEA_INPUTS
    n_steps = len(next(iter(inputs.values()))) + 1
    fig = plt.figure(figsize=(7.0, 4.4))
    grid = fig.add_gridspec(
        2, len(inputs), height_ratios=[0.8, 1.0], hspace=0.35, wspace=0.3, top=0.99, bottom=0.11
    )

    ax = fig.add_subplot(grid[0, :])
    ax.set_xlim(-0.9, n_steps - 0.2)
    ax.set_ylim(-1.3, 1.0)
    ax.axis("off")
    ax.text(-0.75, 0.3, "$x$", fontsize=13, ha="center", va="center")
    for i in range(n_steps):
        ax.add_patch(
            FancyBboxPatch((i - 0.3, 0.05), 0.6, 0.5, boxstyle="round,pad=0.04", fc="#dbe9f6", ec="k")
        )
        ax.text(i, 0.3, "$s$", fontsize=12, ha="center", va="center")
        ax.annotate(
            "", xy=(i - 0.34, 0.3), xytext=(i - 0.66 if i else -0.62, 0.3), arrowprops={"arrowstyle": "->"}
        )
        ax.text(i, 0.85, f"step {i + 1}", fontsize=9, ha="center", va="center")
        ax.annotate("", xy=(i, -0.55), xytext=(i, 0.0), arrowprops={"arrowstyle": "->"})
        ax.text(
            i + 0.06,
            -0.27,
            rf"halt? $\lambda_{i + 1}$" if i < n_steps - 1 else rf"halt: $\lambda_{i + 1} = 1$",
            fontsize=8.5,
            ha="left",
            va="center",
        )
        ax.text(i, -0.8, rf"answer $\hat y_{i + 1}$", fontsize=9, ha="center", va="center")
    ax.text(
        (n_steps - 1) / 2,
        -1.18,
        "a coin after each step: heads stops and answers; tails goes on with the state $h_{n+1}$",
        fontsize=9,
        ha="center",
        va="center",
        style="italic",
    )

    for j, (name, lambdas) in enumerate(inputs.items()):
        t = halting_terms(lambdas)
        ax = fig.add_subplot(grid[1, j])
        n = torch.arange(1, n_steps + 1).numpy()
        ax.bar(n, t["p"].numpy(), color=HALTING_COLORS["p"])
        ax.set_title(f"{name}: $E[n] = {t['expected_steps']:.1f}$", fontsize=10)
        ax.set_xticks(n)
        ax.set_ylim(0, 1)
        ax.set_xlabel("halting step $n$")
        if j == 0:
            ax.set_ylabel("probability $p_n$")
    return fig


def count_macs(run) -> int:
    """Multiply-accumulates of every linear map and 2-D convolution that ``run()`` computes (a batch of
    one), counted where PyTorch's functions are called: an ``nn.Linear`` layer and a step's own
    ``F.linear`` on part of a weight alike."""
    from torch.nn import functional as F
    from torch.overrides import TorchFunctionMode

    total = 0

    class Count(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            nonlocal total
            kwargs = kwargs or {}
            out = func(*args, **kwargs)
            if func in (F.linear, F.conv2d):
                weight = args[1] if len(args) > 1 else kwargs["weight"]
                # each output value takes one row of the weight: in MACs, or C_in · k_h · k_w
                total += out.numel() * weight[0].numel()
            return out

    with torch.no_grad(), Count():
        run()
    return total


def naive_halting_distribution(lambda_logits):
    """p_n = λ_n ∏_{j<n} (1 − λ_j) computed directly, as a float32 product, ``(N, B)``: the way that
    fails (chapter 3, and the popular implementations), never the package's (``log_halting_distribution``)."""
    lam = torch.sigmoid(lambda_logits)
    lam = torch.cat([lam[:-1], torch.ones_like(lam[-1:])])  # λ_N = 1
    survival = torch.cumprod(1 - lam, dim=0)
    return lam * torch.cat([torch.ones_like(lam[:1]), survival[:-1]])
