"""The charts of a docs/results page (issue 69): the report's own charts for one run (each task's
paper-style curves, speed and memory against L with their intervals, accuracy per probe, the
frontier), drawn by ``posbench.report.sections`` as ``bench.py report`` draws them, and written
beside the pages as ``charts/<name>.svg`` with the data each is drawn from as ``charts/<name>.json``.

The SVG is deterministic for one matplotlib version (``svg.hashsalt`` fixed, no date); the JSON
is what the regeneration test compares, since glyph outlines may differ between matplotlib
versions while the numbers may not: every plotted line (its ``gid``, x and y), every bar (its
``gid``, centre and height), every error bar's ends, with the axes' title and labels.
"""

from __future__ import annotations

import io
import json
from dataclasses import dataclass
from pathlib import Path

from posbench.report.names import slug

CHARTS_DIR = "charts"
HASH_SALT = "posbench-docs-results"  # the SVG's element ids, the same on every rebuild


@dataclass(frozen=True)
class PageChart:
    """One chart of a page: ``name`` (the files' stem under ``charts/``), its title, SVG and data."""

    name: str
    title: str
    svg: bytes
    data: str

    @property
    def svg_path(self) -> str:
        return f"{CHARTS_DIR}/{self.name}.svg"

    @property
    def data_path(self) -> str:
        return f"{CHARTS_DIR}/{self.name}.json"


def _number(value) -> float | None:
    value = float(value)
    return round(value, 9) if value == value and abs(value) != float("inf") else None


def figure_data(fig) -> dict:
    """The numbers ``fig`` draws, per axes: lines and bars by ``gid`` (``method:<name>``, ...),
    error bars' segments, and the axes' title and labels (what a reader of the chart sees)."""
    from matplotlib.collections import LineCollection
    from matplotlib.patches import Rectangle

    axes = []
    for ax in fig.axes:
        lines = [
            {"gid": line.get_gid(), "x": [_number(v) for v in line.get_xdata()], "y": [_number(v) for v in line.get_ydata()]}
            for line in ax.get_lines()
            if line.get_gid()
        ]
        bars = [
            {"gid": p.get_gid(), "x": _number(p.get_x() + p.get_width() / 2), "height": _number(p.get_height())}
            for p in ax.patches
            if isinstance(p, Rectangle) and p.get_gid()
        ]
        errors = [
            {"gid": c.get_gid(), "segments": [[[_number(v) for v in point] for point in seg] for seg in c.get_segments()]}
            for c in ax.collections
            if isinstance(c, LineCollection) and c.get_gid()
        ]
        axes.append(
            {
                "title": ax.get_title(),
                "xlabel": ax.get_xlabel(),
                "ylabel": ax.get_ylabel(),
                "xscale": ax.get_xscale(),
                "yscale": ax.get_yscale(),
                "lines": lines,
                "bars": bars,
                "errorbars": errors,
            }
        )
    return {"axes": axes}


def svg_bytes(fig) -> bytes:
    """``fig`` as SVG bytes that a rebuild with the same matplotlib writes again byte for byte."""
    import matplotlib

    buffer = io.BytesIO()
    with matplotlib.rc_context({"svg.hashsalt": HASH_SALT}):
        fig.savefig(buffer, format="svg", metadata={"Date": None})
    return buffer.getvalue()


def run_charts(run_dir: Path, prefix: str, find_task=None) -> list[PageChart]:
    """Every chart ``bench.py report`` draws for the run in ``run_dir``, named ``<prefix>-<stem>``
    (the page's and the run's names first, so charts of two pages or runs never share a file)."""
    import matplotlib.pyplot as plt

    from posbench.report.rows import load_runs
    from posbench.report.sections import collect_sections

    runs = load_runs(run_dir, report=lambda _problem: None, find_task=find_task)
    out: list[PageChart] = []
    taken: set[str] = set()
    for section in collect_sections(runs):
        for block in section.blocks:
            for source in block.charts:
                for stem, title, fig in source():
                    name = slug(f"{prefix}-{stem}")
                    while name in taken:  # two charts of one stem: the later one numbered
                        name = slug(f"{name}-{len(taken)}")
                    taken.add(name)
                    data = {"title": title, "run": run_dir.name, **figure_data(fig)}
                    text = json.dumps(data, sort_keys=True, separators=(",", ":")) + "\n"
                    out.append(PageChart(name, title, svg_bytes(fig), text))
                    plt.close(fig)
    return out
