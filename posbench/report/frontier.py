"""The frontier: each method's quality against its cost at one target length and budget, the
Pareto front, and the verdict (which method is best, and is each difference beyond the seed-level
noise). Task-neutral: a task hands it ``Point``s. docs/tasks/frontier.md.

Separable: two methods differ beyond the seed-level noise when their 95% t intervals over seeds
(``posbench.report.stats.seed_interval``) do not overlap; otherwise "not separable". The verdict
also says in how many seeds (paired by seed) the better one won.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Optional

from posbench.report.stats import SEED_INTERVAL, seed_interval

NOT_SEPARABLE = "not separable"


@dataclass
class Point:
    """One (method, L_train) at one target length and budget: its quality over seeds and its cost."""

    method: str
    L_train: int
    by_seed: dict  # seed -> quality (None where that seed has none)
    cost: Optional[float]  # the cost axis: mean over seeds (e.g. training seconds per token)
    memory: Optional[float] = None  # peak training memory (bytes), mean over seeds
    extra: dict = field(default_factory=dict)

    @property
    def label(self) -> str:
        return f"{self.method}, L_train={self.L_train}"

    @property
    def interval(self) -> tuple[float, float, int, Optional[float], Optional[float]]:
        """(mean, std, seeds, low, high): the quality's 95% t interval over seeds."""
        return seed_interval(list(self.by_seed.values()))

    @property
    def quality(self) -> Optional[float]:
        mean, _, n, _, _ = self.interval
        return mean if n else None


def better(a: float, b: float, lower_is_better: bool) -> bool:
    return a < b if lower_is_better else a > b


def pareto_front(points: list[Point], lower_is_better: bool = True) -> list[Point]:
    """The points no other point dominates (at most the cost and at least as good a quality, and
    strictly better in one), by ascending cost. Points without a quality or a cost are left out."""
    usable = [p for p in points if p.quality is not None and p.cost is not None and math.isfinite(p.cost)]

    def dominates(a: Point, b: Point) -> bool:
        no_worse = a.cost <= b.cost and not better(b.quality, a.quality, lower_is_better)
        return no_worse and (a.cost < b.cost or better(a.quality, b.quality, lower_is_better))

    front = [p for p in usable if not any(dominates(q, p) for q in usable if q is not p)]
    return sorted(front, key=lambda p: (p.cost, p.quality if lower_is_better else -p.quality))


@dataclass
class Verdict:
    """The best point against one other: whether it is worse beyond the seed-level noise."""

    best: Point
    other: Point
    separable: bool
    wins: int  # seeds (paired by seed) where best was better
    paired: int  # seeds both have

    def text(self, fmt=lambda v: f"{v:.2f}", name: str = "") -> str:
        """``alibi beats sinusoidal, 3 of 3 seeds, ppl 11.60 [11.40, 11.80] vs 15.20 [14.70, 15.90]``,
        or ``not separable from alibi (2 of 3 seeds), ...``."""
        def shown(p: Point) -> str:
            mean, _, n, lo, hi = p.interval
            return fmt(mean) + (f" [{fmt(lo)}, {fmt(hi)}]" if lo is not None else "")

        numbers = f"{name + ' ' if name else ''}{shown(self.best)} vs {shown(self.other)}"
        if self.separable:
            return (f"worse beyond seed-level noise: {self.best.label} beats it, {self.wins} of {self.paired} "
                    f"seeds, {numbers}")
        return f"{NOT_SEPARABLE} from {self.best.label} ({self.wins} of {self.paired} seeds better), {numbers}"


def compare_points(best: Point, other: Point, lower_is_better: bool = True) -> Verdict:
    """``best`` against ``other``: separable when both have an interval over seeds and they do not
    overlap (``best``'s wholly better); a single seed is never separable."""
    _, _, _, blo, bhi = best.interval
    _, _, _, olo, ohi = other.interval
    if blo is None or olo is None:
        separable = False
    else:
        separable = bhi < olo if lower_is_better else blo > ohi
    seeds = [s for s in best.by_seed if isinstance(best.by_seed.get(s), (int, float))
             and isinstance(other.by_seed.get(s), (int, float))]
    wins = sum(better(best.by_seed[s], other.by_seed[s], lower_is_better) for s in seeds)
    return Verdict(best, other, separable, wins, len(seeds))


def verdicts(points: list[Point], lower_is_better: bool = True) -> tuple[Optional[Point], list[Verdict]]:
    """(the best point by mean quality, its verdict against every other point with a quality)."""
    usable = [p for p in points if p.quality is not None]
    if not usable:
        return None, []
    best = (min if lower_is_better else max)(usable, key=lambda p: p.quality)
    return best, [compare_points(best, p, lower_is_better) for p in usable if p is not best]


INTERVAL_NOTE = (f"Brackets: the {SEED_INTERVAL} of the mean; 'worse beyond seed-level noise' when the best "
                 f"point's interval and this one's do not overlap, else '{NOT_SEPARABLE}'; 'k of n seeds': the seeds "
                 "(paired by seed) in which the best point did better.")
