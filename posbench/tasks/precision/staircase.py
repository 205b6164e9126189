"""Staircase charts of the precision study: one ALiBi head's bias after the cast, one line per
dtype. ``staircase_chart`` writes one while a ``bias_counts`` case runs; ``report_charts`` redraws
them for ``bench.py report`` from the settings the rows stored.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable

import numpy as np
import torch

from posbench.core.alibi_math import slopes_tensor
from posbench.report.charts import line_style, staggered
from posbench.tasks.precision.analysis import DTYPES, DtypeLike, bloom_bias, check_int, check_settings

# The chart leaves float8 out by default: its treads are hundreds of bias units wide at 8192 and
# float8_e4m3fn saturates at 448, so those lines would flatten the y-axis and hide the staircase.
CHART_DTYPES: tuple[str, ...] = ("float32", "float16", "bfloat16")


@dataclass
class StaircaseChart:
    """A drawn staircase: the Figure (still open, so its Axes can be inspected), the files written,
    and the arrays plotted, keyed by dtype name."""

    figure: Any  # matplotlib.figure.Figure
    png: Path
    svg: Path
    positions: np.ndarray  # (last,)
    values: dict[str, np.ndarray]  # dtype -> (last,) bias after the cast, as float64

    @property
    def paths(self) -> list[Path]:
        return [self.png, self.svg]


def staircase_chart(
    n_heads: int,
    length: int,
    head: int,
    path: str | Path,
    last: int = 192,
    dtypes: Iterable[DtypeLike] = CHART_DTYPES,
) -> StaircaseChart:
    """Step plot of one head's bias over its last ``last`` positions, one line per dtype.

    The picture SambaNova uses to show the collapse: float32 is a straight ramp, the narrow types
    flat treads. ``path`` names the files; its suffix is replaced by .png and .svg.
    """
    fig, positions, values = staircase_figure(n_heads, length, head, last, dtypes)
    base = Path(path)
    base.parent.mkdir(parents=True, exist_ok=True)
    png, svg = base.with_suffix(".png"), base.with_suffix(".svg")
    fig.savefig(png, dpi=120)
    fig.savefig(svg)
    return StaircaseChart(figure=fig, png=png, svg=svg, positions=positions, values=values)


def staircase_figure(
    n_heads: int, length: int, head: int, last: int = 192, dtypes: Iterable[DtypeLike] = CHART_DTYPES
) -> tuple[Any, np.ndarray, dict[str, np.ndarray]]:
    """The staircase of :func:`staircase_chart`, not written: (Figure, positions, values by dtype).

    Each dtype keeps its own colour, marker and line style (``posbench.report.charts.line_style``): where
    float16 still matches float32 the two lines coincide, and both must stay visible.
    """
    # Figure + its own Agg canvas rather than pyplot: no global backend switch, no figure registry
    # to leak into, and it works headless.
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    names, (head,) = check_settings(n_heads, length, 1, dtypes, [head])
    check_int("last", last, 1)
    last = min(last, length)
    bias32 = bloom_bias(n_heads, length, "float32")[head, length - last :]  # (last,)
    positions = np.arange(length - last, length)
    values = {n: bias32.to(DTYPES[n]).to(torch.float64).numpy() for n in names}

    fig = Figure(figsize=(8, 4.5), layout="constrained")
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    for index, (name, v) in enumerate(values.items()):
        ax.step(positions, v, where="post", label=name, linewidth=1.2, markersize=6, markerfacecolor="none",
                markevery=staggered(index, len(values), last), gid=f"method:{name}", **line_style(index))
    slope = slopes_tensor(n_heads)[head].item()
    ax.set_title(
        f"ALiBi bias of head {head} (slope {slope:.3g}) after the cast, last {last} of {length} positions"
    )
    ax.set_xlabel("key position")
    ax.set_ylabel("bias value (slope x position)")
    ax.legend(title="dtype")
    ax.grid(alpha=0.3)
    return fig, positions, values


def report_charts(rows: list[dict]) -> list[tuple[str, str, Any]]:
    """The staircases of the ``bias_counts`` rows behind a report table, redrawn from each row's
    stored settings (the bias is a pure function of them): one per chosen head, once per distinct
    setting (every ALiBi method has the same bias). ``(file stem, title, Figure)`` pairs, for
    ``bench.py report`` (declared in ``posbench.tasks.precision.METRICS``)."""
    out, seen = [], set()
    for r in rows:
        series = r.get("series") or {}
        s = series.get("settings") if isinstance(series, dict) else None
        if r.get("status") != "ok" or not isinstance(s, dict):
            continue
        for chart in series.get("charts") if isinstance(series.get("charts"), list) else []:
            if not _drawable(s, chart):
                continue  # a stored row may hold anything: what cannot be redrawn within bounds is left out
            key = (s["n_heads"], s["length"], chart["head"], tuple(chart["dtypes"]))
            if key in seen:
                continue
            seen.add(key)
            fig, _, _ = staircase_figure(s["n_heads"], s["length"], chart["head"], dtypes=chart["dtypes"])
            out.append((f"precision-staircase-head{chart['head']}-{s['n_heads']}x{s['length']}",
                        f"ALiBi bias staircase, head {chart['head']} of {s['n_heads']}", fig))
    return out


MAX_BIAS_VALUES = 1 << 26  # n_heads x length of a redrawn bias (256 MB of float32 at most)


def _drawable(settings: dict, chart) -> bool:
    """Whether a stored chart can be redrawn: whole numbers in range (heads x positions within
    ``MAX_BIAS_VALUES``), a head among them, dtypes this module knows."""
    def whole(x, low=1):
        return isinstance(x, int) and not isinstance(x, bool) and low <= x <= MAX_BIAS_VALUES

    n_heads, length = settings.get("n_heads"), settings.get("length")
    return (whole(n_heads) and whole(length) and n_heads * length <= MAX_BIAS_VALUES and isinstance(chart, dict)
            and whole(chart.get("head"), 0) and chart["head"] < n_heads and isinstance(chart.get("dtypes"), list)
            and bool(chart["dtypes"]) and all(isinstance(d, str) and d in DTYPES for d in chart["dtypes"]))
