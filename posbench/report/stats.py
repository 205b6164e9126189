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
