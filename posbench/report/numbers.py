"""How numbers read in every table, chart, progress line and comparison: one place, one style.

A metric's ``fmt`` names a formatter of ``FORMATS``; memory is always in GiB (2^30 bytes).
"""

from __future__ import annotations

import math
from collections.abc import Callable

MISSING = "n/a"  # a case that ran but has no number for this metric
HUGE = 1e15  # from here on every format writes an exponent: no number prints as 300 digits


def _three_digits(x: float) -> str:
    # Three significant digits, keeping trailing zeros (26.0k, not 26k), so columns line up.
    if not math.isfinite(x) or abs(x) >= HUGE:
        return f"{x:.3g}"
    return f"{x:.0f}" if abs(x) >= 100 else f"{x:.1f}" if abs(x) >= 10 else f"{x:.2f}"


def count(value: float) -> str:
    """Words/s, parameters and the like: 25.8k, 1.23M, 2.00G."""
    if not math.isfinite(value) or abs(value) >= HUGE:
        return f"{value:.3g}"
    for limit, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k"), (1.0, "")):
        if abs(value) >= limit:
            return _three_digits(value / limit) + suffix
    return f"{value:.3g}"


GIB = float(1 << 30)  # bytes per GiB


def gib(value: float) -> str:
    """A GiB count without its unit, three significant digits: 17.9, 0.679, 0.000244, 1.53e-05."""
    x = float(value)
    if x == 0 or not math.isfinite(x):
        return f"{x:g}"
    if abs(x) >= 1:
        return _three_digits(x)
    if abs(x) < 1e-4:  # under ~100 KiB: a run of zeros reads worse than an exponent
        return f"{x:.2e}"
    return f"{x:.{2 - math.floor(math.log10(abs(x)))}f}"


def nbytes(value: float) -> str:
    """Memory, always in GiB (2^30 bytes) and always named: ``17.9 GiB``, ``0.679 GiB``.

    One unit everywhere (console, Markdown, HTML, charts), so two numbers never need converting
    to be compared.
    """
    return f"{gib(value / GIB)} GiB"


def plain(value: float) -> str:
    """Four significant digits: milliseconds, TFLOP/s, joules, anything without a better form."""
    return f"{value:.4g}"


def ppl(value: float) -> str:
    """Perplexity with two decimals, as the paper prints it."""
    return f"{value:.3g}" if not math.isfinite(value) or abs(value) >= HUGE else f"{value:.2f}"


def integer(value: float) -> str:
    return f"{value:.3g}" if not math.isfinite(value) or abs(value) >= HUGE else f"{value:.0f}"


FORMATS: dict[str, Callable[[float], str]] = {
    "count": count,
    "bytes": nbytes,
    "ms": plain,
    "plain": plain,
    "ppl": ppl,
    "int": integer,
}


def number(value, kind: str = "plain") -> str:
    """``value`` in the format ``kind`` (a key of ``FORMATS``); ``n/a`` for None or NaN."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return MISSING
    if isinstance(value, str):
        return value
    try:
        value = float(value)
    except (TypeError, ValueError, OverflowError):  # not a number a table can show
        return MISSING
    return FORMATS.get(kind, plain)(value)


def ratio(value: float | None, digits: int = 2) -> str:
    """A ratio to a baseline: ``0.99x`` (``digits`` decimals; a ratio of 10,000 or more, or under
    0.01, with an exponent: ``1e+300x``)."""
    if value is None:
        return "—"
    if not math.isfinite(value) or value and not 0.01 <= abs(value) < 1e4:
        return f"{value:.3g}x"
    return f"{value:.{digits}f}x"


def ratio_of(value, base) -> float | None:
    """``value / base`` when both are positive finite numbers and the quotient is finite, else None:
    a ratio of a zero, a negative number or an overflow means nothing (tables show ``n/a``,
    compare leaves it out)."""
    try:
        v, b = float(value), float(base)
    except (TypeError, ValueError, OverflowError):
        return None
    if not (math.isfinite(v) and math.isfinite(b) and v > 0 and b > 0):
        return None
    r = v / b
    return r if math.isfinite(r) and r > 0 else None


def interval(lo: float, hi: float, kind: str = "plain") -> str:
    """A confidence interval in the value's own format: ``[25.1k, 26.3k]``."""
    return f"[{number(lo, kind)}, {number(hi, kind)}]"


def interval_text(ratio_: float, ratio_interval: tuple[float, float]) -> str:
    """A ratio's 95% interval as a table shows it, read back exactly to the digits printed:
    ``±0.01`` (the true half-width) where the interval is symmetric about the printed ratio, that
    is where ratio ± half-width, printed, gives both printed bounds; else the bounds themselves,
    ``[0.71, 1.41]`` (an asymmetric interval is never shown as a ``±``)."""
    lo, hi = ratio_interval
    half = (hi - lo) / 2
    if not all(math.isfinite(x) and abs(x) < 1e4 for x in (ratio_, lo, hi)):
        return f"[{lo:.3g}, {hi:.3g}]"
    r, h = round(ratio_ * 100), round(half * 100)  # in hundredths, as printed
    if r - h == round(lo * 100) and r + h == round(hi * 100):
        return f"±{half:.2f}"
    return f"[{lo:.2f}, {hi:.2f}]"


UNPAIRED = "unpaired"  # a ratio of values timed apart (another process, round or run): no paired claim


def ratio_text(ratio_: float, ratio_interval: tuple[float, float] | None = None, unpaired: bool = False) -> str:
    """``0.99x``, ``0.99x ±0.01``, ``0.84x [0.71, 1.41]`` (``interval_text``), or ``1.24x ±0.38 unpaired``."""
    inside = ratio(ratio_)
    if ratio_interval is not None:
        inside += " " + interval_text(ratio_, ratio_interval)
    return f"{inside} {UNPAIRED}" if unpaired else inside


def value_with_ratio(
    value, kind: str, ratio_: float | None = None, ratio_interval: tuple[float, float] | None = None, unpaired: bool = False
) -> str:
    """A table cell: ``25.8k (0.99x)``; with an interval on the ratio ``25.8k (0.99x ±0.01)`` or,
    asymmetric, ``25.8k (0.84x [0.71, 1.41])``; timed apart from the baseline ``25.8k (1.24x ±0.38 unpaired)``."""
    text = number(value, kind)
    if ratio_ is None:
        return text
    return f"{text} ({ratio_text(ratio_, ratio_interval, unpaired)})"


def status(name: str) -> str:
    """A failed case's cell: ``OOM`` for out of memory, the status itself otherwise."""
    return "OOM" if name == "oom" else name
