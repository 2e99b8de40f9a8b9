"""The pointer-chasing figure: the walk it draws is the input's walk.

Deliberate breaks these tests catch (each was tried):
- ``pointer_walk`` stopping one slot before the exit (``while arrows[arrows[walk[-1]]] != ...``):
  test_the_walk_ends_at_the_answer_after_k_slots;
- ``plot_pointer_sample`` drawing the walk's arcs backwards (``_arc(ax, j, i, ...)``), or drawing the
  walk's arrows among the others as well: test_the_figure_draws_the_walk_above_and_the_rest_below.
"""

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402

from pondernet_tutorial.analysis.plots import plot_pointer_sample, pointer_walk  # noqa: E402
from pondernet_tutorial.data.pointer import pointer_batch  # noqa: E402


def test_the_walk_ends_at_the_answer_after_k_slots():
    x, y, k = pointer_batch(500, 16, (1, 12), generator=torch.Generator().manual_seed(0))
    for arrows, label, difficulty in zip(x, y.tolist(), k.tolist()):
        walk = pointer_walk(arrows)
        assert walk[0] == 0 and walk[-1] == label and len(walk) == difficulty
    with pytest.raises(ValueError, match="cycle"):
        pointer_walk([1, 0, 2])


def test_the_figure_draws_the_walk_above_and_the_rest_below():
    x, _, k = pointer_batch(1, 16, (5, 5), generator=torch.Generator().manual_seed(1))
    arrows = x[0].long().tolist()
    fig, ax = plt.subplots()
    walk = plot_pointer_sample(arrows, ax)
    walk_arcs = [line for line in ax.lines if line.get_gid() == "walk"]
    other_arcs = [line for line in ax.lines if line.get_gid() == "other"]
    assert len(walk_arcs) == k.item() - 1 == len(walk) - 1
    moves = sum(a != i for i, a in enumerate(arrows))
    assert len(other_arcs) == moves - len(walk_arcs)  # each arrow drawn once
    for line, (i, j) in zip(walk_arcs, zip(walk[:-1], walk[1:])):
        xs, ys = line.get_data()
        assert (xs[0], xs[-1]) == pytest.approx((i, j)) and ys.max() > 0  # from i to j, above the row
    assert all(line.get_ydata().min() < 0 for line in other_arcs)
    plt.close(fig)


def test_a_method_has_one_colour_and_its_configurations_differ_by_marker_and_place():
    from pondernet_tutorial.analysis.plots import METHOD_COLORS, config_styles

    families = {"PonderNet a": "pondernet", "ACT": "act", "PonderNet b": "pondernet", "fixed 1": "one step"}
    styles = config_styles(families, shift=0.2)
    assert styles["PonderNet a"]["color"] == styles["PonderNet b"]["color"] == METHOD_COLORS["pondernet"]
    assert styles["ACT"]["color"] == METHOD_COLORS["act"] != METHOD_COLORS["pondernet"]
    assert styles["PonderNet a"]["marker"] != styles["PonderNet b"]["marker"]
    assert styles["PonderNet a"]["linestyle"] != styles["PonderNet b"]["linestyle"]
    offsets = [style["offset"] for style in styles.values()]
    assert len(set(offsets)) == len(offsets) and abs(sum(offsets)) < 1e-9  # apart, centred on the data
    assert len(set(METHOD_COLORS.values())) == len(METHOD_COLORS)
    with pytest.raises(ValueError, match="unknown method family"):
        config_styles({"x": "lstm"})


def test_a_prior_keeps_its_marker_and_line_in_every_figure():
    """λ_p = 0.2 was dotted with diamonds in one pointer figure and dashed with squares in the next: the
    style followed the drawing order (a new reader's review). Break: rank by drawing order only."""
    from pondernet_tutorial.analysis.plots import config_styles

    one = config_styles({"PonderNet λ_p=0.5": "pondernet", "PonderNet λ_p=0.2": "pondernet", "ACT": "act"})
    two = config_styles(
        {
            "PonderNet λ_p=0.2": "pondernet",
            "PonderNet uniform prior": "pondernet",
            "PonderNet λ_p=0.5": "pondernet",
        }
    )
    for name in ("PonderNet λ_p=0.5", "PonderNet λ_p=0.2"):
        assert (one[name]["marker"], one[name]["linestyle"]) == (two[name]["marker"], two[name]["linestyle"])
    priors = {two[name]["marker"] for name in ("PonderNet λ_p=0.5", "PonderNet λ_p=0.2")}
    assert two["PonderNet uniform prior"]["marker"] not in priors  # another PonderNet takes a free style


def test_the_rotation_figure_colours_by_method_and_keeps_equal_lines_apart():
    import pandas as pd
    from matplotlib.colors import to_rgb

    from pondernet_tutorial.analysis.plots import METHOD_COLORS, plot_against_rotation

    rows = [
        {"experiment": e, "method": "pondernet", "seed": s, "mode": "exact", "degrees": d, "accuracy": 0.9}
        for e in ("mnist-interpolation", "mnist-extrapolation")
        for s in (0, 1)
        for d in (-45, 0, 45)
    ]
    fig, ax = plt.subplots()
    plot_against_rotation(pd.DataFrame(rows), "accuracy", ax)
    first, second = ax.get_lines()
    assert to_rgb(first.get_color()) == to_rgb(second.get_color()) == to_rgb(METHOD_COLORS["pondernet"])
    assert first.get_marker() != second.get_marker()
    assert list(first.get_xdata()) != list(second.get_xdata())  # equal values, side by side
    plt.close(fig)


def test_the_halting_distribution_draws_a_set_of_any_name():
    """A reader's own test set ("mine") failed in the angle's colour, ``float('mine')`` (round 11's
    reuse review); MNIST's rotated sets keep their angle's colour and label. Break: draw every set with
    angle_style."""
    import matplotlib.pyplot as plt
    import pandas as pd

    from pondernet_tutorial.analysis.plots import angle_style, plot_halting_distribution

    table = pd.DataFrame({"set": ["mine"] * 3 + ["rot-45"] * 3, "halt_step": [1, 2, 2, 3, 3, 4]})
    fig, ax = plt.subplots()
    plot_halting_distribution(table, 0.2, 5, ["mine", "rot-45"], ax=ax)
    mine, rotated = ax.get_lines()
    assert mine.get_label() == "mine" and list(mine.get_ydata()) == [1 / 3, 2 / 3, 0, 0, 0]
    assert rotated.get_label() == "rotated by −45°" and rotated.get_color() == angle_style("rot-45")["color"]
    plt.close(fig)
