"""Every chart kind the report draws, rendered from fixture runs, is legible: tick labels on each
axis are unique and every text (titles, labels, ticks, notes, legends, footer) lies inside the figure."""

from __future__ import annotations

import matplotlib.pyplot as plt
import pytest

from posbench.report import charts
from posbench.report.build import collect_sections, load_runs
from posbench.report.frontier import frontier_chart
from posbench.report.tabulate import metric_tables
from posbench.tasks import find as find_task
from posbench.tasks.retrieval.report import heatmap_chart
from tests.helpers.report_rows import (
    PRECISION_SUITE_METRICS,
    base_row,
    efficiency_rows,
    extrapolation_rows,
    lengthgen_rows,
    precision_rows,
    retrieval_rows,
    write_run,
)

SLACK = 1.0  # pixels


def decode_rows(run_id="run-d") -> list[dict]:
    """2 methods x 3 contexts; tokens/s around 12.5k, 0.4% apart (the zoomed-axis case of issue 42)."""
    rows = []
    for method, factor in (("sinusoidal", 1.0), ("alibi", 0.996)):
        for context in (128, 512, 2048):
            row = base_row("decode", "decode", method, {"context": context, "batch": 1}, run_id)
            wps = 12_700.0 * factor - context * 0.1
            row["metrics"] = {
                "decode_wps": wps,
                "prefill_wps": 40 * wps,
                "tpot_ms": 1000 / wps * 8,
                "ttft_ms": context / 40,
                "kv_cache_bytes": context * 4096,
                "peak_mem_decode_bytes": context * 10_000 + 50_000_000,
            }
            rows.append(row)
    return rows


def kernels_rows(run_id="run-k") -> list[dict]:
    rows = []
    for method, factor in (("sinusoidal", 1.0), ("alibi", 1.3), ("alibi_triton", 0.7)):
        for L in (512, 1024, 2048, 4096):
            row = base_row("kernels", "kernels", method, {"seq_len": L, "head_dim": 64}, run_id)
            row["metrics"] = {
                "fwd_ms": factor * L / 1000,
                "bwd_ms": 2 * factor * L / 1000,
                "fwdbwd_ms": 3 * factor * L / 1000,
                "fwd_tflops": 5.0 / factor,
                "peak_mem_bytes": factor * L * L * 4,
            }
            rows.append(row)
    return rows


def tiny_precision_rows() -> list[dict]:
    """The precision fixture with differences of a few millionths: ticks of 0.00 everywhere before."""
    rows = precision_rows()
    for row in rows:
        for key in [k for k in row["metrics"] if k.startswith("ppl_diff@")]:
            row["metrics"][key] = int(key.split("@")[1]) * 1e-7
    return rows


def every_figure(tmp_path):
    """(stem, Figure) of every chart the report's sections draw for every built-in task's fixture,
    plus the retrieval heatmap drawn on its own."""
    write_run(tmp_path, efficiency_rows(), metrics=["train_wps", "eval_wps", "peak_mem_train_bytes"])
    write_run(tmp_path, extrapolation_rows())
    write_run(tmp_path, tiny_precision_rows(), metrics=PRECISION_SUITE_METRICS, baseline=None)
    write_run(tmp_path, retrieval_rows())
    write_run(tmp_path, decode_rows(), metrics=["decode_wps", "tpot_ms", "peak_mem_decode_bytes"])
    write_run(tmp_path, kernels_rows(), metrics=["fwd_ms", "fwd_tflops", "peak_mem_bytes"])
    write_run(tmp_path, lengthgen_rows(), baseline=None)
    figures = []
    for section in collect_sections(load_runs(tmp_path, find_task=find_task)):
        for block in section.blocks:
            for source in block.charts:
                figures += [(stem, fig) for stem, _title, fig in source()]
    figures.append(("retrieval-heatmap", heatmap_chart(retrieval_rows(), "alibi")))
    figures.append(("train-wps-paired", charts.metric_chart(paired_table(tmp_path / "paired"))))
    figures.append(("frontier", frontier_chart(frontier_table())))
    figures.append(("frontier-accuracy", frontier_chart(accuracy_frontier_table())))
    return figures


def accuracy_frontier_table():
    """The retrieval frontier (accuracy, higher is better, a linear axis): 4 points, 3 seeds each."""
    from posbench.report.frontier import Point, frontier_table
    from posbench.tasks.retrieval.report import frontier_quality

    points = [
        Point(m, L, dict(enumerate((a - 0.02, a, a + 0.02))), cost, 0.5e9)
        for m, L, a, cost in (
            ("alibi", 64, 0.93, 8.8e-5),
            ("alibi", 128, 0.96, 9.9e-5),
            ("rotary", 64, 0.31, 1.06e-4),
            ("rotary", 128, 0.42, 9.6e-5),
        )
    ]
    return frontier_table(frontier_quality(), "retrieval", "CPU (AMD EPYC)", "time_s=60", 256, points, "passkey")


def frontier_table():
    """The frontier's verdict table as the cpu profile gives it: 8 points, 3 seeds each, costs a
    few percent apart (issue 39's chart: perplexity against seconds per token, the front dashed)."""
    from posbench.report.frontier import Point
    from posbench.tasks.extrapolation.frontier_report import verdict_table

    points = [
        Point(m, L, dict(enumerate((p - 0.2, p, p + 0.2))), cost, 0.5e9)
        for m, L, p, cost in (
            ("alibi", 64, 10.16, 8.78e-5),
            ("alibi", 128, 11.06, 9.90e-5),
            ("rotary", 64, 11.63, 1.06e-4),
            ("rotary", 128, 11.17, 9.63e-5),
            ("t5_bias", 64, 14.55, 9.38e-5),
            ("t5_bias", 128, 14.65, 9.97e-5),
            ("sinusoidal", 64, 19.06, 1.01e-4),
            ("sinusoidal", 128, 17.42, 9.41e-5),
        )
    ]
    return verdict_table(("frontier", "CPU (AMD EPYC)", "time_s=60", 512), points)


def paired_table(root):
    """The training-speed table as interleaved rounds give it: each ratio with its 95% interval
    (the longest bar notes and footer: "... rounds or windows, see the table" was cut before)."""
    write_run(root, efficiency_rows(), metrics=["train_wps"])
    table = next(t for t in metric_tables(load_runs(root, find_task=find_task), "efficiency") if t.metric == "train_wps")
    for cell in table.cells.values():
        if cell.ratio is not None and cell.ratio != 1:
            cell.ratio_interval = (cell.ratio * 0.99, cell.ratio * 1.012)
    return table


def _texts(fig):
    """Every visible text artist of ``fig`` with a name saying what it is."""
    out = [(f"figure text {t.get_text()!r}", t) for t in fig.texts]
    for ax in fig.axes:
        out += [(f"title {t.get_text()!r}", t) for t in (ax.title, ax._left_title, ax._right_title)]
        out += [(f"label {a.label.get_text()!r}", a.label) for a in (ax.xaxis, ax.yaxis)]
        out += [(f"tick {t!r}", label) for axis in (ax.xaxis, ax.yaxis) for t, label in _drawn_ticks(axis)]
        out += [(f"note {t.get_text()!r}", t) for t in ax.texts]
        out += [(f"offset {a.get_offset_text().get_text()!r}", a.get_offset_text()) for a in (ax.xaxis, ax.yaxis)]
        legend = ax.get_legend()
        if legend is not None:
            out += [(f"legend {t.get_text()!r}", t) for t in legend.get_texts()] + [("legend title", legend.get_title())]
    return [(name, t) for name, t in out if t.get_visible() and t.get_text()]


def _drawn_ticks(axis):
    """(text, label artist) of the ticks the axis draws: those inside its view, as matplotlib
    itself picks them (ticks outside the view keep labels that are never drawn)."""
    return [
        (tick.label1.get_text(), tick.label1)
        for tick in axis._update_ticks()
        if tick.label1.get_visible() and tick.label1.get_text()
    ]


def test_every_chart_kind_is_legible(tmp_path):
    figures = every_figure(tmp_path)
    stems = " ".join(stem for stem, _ in figures)
    for kind in (
        "train-wps",
        "peak-mem-train",
        "decode-wps",
        "tpot-ms",
        "fwd-ms",
        "fwd-tflops",
        "peak-mem-bytes",
        "ppl-l64-nonoverlapping",
        "position-loss",
        "precision-staircase",
        "precision-ppl-diff",
        "precision-ppl-cpu",
        "retrieval_passkey_accuracy",
        "retrieval-heatmap",
        "train-wps-paired",
        "frontier",
        "frontier-accuracy",
    ):
        assert kind in stems, kind
    problems = []
    for stem, fig in figures:
        fig.canvas.draw()
        renderer = fig.canvas.get_renderer()
        box = fig.bbox
        for name, text in _texts(fig):
            extent = text.get_window_extent(renderer)
            if (
                extent.x0 < box.x0 - SLACK
                or extent.y0 < box.y0 - SLACK
                or extent.x1 > box.x1 + SLACK
                or extent.y1 > box.y1 + SLACK
            ):
                problems.append(f"{stem}: {name} outside the figure ({extent.bounds} vs {box.bounds})")
        for ax in fig.axes:
            for which, axis in (("x", ax.xaxis), ("y", ax.yaxis)):
                labels = [text for text, _ in _drawn_ticks(axis)]
                if len(labels) != len(set(labels)):
                    problems.append(f"{stem}: {which} tick labels repeat: {labels}")
        plt.close(fig)
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("metric", ["train_wps", "peak_mem_train_bytes"])
def test_speed_and_memory_are_bars_from_zero_with_ratio_notes(tmp_path, metric):
    write_run(tmp_path, efficiency_rows(), metrics=[metric])
    (section,) = [s for s in collect_sections(load_runs(tmp_path, find_task=find_task)) if s.task == "efficiency"]
    block = next(b for b in section.blocks if b.table.metric == metric)
    ((_stem, _title, fig),) = block.charts[0]()
    (ax,) = [a for a in fig.axes]
    assert ax.get_ylim()[0] == 0  # from zero
    assert not [line for line in ax.get_lines() if (line.get_gid() or "").startswith("method:")]  # no lines
    table = block.table
    for method in ("sinusoidal", "rotary", "alibi"):
        bars = [p for p in ax.patches if p.get_gid() == f"method:{method}"]
        assert len(bars) == 3 and all(p.get_y() == 0 for p in bars)
    notes = [t.get_text() for t in ax.texts]
    for method in ("rotary", "alibi"):
        cell = table.cell(method, 512)
        assert f"{cell.ratio:.2f}x" in notes
    plt.close(fig)


def test_paired_bars_say_ratio_and_interval(tmp_path):
    table = paired_table(tmp_path)
    fig = charts.metric_chart(table)
    cell = table.cell("alibi", 256)
    lo, hi = cell.ratio_interval
    assert f"{cell.ratio:.2f}x [{lo:.2f}, {hi:.2f}]" in [t.get_text() for t in fig.axes[0].texts]
    footer = " ".join(t.get_text() for t in fig.texts).replace("\n", " ")
    assert "see the table" in footer and "[95% interval]" in footer  # whole, not cut
    plt.close(fig)
