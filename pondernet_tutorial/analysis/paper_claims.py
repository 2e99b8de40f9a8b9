"""The PonderNet paper's three parity claims, and the rules that judge them at the paper's own size.

The paper (Banino et al. 2021, §3.1, figures 1 and 2c) claims, for its parity network:

1. at 64 elements (interpolation), PonderNet at λ_p = 0.1 solves the task in roughly 3 steps;
2. trained on 1 to 48 non-zero entries of 96 and tested on 49 to 96 (extrapolation), PonderNet
   answers almost perfectly, with almost twice the steps of interpolation (5);
3. on the same extrapolation ACT stays at chance.

``tools/paper_size.py`` trains two seeds of PonderNet and of ACT at each size to 500,000 updates. These
rules were fixed in a commit before the first 96-element run finished training, and are not to be tuned
to the results. Each is judged per seed, on the run's last point (its weights after the last update,
scored on 8,000 vectors per range), with the 95% Wilson interval of its accuracy over those vectors:

- **almost perfect**: the interval lies at or above :attr:`PaperRules.perfect` (95%); wholly below it
  is short of it; across it is undetermined;
- **about 3 steps**: the mean halting step on the training range within :attr:`PaperRules.steps_near`
  of 3; **almost twice**: the extrapolation run's mean step on the unseen range between
  :attr:`PaperRules.ratio` times PonderNet's mean at 64 (over its seeds);
- **at chance**: the interval lies within :attr:`PaperRules.chance_band` of 50% (the book's learned
  mark is 10 points above chance, so a run at chance never reaches it); wholly outside that band is not
  at chance; across its edge is undetermined.

A claim is *held* when every seed holds it, *not held* when no seed does, and *undetermined* otherwise
(a seed undetermined, or the seeds disagree: the page then shows each seed). A run short of
:data:`UPDATES` is *not judged*: a partial run is never reported as the full one.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from .verdicts import side

UPDATES = 500_000  # the update count every run trains to, whatever its accuracy
SEEDS = (0, 1)  # every run's seeds: a claim is judged over all of them
# the study's runs, (size, method, seed): PonderNet and ACT at 64 and 96 elements, each seed
RUNS = frozenset(
    (size, method, seed) for size in (64, 96) for method in ("pondernet", "act") for seed in SEEDS
)
STUDY = "parity-paper-size"  # the shipped study's folder, under pretrained/studies
CHANCE = 0.5
HELD, NOT_HELD, UNDETERMINED, NOT_JUDGED = "held", "not held", "undetermined", "not judged"


@dataclass(frozen=True)
class PaperRules:
    """The thresholds of the paper's claims (see the module's docstring), declared once, here.

    Attributes:
        perfect: accuracy for "almost perfectly" and for solving: 95%, five points short of perfect,
            a generous reading of the paper's "almost perfectly" (its figure 1b).
        paper_steps: the paper's step count at 64 elements and λ_p = 0.1 ("roughly 3", figure 2c).
        steps_near: how far from ``paper_steps`` "roughly" reaches: one step.
        ratio: the range of "almost twice" (the paper's 5 steps against 3): 1.5 to 2.5 times.
        chance_band: how far from chance "at chance" reaches: ten points, the book's learned mark.
        z: the normal quantile of the 95% intervals.
    """

    perfect: float = 0.95
    paper_steps: float = 3.0
    steps_near: float = 1.0
    ratio: tuple = (1.5, 2.5)
    chance_band: float = 0.10
    z: float = 1.96


def wilson(share: float, n: int, z: float = PaperRules.z) -> tuple[float, float]:
    """The 95% Wilson interval of a share of ``n`` vectors."""
    if n <= 0 or not math.isfinite(share):
        return (math.nan, math.nan)
    centre = (share + z**2 / (2 * n)) / (1 + z**2 / n)
    half = z * math.sqrt(share * (1 - share) / n + z**2 / (4 * n**2)) / (1 + z**2 / n)
    return (centre - half, centre + half)


def difference_in_se(shipped: float, n_shipped: int, fresh: float, n_fresh: int) -> float:
    """``(fresh - shipped) / SE`` with SE that of the two shares combined, sqrt(p1(1-p1)/n1 +
    p2(1-p2)/n2): how far a re-score lies from a shipped share. Where SE is 0 (both shares 0 or 1), 0
    when they are equal and infinite otherwise. The re-score tools count |difference| ≤ 3 as agreement."""
    se = math.sqrt(shipped * (1 - shipped) / n_shipped + fresh * (1 - fresh) / n_fresh)
    if se == 0:
        return 0.0 if fresh == shipped else math.copysign(math.inf, fresh - shipped)
    return (fresh - shipped) / se


def at_least(low: float, high: float, mark: float) -> str:
    """:data:`HELD` when the interval ``(low, high)`` lies at or above ``mark``, :data:`NOT_HELD` when it
    lies wholly below, :data:`UNDETERMINED` when it straddles it (the book's :func:`~.verdicts.side`)."""
    return {1: HELD, -1: NOT_HELD, 0: UNDETERMINED}[side(low, high, mark)]


def within(low: float, high: float, lower: float, upper: float) -> str:
    """:data:`HELD` when the interval lies within ``[lower, upper]``, :data:`NOT_HELD` when it lies
    wholly outside, :data:`UNDETERMINED` when it crosses an edge."""
    if lower <= low and high <= upper:
        return HELD
    return NOT_HELD if high < lower or low > upper else UNDETERMINED


def both(*verdicts: str) -> str:
    """Two parts of one claim: held when both hold, not held when either fails, else undetermined."""
    if NOT_HELD in verdicts:
        return NOT_HELD
    return HELD if all(v == HELD for v in verdicts) else UNDETERMINED


def over_seeds(verdicts: list[str]) -> str:
    """A claim over its seeds: held when every seed holds it, not held when none does."""
    if not verdicts or NOT_JUDGED in verdicts:
        return NOT_JUDGED
    if all(v == HELD for v in verdicts):
        return HELD
    return NOT_HELD if all(v == NOT_HELD for v in verdicts) else UNDETERMINED


def interpolates(end: dict, rules: PaperRules = PaperRules()) -> str:
    """Claim 1 for one PonderNet seed at 64 elements: its last point ``end`` (``updates``,
    ``seen_accuracy``, ``seen_n``, ``seen_steps``) solves the training range in roughly 3 steps."""
    if end["updates"] < UPDATES:
        return NOT_JUDGED
    accuracy = at_least(*wilson(end["seen_accuracy"], end["seen_n"], rules.z), rules.perfect)
    near = abs(end["seen_steps"] - rules.paper_steps) <= rules.steps_near
    return both(accuracy, HELD if near else NOT_HELD)


def extrapolates(end: dict, interpolation_steps: float, rules: PaperRules = PaperRules()) -> str:
    """Claim 2 for one PonderNet seed at 96 elements: almost perfect on the unseen range, with between
    ``rules.ratio`` times ``interpolation_steps`` (PonderNet's mean step at 64 over its seeds)."""
    if end["updates"] < UPDATES or not math.isfinite(interpolation_steps):
        return NOT_JUDGED
    accuracy = at_least(*wilson(end["unseen_accuracy"], end["unseen_n"], rules.z), rules.perfect)
    ratio = end["unseen_steps"] / interpolation_steps
    return both(accuracy, HELD if rules.ratio[0] <= ratio <= rules.ratio[1] else NOT_HELD)


def chance_verdict(share: float, n: int, rules: PaperRules = PaperRules()) -> str:
    """*At chance*: :data:`HELD` when the 95% interval of ``share`` over ``n`` vectors lies within
    ``rules.chance_band`` of 50%, :data:`NOT_HELD` when it lies wholly outside, else undetermined."""
    low, high = wilson(share, n, rules.z)
    return within(low, high, CHANCE - rules.chance_band, CHANCE + rules.chance_band)


def at_chance(end: dict, rules: PaperRules = PaperRules()) -> str:
    """Claim 3 for one ACT seed at 96 elements: its unseen-range accuracy is at chance."""
    if end["updates"] < UPDATES:
        return NOT_JUDGED
    return chance_verdict(end["unseen_accuracy"], end["unseen_n"], rules)


def every_range_at_chance(runs, rules: PaperRules = PaperRules()) -> bool:
    """Whether every run of ``runs`` (rows of the shipped ``runs.csv``) finished its :data:`UPDATES`
    and answers at chance (:func:`chance_verdict`) on each range it is scored on: its training range,
    and at 96 elements the unseen one too."""
    return all(
        run["updates"] >= UPDATES
        and all(
            chance_verdict(run[f"{name}_accuracy"], run[f"{name}_n"], rules) == HELD
            for name in ("seen", "unseen")
            if name == "seen" or run["size"] == 96
        )
        for _, run in runs.iterrows()
    )


# the three claims: which runs (size, method) each is judged on, and how it is put in the table
CLAIMS = {
    "PonderNet interpolates at 64 in about 3 steps": (64, "pondernet"),
    "PonderNet extrapolates to 49–96 almost perfectly, with about twice the steps": (96, "pondernet"),
    "ACT extrapolates at chance": (96, "act"),
}


def claim_table(runs, rules: PaperRules = PaperRules()):
    """Each claim's verdict for every seed of :data:`SEEDS` and over them (:func:`over_seeds`), from the
    shipped ``runs.csv`` (one row a run: ``size``, ``method``, ``seed``, ``updates``, and per range
    ``seen_``/``unseen_`` ``accuracy``, ``n`` and ``steps``). A seed not shipped, or short of
    :data:`UPDATES`, is not judged, and so is a claim with such a seed. Claim 2 reads PonderNet's mean
    step at 64 over its seeds, and is not judged while one of them is."""
    import pandas as pd

    def end(size: int, method: str, seed: int) -> dict | None:
        row = runs[(runs["size"] == size) & (runs["method"] == method) & (runs["seed"] == seed)]
        return row.iloc[0].to_dict() if len(row) else None

    interpolation = [end(64, "pondernet", seed) for seed in SEEDS]
    finished = [e for e in interpolation if e is not None and e["updates"] >= UPDATES]
    steps = sum(e["seen_steps"] for e in finished) / len(SEEDS) if len(finished) == len(SEEDS) else math.nan
    judge = {
        (64, "pondernet"): lambda e: interpolates(e, rules),
        (96, "pondernet"): lambda e: extrapolates(e, steps, rules),
        (96, "act"): lambda e: at_chance(e, rules),
    }
    rows = []
    for name, (size, method) in CLAIMS.items():
        ends = [end(size, method, seed) for seed in SEEDS]
        verdicts = [NOT_JUDGED if e is None else judge[size, method](e) for e in ends]
        rows.append(
            {
                "claim": name,
                **{f"seed {s}": v for s, v in zip(SEEDS, verdicts)},
                "verdict": over_seeds(verdicts),
            }
        )
    return pd.DataFrame(rows).set_index("claim")
