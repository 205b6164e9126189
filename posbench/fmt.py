"""How numbers read in every table, chart, progress line and comparison: one place, one style.

A metric's declaration (``posbench.tasks.Metric.fmt``) names one of the formatters in
``FORMATS``. Memory is always in binary units and says so (``977 MiB``, ``17.9 GiB``): allocators
and ``nvidia-smi`` count that way, and a table never mixes GB with GiB.
"""
from __future__ import annotations

import math
from typing import Callable, Optional

MISSING = "n/a"  # a case that ran but has no number for this metric


def _three_digits(x: float) -> str:
    # Three significant digits, keeping trailing zeros (26.0k, not 26k), so columns line up.
    return f"{x:.0f}" if abs(x) >= 100 else f"{x:.1f}" if abs(x) >= 10 else f"{x:.2f}"


def count(value: float) -> str:
    """Words/s, parameters and the like: 25.8k, 1.23M, 2.00G."""
    for limit, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k"), (1.0, "")):
        if abs(value) >= limit:
            return _three_digits(value / limit) + suffix
    return f"{value:.3g}"


def nbytes(value: float) -> str:
    """Memory in binary units (KiB, MiB, GiB), always named."""
    for limit, suffix in ((1 << 30, "GiB"), (1 << 20, "MiB"), (1 << 10, "KiB")):
        if abs(value) >= limit:
            return f"{_three_digits(value / limit)} {suffix}"
    return f"{value:.0f} B"


def plain(value: float) -> str:
    """Four significant digits: milliseconds, TFLOP/s, joules, anything without a better form."""
    return f"{value:.4g}"


def ppl(value: float) -> str:
    """Perplexity with two decimals, as the paper prints it."""
    return f"{value:.2f}"


def integer(value: float) -> str:
    return f"{value:.0f}"


FORMATS: dict[str, Callable[[float], str]] = {
    "count": count, "bytes": nbytes, "ms": plain, "plain": plain, "ppl": ppl, "int": integer,
}


def number(value, kind: str = "plain") -> str:
    """``value`` in the format ``kind`` (a key of ``FORMATS``); ``n/a`` for None or NaN."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return MISSING
    if isinstance(value, str):
        return value
    return FORMATS.get(kind, plain)(float(value))


def ratio(value: Optional[float]) -> str:
    """A ratio to a baseline: ``0.99x``."""
    return "—" if value is None else f"{value:.2f}x"


def interval(lo: float, hi: float, kind: str = "plain") -> str:
    """A confidence interval in the value's own format: ``[25.1k, 26.3k]``."""
    return f"[{number(lo, kind)}, {number(hi, kind)}]"


def value_with_ratio(value, kind: str, ratio_: Optional[float] = None,
                     ratio_interval: Optional[tuple[float, float]] = None) -> str:
    """A table cell: ``25.8k (0.99x)``; with an interval on the ratio ``25.8k (0.99x [0.97, 1.01])``."""
    text = number(value, kind)
    if ratio_ is None:
        return text
    inside = ratio(ratio_)
    if ratio_interval is not None:
        inside += f" [{ratio_interval[0]:.2f}, {ratio_interval[1]:.2f}]"
    return f"{text} ({inside})"


def status(name: str) -> str:
    """A failed case's cell: ``OOM`` for out of memory, the status itself otherwise."""
    return "OOM" if name == "oom" else name
