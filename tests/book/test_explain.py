"""The interactive figure's numbers and sliders."""

import math

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402

from pondernet_tutorial.analysis import explain  # noqa: E402
from pondernet_tutorial.analysis.explain import explore_figure, halting_terms, interactive_explorer  # noqa: E402


def test_halting_distribution_by_hand():
    t = halting_terms([0.2, 0.5, 0.4], lambda_p=0.3, beta=0.1)
    # p_n = λ_n Π_{j<n}(1 − λ_j), with λ_4 = 1
    expected = torch.tensor([0.2, 0.8 * 0.5, 0.8 * 0.5 * 0.4, 0.8 * 0.5 * 0.6], dtype=torch.float64)
    torch.testing.assert_close(t["p"], expected)
    torch.testing.assert_close(t["survival"], torch.tensor([1.0, 0.8, 0.4, 0.24], dtype=torch.float64))
    assert t["expected_steps"] == pytest.approx(float((torch.arange(1, 5) * expected).sum()))
    prior = torch.tensor([0.3 * 0.7**k for k in range(4)], dtype=torch.float64)
    torch.testing.assert_close(t["prior"], prior)
    assert t["kl"] == pytest.approx(float((expected * (expected.log() - prior.log())).sum()), rel=1e-6)


@pytest.mark.parametrize("lambda_p, beta", [(0.2, 0.01), (0.5, 1.0), (0.05, 0.3)])
def test_kl_splits_into_cost_bonus_and_a_constant(lambda_p, beta):
    """β KL(p ‖ p_G) = τ_eff E[n] − β H(p) + β (log(1 − λ_p) − log λ_p): the constant does not depend on p."""
    for lambdas in ([0.1, 0.9, 0.3], [0.7, 0.7, 0.7, 0.7, 0.7], [0.0, 0.0, 1.0]):
        t = halting_terms(lambdas, lambda_p, beta)
        assert t["tau_eff"] == pytest.approx(-beta * math.log(1 - lambda_p))
        assert t["bonus"] == pytest.approx(-beta * t["entropy"])
        assert t["constant"] == pytest.approx(beta * (math.log(1 - lambda_p) - math.log(lambda_p)), abs=1e-6)


def test_bad_values_are_refused():
    with pytest.raises(ValueError, match="lambdas"):
        halting_terms([0.5, 1.5])
    with pytest.raises(ValueError, match="beta"):
        halting_terms([0.5], beta=-1)
    with pytest.raises(ValueError, match="lambda_p"):
        halting_terms([0.5], lambda_p=1.0)


def test_figure_draws_p_and_the_prior():
    fig = explore_figure([0.3, 0.6], lambda_p=0.4, beta=0.05)
    t = halting_terms([0.3, 0.6], lambda_p=0.4, beta=0.05)
    assert len(fig.axes) == 3
    heights = [patch.get_height() for patch in fig.axes[1].patches]
    assert heights == pytest.approx(t["p"].tolist())
    widths = [patch.get_width() for patch in fig.axes[2].patches]
    assert widths == pytest.approx([t["cost"], t["bonus"], t["constant"], t["beta_kl"]])
    plt.close(fig)


def test_sliders_redraw_with_their_values(monkeypatch):
    calls = []
    monkeypatch.setattr(explain, "explore_figure", lambda *args: calls.append(args))
    monkeypatch.setattr(plt, "show", lambda: None)
    widget = interactive_explorer(n_steps=4)
    sliders = {child.description: child for child in widget.children if hasattr(child, "value")}
    assert set(sliders) == {"λ_1", "λ_2", "λ_3", "λ_p (prior)", "β (KL weight)"}
    calls.clear()
    sliders["λ_2"].value = 0.9
    sliders["λ_p (prior)"].value = 0.5
    assert calls[-1][0][1] == pytest.approx(0.9)
    assert calls[-1][1] == pytest.approx(0.5)
    assert len(calls[-1][0]) == 3  # λ_1..λ_3; λ_4 = 1 is added by the figure


def test_idea_figure_shows_each_inputs_halting_distribution():
    inputs = {"easy": (0.9, 0.9), "hard": (0.1, 0.2)}
    fig = explain.idea_figure(inputs)
    bars = [ax for ax in fig.axes if ax.get_xlabel() == "halting step $n$"]
    assert len(bars) == 2
    for ax, lambdas in zip(bars, inputs.values()):
        assert [patch.get_height() for patch in ax.patches] == pytest.approx(
            halting_terms(lambdas)["p"].tolist()
        )
    plt.close(fig)


def test_count_macs_by_hand():
    from torch import nn

    net = nn.Sequential(nn.Conv2d(1, 2, kernel_size=3), nn.Flatten(), nn.Linear(2 * 4 * 4, 5))
    x = torch.zeros(1, 1, 6, 6)
    # conv: 2 · 4 · 4 outputs × 3 · 3 · 1 MACs each; linear: 32 × 5
    assert explain.count_macs(lambda: net(x)) == 2 * 4 * 4 * 9 + 32 * 5


def test_count_macs_counts_a_linear_map_that_no_layer_makes():
    """MNISTStep's step applies part of its first layer's weight with F.linear, W_h h: 64 × 64 MACs
    that hooks on the layers never saw (before: 4,800 MACs a step, not 8,896, and the embedding's
    count lacked its share of the first layer, W_e e)."""
    from pondernet_tutorial import MNISTStep

    step, x = MNISTStep().eval(), torch.zeros(1, 1, 28, 28)
    context = step.encode(x)
    h = step.initial_state(context)
    # W_h h, then the second layer (64 × 64), the output head (64 × 10) and the halting head (64 × 1)
    assert explain.count_macs(lambda: step.step(context, h)) == 64 * 64 + 64 * 64 + 64 * 10 + 64
    # the CNN's trunk, its Linear(320, 64), and W_e e (64 × 64)
    trunk = explain.count_macs(lambda: step.embedding.net[:-3](x))
    assert explain.count_macs(lambda: step.encode(x)) == trunk + 320 * 64 + 64 * 64


def test_the_sliders_cell_is_never_executed_by_the_build():
    """After displaying the sliders (an ipywidgets `interactive` with an output widget) the kernel
    sometimes does not shut down, and the build waited out its timeout on explore_halting: the cell
    runs only where a reader moves the sliders."""
    import json
    from pathlib import Path

    notebook = json.loads(
        (Path(__file__).resolve().parents[2] / "book" / "explore_halting.ipynb").read_text()
    )
    cells = [c for c in notebook["cells"] if "interactive_explorer()" in "".join(c["source"])]
    assert cells and all("skip-execution" in c["metadata"].get("tags", []) for c in cells)


def test_count_macs_of_a_grouped_convolution():
    """Each output value of a convolution in 2 groups reads half the input channels."""
    from torch import nn

    conv = nn.Conv2d(4, 6, kernel_size=3, groups=2)
    # 6 · 2 · 2 outputs × 3 · 3 · 2 MACs each
    assert explain.count_macs(lambda: conv(torch.zeros(1, 4, 4, 4))) == 6 * 2 * 2 * 9 * 2


@pytest.mark.parametrize("lambdas", [[-0.1], [], [1.5], [float("nan")]])
def test_halting_terms_refuses_what_is_no_halting_probability(lambdas):
    with pytest.raises(ValueError):
        explain.halting_terms(lambdas)


def test_one_networks_halting_is_drawn_in_pondernets_colour_and_no_other_methods():
    """The landing page's picture and the explorer draw p_n in PonderNet's colour; no patch, line or text
    of theirs takes the colour of ACT, TRM or HRM (one colour per method in every figure)."""
    from matplotlib.colors import to_rgb

    from pondernet_tutorial.analysis.plots import METHOD_COLORS

    others = {tuple(round(c, 3) for c in to_rgb(METHOD_COLORS[m])) for m in ("act", "trm", "hrm", "control")}
    ponder = tuple(round(c, 3) for c in to_rgb(METHOD_COLORS["pondernet"]))
    for fig in (explain.idea_figure(), explore_figure()):
        colours = []
        for ax in fig.axes:
            colours += [p.get_facecolor() for p in ax.patches] + [line.get_color() for line in ax.lines]
            colours += [t.get_color() for t in ax.texts]
            colours += [
                a.arrow_patch.get_edgecolor() for a in ax.texts if hasattr(a, "arrow_patch") and a.arrow_patch
            ]
        drawn = {tuple(round(c, 3) for c in to_rgb(colour)) for colour in colours}
        assert ponder in drawn and not drawn & others, drawn & others
        plt.close(fig)
