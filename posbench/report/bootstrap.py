"""Ratios of repeated measurements and their bootstrap confidence intervals (plain Python).

``paired_ratios``: round r of a method over round r of the baseline (drift shared by a round
cancels), ``bootstrap_interval`` the percentile interval of their median; ``window_clusters``:
paired windows, resampled rounds then windows; ``ratio_of_medians_interval``: the unpaired form
for ``compare``. docs/measuring-speed.md.
"""

from __future__ import annotations

import math
import random
import statistics
from collections.abc import Sequence
from typing import Union

Samples = Union[Sequence[float], Sequence[Sequence[float]]]  # noqa: UP007  (flat, or clusters: one list per round)

LEVEL = 0.95
RESAMPLES = 2000
SEED = 0  # fixed: the same rows always give the same interval (tables are reproducible)


def _number(x) -> float | None:
    if x is None or isinstance(x, bool) or not isinstance(x, (int, float)):
        return None  # a string or a list in a stored series is no number
    try:
        x = float(x)
    except OverflowError:
        return None
    return x if math.isfinite(x) else None


def paired_ratios(values: Sequence, base: Sequence) -> list[float]:
    """``values[r] / base[r]`` for every round r where both are positive finite numbers (a ratio
    of a zero or a negative number means nothing) and the quotient is finite.

    Both sequences are indexed by round (``None`` for a round that has no value).
    """
    out = []
    for v, b in zip(values, base):
        v, b = _number(v), _number(b)
        if v is not None and b is not None and v > 0 and b > 0 and math.isfinite(v / b):
            out.append(v / b)
    return out


def _round_value(entry) -> float | None:
    """A round's single value: the number itself, or the median of a paired-windows round."""
    if isinstance(entry, dict):
        values = [v for v in map(_number, entry.get("values") or []) if v is not None]
        return statistics.median(values) if values else None
    return _number(entry)


def is_windowed(values: Sequence) -> bool:
    """Whether ``values`` are paired-windows rounds (``{"group", "values"}`` entries)."""
    return any(isinstance(v, dict) for v in values)


def window_clusters(values: Sequence, base: Sequence) -> list[list[float]]:
    """Per round, the ratios ``values / base`` (module docstring): window by window when both
    rounds were measured in the same process (equal ``group``), else one ratio of the rounds'
    medians. Rounds where either side has no value are left out; plain numbers pair as numbers."""
    clusters = []
    for v, b in zip(values, base):
        if isinstance(v, dict) and isinstance(b, dict) and v.get("group") and v.get("group") == b.get("group"):
            ratios = paired_ratios(v.get("values") or [], b.get("values") or [])
        else:
            ratios = paired_ratios([_round_value(v)], [_round_value(b)])
        if ratios:
            clusters.append(ratios)
    return clusters


def value_clusters(values: Sequence) -> list[list[float]]:
    """The values themselves in the shape ``window_clusters`` gives ratios: a list per round."""
    out = []
    for entry in values:
        xs = [v for v in map(_number, entry.get("values") or [] if isinstance(entry, dict) else [entry]) if v is not None]
        if xs:
            out.append(xs)
    return out


def _clustered(xs: Samples) -> bool:
    return bool(xs) and all(isinstance(x, (list, tuple)) for x in xs)


def pooled(xs: Samples) -> list[float]:
    """Every value of ``xs``: the clusters joined, or the flat list as it is."""
    return [float(v) for group in xs for v in group] if _clustered(xs) else [float(v) for v in xs]


def median_of(xs: Samples) -> float:
    """The median of every value (clusters pooled)."""
    return statistics.median(pooled(xs))


def _resampled_median(rng: random.Random, xs: Samples, clustered: bool) -> float:
    if not clustered:
        return statistics.median(rng.choices(xs, k=len(xs)))
    pool: list[float] = []
    for group in rng.choices(xs, k=len(xs)):  # rounds with replacement ...
        pool += rng.choices(group, k=len(group))  # ... then windows within each drawn round
    return statistics.median(pool)


def _percentile(sorted_xs: list[float], q: float) -> float:
    """Linear interpolation between order statistics, q in [0, 1]."""
    pos = q * (len(sorted_xs) - 1)
    lo = math.floor(pos)
    hi = min(lo + 1, len(sorted_xs) - 1)
    return sorted_xs[lo] + (sorted_xs[hi] - sorted_xs[lo]) * (pos - lo)


def _central(draws: list[float], level: float) -> tuple[float, float]:
    """The central ``level`` interval of bootstrap draws (percentiles of the sorted draws)."""
    draws = sorted(draws)
    tail = (1 - level) / 2
    return _percentile(draws, tail), _percentile(draws, 1 - tail)


def bootstrap_interval(
    xs: Samples, level: float = LEVEL, resamples: int = RESAMPLES, seed: int = SEED
) -> tuple[float, float] | None:
    """Percentile-bootstrap interval of the median of ``xs``; None with fewer than 2 values.

    ``xs`` flat: values resampled with replacement. ``xs`` a list of clusters (a list of values
    per round): the two-level bootstrap of the module docstring.
    """
    clustered = _clustered(xs)
    xs = [[float(v) for v in group] for group in xs if len(group)] if clustered else [float(x) for x in xs]
    if len(pooled(xs)) < 2:
        return None
    if not 0 < level < 1:
        raise ValueError(f"level must be in (0, 1), got {level}")
    rng = random.Random(seed)
    return _central([_resampled_median(rng, xs, clustered) for _ in range(resamples)], level)


def paired_ratio(values: Sequence, base: Sequence) -> tuple[float | None, tuple[float, float] | None, int]:
    """(median of the per-round ratios, its bootstrap interval, number of pairs). Paired-windows
    rounds (``is_windowed``) pair window by window (``window_clusters``): the median over every
    pair, a cluster-bootstrap interval, and the number of pairs."""
    ratios: Samples = window_clusters(values, base) if is_windowed(values) or is_windowed(base) else paired_ratios(values, base)
    n = len(pooled(ratios))
    if not n:
        return None, None, 0
    return median_of(ratios), bootstrap_interval(ratios), n


def _clean(xs: Samples) -> tuple[Samples, bool, int]:
    """``xs``'s finite numbers (clusters left empty dropped), whether they are clusters, how many."""
    if _clustered(xs):
        groups = [g for g in ([v for v in map(_number, group) if v is not None] for group in xs) if g]
        return groups, True, sum(map(len, groups))
    flat = [v for v in map(_number, xs) if v is not None]
    return flat, False, len(flat)


def ratio_of_medians_interval(
    new: Samples, base: Samples, level: float = LEVEL, resamples: int = RESAMPLES, seed: int = SEED
) -> tuple[float, float] | None:
    """Interval of median(new) / median(base) for unpaired samples (two runs): each side is
    resampled independently (a side given as clusters, per round, with the two-level bootstrap).
    None unless both sides have at least 2 values."""
    (new, new_clustered, new_n), (base, base_clustered, base_n) = _clean(new), _clean(base)
    if new_n < 2 or base_n < 2:
        return None
    rng = random.Random(seed)
    ratios = []
    for _ in range(resamples):
        b = _resampled_median(rng, base, base_clustered)
        if b:
            ratios.append(_resampled_median(rng, new, new_clustered) / b)
    return _central(ratios, level) if ratios else None
