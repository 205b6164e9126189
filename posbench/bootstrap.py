"""Ratios of repeated measurements and their bootstrap confidence intervals.

A run with ``rounds: k`` times every method of a grid point once per round, round-robin, so
round r of a method and round r of the baseline were measured minutes apart at most, under
the same machine drift. ``paired_ratios`` divides them round by round; the median of those
ratios is the cell's ratio, and ``bootstrap_interval`` its 95% percentile-bootstrap interval
(resample the ratios with replacement, take the median of each resample, keep the middle 95%).
Drift that hits both methods of a round alike cancels in the ratio, so the interval is narrow
even when absolute speeds wander by 20%.

``ratio_of_medians_interval`` is the unpaired form for ``bench.py compare``: two runs were not
measured at the same moments, so each side is resampled on its own.

Plain Python (no numpy): rows, tables and compare use it, and runs have a handful of rounds.
"""
from __future__ import annotations

import math
import random
import statistics
from typing import Optional, Sequence

LEVEL = 0.95
RESAMPLES = 2000
SEED = 0  # fixed: the same rows always give the same interval (tables are reproducible)


def _number(x) -> Optional[float]:
    if x is None or isinstance(x, bool):
        return None
    x = float(x)
    return x if math.isfinite(x) else None


def paired_ratios(values: Sequence, base: Sequence) -> list[float]:
    """``values[r] / base[r]`` for every round r where both are finite numbers and base != 0.

    Both sequences are indexed by round (``None`` for a round that has no value).
    """
    out = []
    for v, b in zip(values, base):
        v, b = _number(v), _number(b)
        if v is not None and b:
            out.append(v / b)
    return out


def _percentile(sorted_xs: list[float], q: float) -> float:
    """Linear interpolation between order statistics, q in [0, 1]."""
    pos = q * (len(sorted_xs) - 1)
    lo = math.floor(pos)
    hi = min(lo + 1, len(sorted_xs) - 1)
    return sorted_xs[lo] + (sorted_xs[hi] - sorted_xs[lo]) * (pos - lo)


def bootstrap_interval(xs: Sequence[float], level: float = LEVEL, resamples: int = RESAMPLES,
                       seed: int = SEED) -> Optional[tuple[float, float]]:
    """Percentile-bootstrap interval of the median of ``xs``; None with fewer than 2 values."""
    xs = [float(x) for x in xs]
    if len(xs) < 2:
        return None
    if not 0 < level < 1:
        raise ValueError(f"level must be in (0, 1), got {level}")
    rng = random.Random(seed)
    n = len(xs)
    medians = sorted(statistics.median(rng.choices(xs, k=n)) for _ in range(resamples))
    tail = (1 - level) / 2
    return _percentile(medians, tail), _percentile(medians, 1 - tail)


def paired_ratio(values: Sequence, base: Sequence) -> tuple[Optional[float], Optional[tuple[float, float]], int]:
    """(median of the per-round ratios, its bootstrap interval, number of pairs)."""
    ratios = paired_ratios(values, base)
    if not ratios:
        return None, None, 0
    return statistics.median(ratios), bootstrap_interval(ratios), len(ratios)


def ratio_of_medians_interval(new: Sequence, base: Sequence, level: float = LEVEL, resamples: int = RESAMPLES,
                              seed: int = SEED) -> Optional[tuple[float, float]]:
    """Interval of median(new) / median(base) for unpaired samples (two runs): each side is
    resampled independently. None unless both sides have at least 2 values."""
    new = [v for v in map(_number, new) if v is not None]
    base = [v for v in map(_number, base) if v is not None]
    if len(new) < 2 or len(base) < 2:
        return None
    rng = random.Random(seed)
    ratios = []
    for _ in range(resamples):
        b = statistics.median(rng.choices(base, k=len(base)))
        if b:
            ratios.append(statistics.median(rng.choices(new, k=len(new))) / b)
    if not ratios:
        return None
    ratios.sort()
    tail = (1 - level) / 2
    return _percentile(ratios, tail), _percentile(ratios, 1 - tail)


def half_width(ratio: float, interval: tuple[float, float]) -> float:
    """The ``±`` a table shows: the larger distance from the ratio to either bound."""
    return max(ratio - interval[0], interval[1] - ratio)
