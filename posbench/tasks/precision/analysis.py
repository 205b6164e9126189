"""How many distinct values an ALiBi bias keeps once it is cast to a low-precision dtype (the
precision half of SambaNova's "ALiBi Deep Dive", 2023), counted per head in windows of
positions. Why it collapses: docs/tasks/precision.md.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import pandas as pd
import torch

from posbench.core.alibi_math import slopes_tensor

# Name -> dtype for every type the study can cast to. The float8 types are looked up rather than
# named so that a torch without them still imports this module (they are simply not offered).
DTYPES: dict[str, torch.dtype] = {
    name: dt
    for name in ("float32", "float16", "bfloat16", "float8_e4m3fn", "float8_e5m2")
    if (dt := getattr(torch, name, None)) is not None
}
DEFAULT_DTYPES: tuple[str, ...] = tuple(DTYPES)

DtypeLike = str | torch.dtype


def resolve_dtype(dtype: DtypeLike) -> tuple[str, torch.dtype]:
    """(name, torch dtype) for a dtype name or object; ValueError names the allowed ones."""
    for name, dt in DTYPES.items():
        if dtype == name or dtype is dt:
            return name, dt
    raise ValueError(f"precision: unknown dtype {dtype!r}; allowed: {', '.join(DTYPES)}")


def check_int(name: str, value: Any, low: int, high: int | None = None) -> int:
    """One-line ValueError unless value is an int in [low, high]."""
    ok = isinstance(value, int) and not isinstance(value, bool) and value >= low
    if ok and high is not None:
        ok = value <= high
    if not ok:
        allowed = f">= {low}" if high is None else f"in {low}..{high}"
        raise ValueError(f"precision: {name} must be an integer {allowed}, got {value!r}")
    return value


def bloom_bias(n_heads: int, length: int, dtype: DtypeLike = "float32", factor: float = 1.0) -> torch.Tensor:
    """(H, L) ALiBi bias ``slope_h * position`` cast to ``dtype``, built as BLOOM builds it.

    The product (and the interpolation ``factor``, e.g. L_train / L_eval = 0.25 in the SambaNova
    study) is applied in float32 and only the finished tensor is cast, because that is where
    BLOOM loses the precision. BLOOM's bias is positive (``slope * key position``); softmax is
    shift-invariant per query, so it is equivalent to the paper's ``-slope * (i - j)``.
    """
    check_int("n_heads", n_heads, 1)
    check_int("length", length, 1)
    _, dt = resolve_dtype(dtype)
    slopes = slopes_tensor(n_heads)  # (H,) float32
    positions = torch.arange(length, dtype=torch.float32)  # (L,)
    bias = slopes[:, None] * positions[None, :]  # (H, L) float32
    if factor != 1.0:
        bias = bias * torch.tensor(float(factor), dtype=torch.float32)
    return bias.to(dt)


def window_bounds(length: int, window: int) -> list[tuple[int, int]]:
    """[start, end) of each window; the last one is shorter when window does not divide length."""
    check_int("length", length, 1)
    check_int("window", window, 1)
    return [(s, min(s + window, length)) for s in range(0, length, window)]


def _distinct_sorted(values: torch.Tensor) -> torch.Tensor:
    """(..., W) -> (...) number of distinct values along the last dim (W >= 1).

    Sort, then count the places where a value differs from its neighbour. NaN != NaN would make
    every NaN count on its own, so NaNs (sorted last) are treated as one value, like one bit
    pattern: the question is how many different biases a head can still express.
    """
    s = values.to(torch.float32).sort(dim=-1).values  # exact: every studied dtype fits in float32
    nan = s.isnan()
    step = (s[..., 1:] != s[..., :-1]) & ~(nan[..., 1:] & nan[..., :-1])  # (..., W-1)
    return step.sum(dim=-1) + 1


def count_distinct(bias_row_values: torch.Tensor, window: int = 1000) -> list[int] | list[list[int]]:
    """Distinct values in each window of ``window`` positions.

    ``bias_row_values``: (L,) one head's row -> list[int] (one count per window), or (H, L) ->
    list[list[int]] (one list per head). The last window holds ``L % window`` positions when
    window does not divide L; :func:`window_bounds` gives the extents. All full windows are counted
    in one batched sort, the partial tail in a second.
    """
    check_int("window", window, 1)
    x = torch.as_tensor(bias_row_values)
    if x.dim() not in (1, 2) or x.shape[-1] < 1:
        raise ValueError(f"precision: bias must have shape (L,) or (H, L) with L >= 1, got {tuple(x.shape)}")
    rows = x if x.dim() == 2 else x[None]  # (H, L)
    n_heads, length = rows.shape
    n_full = length // window
    parts = []
    if n_full:
        full = rows[:, : n_full * window].reshape(n_heads, n_full, window)  # (H, n_full, W)
        parts.append(_distinct_sorted(full))  # (H, n_full)
    if length % window:
        parts.append(_distinct_sorted(rows[:, n_full * window :])[:, None])  # (H, 1)
    counts = torch.cat(parts, dim=1).tolist()  # (H, n_windows)
    return counts if x.dim() == 2 else counts[0]


def _overflow(bias32: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """(H, L) bool: float32 values beyond the dtype's largest finite value.

    They are not lost quietly: float8_e4m3fn saturates at 448 on this cast (torch 2.13) and
    float8_e5m2 becomes inf, so a small count there means range, not resolution, ran out.
    """
    return bias32.abs() > torch.finfo(dtype).max


def _window_table(
    n_heads: int, length: int, window: int, dtypes: Sequence[str], heads: Sequence[int], factor: float
) -> pd.DataFrame:
    """Long DataFrame: one row per (dtype, head, window) for the given heads."""
    bounds = window_bounds(length, window)
    bias32 = bloom_bias(n_heads, length, "float32", factor)  # (H, L)
    idx = list(heads)
    records = []
    for name in dtypes:
        dt = DTYPES[name]
        counts = count_distinct(bias32.to(dt)[idx], window)  # (len(heads), n_windows)
        over = _overflow(bias32[idx], dt)  # (len(heads), L)
        for row, head in enumerate(idx):
            for (start, end), distinct in zip(bounds, counts[row]):
                records.append(
                    {
                        "dtype": name,
                        "head": head,
                        "window_start": start,
                        "window_end": end,  # exclusive
                        "distinct": int(distinct),
                        "window_size": end - start,
                        "overflow": int(over[row, start:end].sum()),
                    }
                )
    return pd.DataFrame.from_records(records)


@dataclass
class PrecisionReport:
    """What :func:`analyze` measured. ``window_end`` is exclusive; ``window_size`` < window marks
    the partial last window; ``overflow`` counts positions beyond the dtype's range."""

    settings: dict[str, Any]
    counts: pd.DataFrame  # chosen heads, every window, bias at factor 1
    last_window: pd.DataFrame  # every head, last window only, factor 1
    scaled_counts: pd.DataFrame  # as counts, bias multiplied by factor
    scaled_last_window: pd.DataFrame  # as last_window, bias multiplied by factor
    notes: list[str] = field(default_factory=list)


def check_settings(n_heads, length, window, dtypes, heads) -> tuple[list[str], list[int]]:
    check_int("n_heads", n_heads, 1)
    check_int("length", length, 1)
    check_int("window", window, 1)
    names = [resolve_dtype(d)[0] for d in dtypes]
    if not names:
        raise ValueError(f"precision: dtypes is empty; allowed: {', '.join(DTYPES)}")
    idx = [check_int("head", h, 0, n_heads - 1) for h in heads]
    return names, idx


def analyze(
    n_heads: int = 32,
    length: int = 8192,
    window: int = 1000,
    dtypes: Iterable[DtypeLike] = DEFAULT_DTYPES,
    heads: Sequence[int] = (0, 15, 31),
    factor: float = 0.25,
) -> PrecisionReport:
    """Distinct-value counts per dtype and window (SambaNova's table), at factor 1 and ``factor``.

    Defaults are the study's: BLOOM-7B's 32 heads, 8192 positions, windows of 1000, and the
    2048 -> 8192 interpolation factor 0.25.
    """
    names, idx = check_settings(n_heads, length, window, dtypes, heads)
    if not (isinstance(factor, (int, float)) and math.isfinite(factor) and factor > 0):
        raise ValueError(f"precision: factor must be a finite number > 0, got {factor!r}")
    last_start = window_bounds(length, window)[-1][0]
    all_heads = range(n_heads)

    def last_only(table: pd.DataFrame) -> pd.DataFrame:
        return table[table["window_start"] == last_start].reset_index(drop=True)

    # The last-window tables need every head; counting just that slice would be cheaper, but
    # going through the same path keeps one definition of a window.
    settings = {"n_heads": n_heads, "length": length, "window": window, "heads": idx, "factor": float(factor), "dtypes": names}
    notes = []
    if length % window:
        notes.append(f"last window {last_start}..{length - 1} is partial: {length % window} of {window} positions")
    return PrecisionReport(
        settings=settings,
        counts=_window_table(n_heads, length, window, names, idx, 1.0),
        last_window=last_only(_window_table(n_heads, length, window, names, all_heads, 1.0)),
        scaled_counts=_window_table(n_heads, length, window, names, idx, factor),
        scaled_last_window=last_only(_window_table(n_heads, length, window, names, all_heads, factor)),
        notes=notes,
    )


def _markdown(header: list[str], rows: list[list[Any]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join(" --- " for _ in header) + "|"]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def _window_label(start: int, end: int, window: int) -> str:
    label = f"{start}..{end - 1}"
    return label if end - start == window else f"{label} (partial, {end - start})"


def format_tables(report: PrecisionReport) -> str:
    """Markdown: per chosen head a windows x dtypes table, the factor check, and the last window
    for every head (min / median / max across heads, then the per-head list)."""
    s = report.settings
    names, window = s["dtypes"], s["window"]
    out = [
        f"ALiBi bias, {s['n_heads']} heads x {s['length']} positions, distinct values per window of"
        f" {window} (BLOOM build: float32 slope * position, then cast)."
    ]
    out += [f"Note: {n}." for n in report.notes]

    def cell(row: pd.Series) -> str:
        # Overflow is shown in the cell because a count it produced measures range, not precision.
        return f"{row.distinct} ({row.overflow} over range)" if row.overflow else str(row.distinct)

    for head in s["heads"]:
        t = report.counts[report.counts["head"] == head]
        rows = []
        for (start, end), grp in t.groupby(["window_start", "window_end"], sort=True):
            by_dtype = {r.dtype: cell(r) for r in grp.itertuples()}
            rows.append([_window_label(start, end, window)] + [by_dtype[n] for n in names])
        out += ["", f"### Head {head}", "", _markdown(["positions"] + names, rows)]

    # Scaling check: does multiplying by the factor change any count (chosen heads, all windows,
    # plus every head's last window)?
    both = pd.concat([report.counts, report.last_window]).drop_duplicates(["dtype", "head", "window_start"])
    both_scaled = pd.concat([report.scaled_counts, report.scaled_last_window]).drop_duplicates(["dtype", "head", "window_start"])
    merged = both.merge(both_scaled, on=["dtype", "head", "window_start"], suffixes=("", "_scaled"))
    rows = []
    for name in names:
        m = merged[merged["dtype"] == name]
        diff = (m["distinct_scaled"] - m["distinct"]).abs()
        rows.append([name, len(m), int((diff > 0).sum()), int(diff.max())])
    out += [
        "",
        f"### Bias x {s['factor']:g}: counts that change",
        "",
        _markdown(["dtype", "windows compared", "changed", "max abs change"], rows),
    ]

    lw = report.last_window
    start, end = int(lw["window_start"].iloc[0]), int(lw["window_end"].iloc[0])
    rows = []
    for name in names:
        c = lw[lw["dtype"] == name].sort_values("head")["distinct"]
        rows.append([name, int(c.min()), f"{c.median():g}", int(c.max()), ", ".join(map(str, c))])
    out += [
        "",
        f"### Last window, positions {_window_label(start, end, window)}, every head",
        "",
        _markdown(["dtype", "min", "median", "max", f"heads 0..{s['n_heads'] - 1}"], rows),
    ]
    return "\n".join(out) + "\n"
