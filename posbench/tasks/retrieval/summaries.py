"""RULER's summaries of an accuracy-against-length curve (Hsieh et al. 2024, "RULER", section 4):
the averages weighted linearly towards the long or the short lengths, and an effective length
relative to the model's own accuracy at L_train (beside the fixed-threshold one of
``posbench.report.stats.effective_length``). Pure functions of ``{L_valid: accuracy}``.
"""

from __future__ import annotations

DEFAULT_RELATIVE_THRESHOLD = 0.8  # the Settings' default: rows written before these summaries carry none


def weighted_average(acc_by_length: dict[int, float | None], towards: str) -> float | None:
    """RULER's wAvg: the accuracies over the sorted lengths weighted 1, 2, ..., n (``towards="long"``,
    RULER's "inc") or n, ..., 1 (``"short"``, "dec"), over the weights' sum. None when a length has
    no accuracy (out of memory) or there is none."""
    if towards not in ("long", "short"):
        raise ValueError(f"weighted average: towards {towards!r} is not known; allowed: long, short")
    lengths = sorted(acc_by_length)
    if not lengths or any(acc_by_length[L] is None for L in lengths):
        return None
    n = len(lengths)
    weights = range(1, n + 1) if towards == "long" else range(n, 0, -1)
    return sum(w * acc_by_length[L] for w, L in zip(weights, lengths)) / (n * (n + 1) / 2)


def relative_effective_length(acc_by_length: dict[int, float | None], L_train: int, factor: float) -> int | None:
    """The longest length L >= L_train whose accuracy is >= ``factor`` x the accuracy at L_train at
    L and every length between (so L_train itself always passes); None without an accuracy at L_train."""
    base = acc_by_length.get(L_train)
    if base is None:
        return None
    best = L_train
    for length in sorted(L for L in acc_by_length if L > L_train):
        acc = acc_by_length[length]
        if acc is None or acc < factor * base:
            break
        best = length
    return best
