"""Small statistics helpers for accuracy-style metrics.

Accuracies are counts of outcomes (``correct`` of ``total``), so their uncertainty is binomial.
The Wilson score interval (Wilson 1927) is used rather than the normal ("Wald") one because it
stays inside [0, 1] and keeps close to its nominal coverage at 0%, 100% and small samples, which
is exactly where accuracies of long-range probes live.
"""

from __future__ import annotations

import math

Z95 = 1.959963984540054  # two-sided 95% quantile of the standard normal


def wilson_interval(correct: int, total: int, z: float = Z95) -> tuple[float, float]:
    """(low, high) Wilson score interval for ``correct`` successes out of ``total`` trials.

    ``total == 0`` gives the uninformative (0, 1).
    """
    if total < 0 or correct < 0 or correct > total:
        raise ValueError(f"wilson_interval: need 0 <= correct <= total, got correct={correct}, total={total}")
    if total == 0:
        return 0.0, 1.0
    p = correct / total
    z2 = z * z
    centre = (p + z2 / (2 * total)) / (1 + z2 / total)
    half = z / (1 + z2 / total) * math.sqrt(p * (1 - p) / total + z2 / (4 * total * total))
    # Clamp rounding noise only: at p = 0 (or 1) the low (high) end is 0 (1) exactly, and the
    # interval always holds p (charts draw error bars as p - low and high - p).
    return max(0.0, min(p, centre - half)), min(1.0, max(p, centre + half))


def effective_length(acc_by_length: dict[int, float | None], threshold: float) -> int:
    """The longest length L such that accuracy >= ``threshold`` at every length <= L (RULER's
    "effective length"); 0 when the shortest length already falls below it. A missing accuracy
    (None, e.g. out of memory) ends the run like a failure."""
    best = 0
    for length in sorted(acc_by_length):
        acc = acc_by_length[length]
        if acc is None or acc < threshold:
            break
        best = length
    return best


def pooled_counts(cells, key: str) -> dict:
    """{cell[key]: (correct, total, every cell ok)}, sorted by key: the outcome counts of the cells
    that share a key (a length) summed, so merged seeds and runs pool their samples. A cell whose
    ``status`` is not ok (out of memory) marks its key as failed."""
    counts: dict = {}
    for c in cells:
        entry = counts.setdefault(c[key], [0, 0, True])
        entry[0] += c["correct"]
        entry[1] += c["total"]
        entry[2] &= c.get("status", "ok") == "ok"
    return {k: tuple(v) for k, v in sorted(counts.items())}


def accuracy_metrics(counts: dict) -> tuple[dict, dict]:
    """(metrics, accuracy) of ``pooled_counts``: ``acc@k``, ``acc_lo@k``, ``acc_hi@k`` (Wilson 95%)
    per key, and {key: accuracy}; a failed or empty key has None."""
    metrics, acc = {}, {}
    for k, (correct, total, ok) in counts.items():
        acc[k] = correct / total if ok and total else None
        lo, hi = wilson_interval(correct, total) if ok and total else (None, None)
        metrics.update({f"acc@{k}": acc[k], f"acc_lo@{k}": lo, f"acc_hi@{k}": hi})
    return metrics, acc


# Two-sided 95% quantiles of Student's t for 1..30 degrees of freedom (any statistics table).
T975 = (
    12.706,
    4.303,
    3.182,
    2.776,
    2.571,
    2.447,
    2.365,
    2.306,
    2.262,
    2.228,
    2.201,
    2.179,
    2.160,
    2.145,
    2.131,
    2.120,
    2.110,
    2.101,
    2.093,
    2.086,
    2.080,
    2.074,
    2.069,
    2.064,
    2.060,
    2.056,
    2.052,
    2.048,
    2.045,
    2.042,
)
SEED_INTERVAL = "95% t interval over seeds"  # what a seed interval is, for table notes


def t975(df: int) -> float:
    """Student's t two-sided 95% quantile with ``df`` degrees of freedom (beyond 30: the
    Cornish-Fisher expansion around the normal's, within 0.001)."""
    if df < 1:
        raise ValueError(f"t975: need at least 1 degree of freedom, got {df}")
    if df <= len(T975):
        return T975[df - 1]
    z = Z95
    return z + (z**3 + z) / (4 * df) + (5 * z**5 + 16 * z**3 + 3 * z) / (96 * df * df)


def seed_interval(values) -> tuple[float, float, float, float | None, float | None]:
    """(mean, sample std, n, low, high) of per-seed values, finite ones only: the 95% t interval
    of the mean over seeds, mean ± t(n-1) std / sqrt(n). A t interval rather than a bootstrap:
    with 2 to 5 seeds a bootstrap has too few distinct resamples to give a usable interval, and
    the t interval is exact for normal seed-to-seed noise. One seed: no interval (None, None);
    no finite value: mean and std NaN."""
    xs = [float(v) for v in values if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)]
    n = len(xs)
    if n == 0:
        return math.nan, math.nan, 0, None, None
    mean = sum(xs) / n
    if n == 1:
        return mean, 0.0, 1, None, None
    std = math.sqrt(sum((x - mean) ** 2 for x in xs) / (n - 1))
    half = t975(n - 1) * std / math.sqrt(n)
    return mean, std, n, mean - half, mean + half


def seed_accuracies(cells, key: str) -> dict:
    """{cell[key]: {seed: accuracy or None}} of the cells that name their training ``seed`` (several
    seeds' cells in one row or across rows): each seed's counts at a key pooled; None where a cell
    of that seed and key failed or holds no outcome."""
    counts: dict = {}
    for c in cells:
        if isinstance(c.get("seed"), int) and not isinstance(c.get("seed"), bool):
            entry = counts.setdefault(c[key], {}).setdefault(c["seed"], [0, 0, True])
            entry[0] += c["correct"]
            entry[1] += c["total"]
            entry[2] &= c.get("status", "ok") == "ok"
    return {
        k: {seed: (a / b if ok and b else None) for seed, (a, b, ok) in sorted(by.items())} for k, by in sorted(counts.items())
    }
