"""Charts checked for what a reader sees: lines, labels, scales, marks, and values equal to the tables."""

from __future__ import annotations

import matplotlib.pyplot as plt
import pytest
from matplotlib.colors import to_rgba

from posbench.report import charts
from posbench.report.build import collect_sections, load_runs
from posbench.report.frontier import frontier_chart
from posbench.report.tabulate import metric_tables
from posbench.tasks import find as find_task
from posbench.tasks.extrapolation import ppl_charts
from posbench.tasks.extrapolation.ppl_tables import extrapolation_tables
from posbench.tasks.retrieval.report import heatmap_chart
from tests.helpers.report_rows import (
    EFF_METHODS,
    L_VALID,
    LENGTHS,
    PPL_METHODS,
    PRECISION_SUITE_METRICS,
    base_row,
    efficiency_rows,
    extrapolation_rows,
    lengthgen_rows,
    precision_rows,
    retrieval_rows,
    write_run,
)

GIB = float(1 << 30)


def _by_gid(ax, prefix):
    return {line.get_gid().split(":", 1)[1]: line for line in ax.get_lines() if (line.get_gid() or "").startswith(prefix)}


@pytest.fixture
def frame(tmp_path):
    write_run(tmp_path, efficiency_rows())
    write_run(tmp_path, extrapolation_rows())
    return load_runs(tmp_path, find_task=find_task)


def _bars(ax) -> dict:
    """{method: its bars, left to right} of a bar chart."""
    out: dict = {}
    for patch in ax.patches:
        if (patch.get_gid() or "").startswith("method:"):
            out.setdefault(patch.get_gid().split(":", 1)[1], []).append(patch)
    return out


def _group(x: float) -> int:
    """The column (group) a bar or mark at ``x`` belongs to: groups sit at 0, 1, 2 ..."""
    return round(x)


def test_words_per_second_chart_plots_the_table(frame, tmp_path):
    table = next(t for t in metric_tables(frame, "efficiency") if t.metric == "train_wps")
    fig = charts.metric_chart(table)
    (ax,) = fig.axes
    bars = _bars(ax)
    assert list(bars) == [m for m in EFF_METHODS if m != "alibi_triton"]  # unavailable: no bars
    for method, patches in bars.items():
        expected = [(L, table.cell(method, L).value) for L in LENGTHS if table.cell(method, L).value is not None]
        drawn = [(LENGTHS[_group(p.get_x() + p.get_width() / 2)], p.get_height()) for p in patches]
        assert drawn == expected and all(p.get_y() == 0 for p in patches)  # bars from zero
    assert list(_by_gid(ax, "failed:")) == ["t5_bias"]  # no OOM marks for the unavailable method
    assert [LENGTHS[_group(x)] for x in _by_gid(ax, "failed:")["t5_bias"].get_xdata()] == [1024]
    assert [t.get_text() for t in ax.get_xticklabels()] == [str(L) for L in LENGTHS]
    assert ax.get_title() == "Training speed (words/s), efficiency"
    assert ax.get_xlabel() == "seq_len (tokens)" and "words/s" in ax.get_ylabel()
    legend = [t.get_text() for t in ax.get_legend().get_texts()]
    assert "alibi_triton (unavailable)" in legend and "x: OOM / failed" in legend
    caption = " ".join(t.get_text() for t in fig.texts)
    assert "Test CPU 9000" in caption and "abc1234def" in caption
    assert "ratio to sinusoidal" in caption.replace("\n", " ")
    # each bar says its ratio to the baseline
    notes = [t.get_text() for t in ax.texts]
    assert notes.count("1.00x") == 3 and f"{table.cell('alibi', 256).ratio:.2f}x" in notes

    paths = charts.save_figure(fig, tmp_path / "charts", "train")
    assert paths["png"].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "<svg" in paths["svg"].read_text()[:500]


def test_memory_chart_is_in_gib_from_zero(frame):
    table = next(t for t in metric_tables(frame, "efficiency") if t.metric == "peak_mem_train_bytes")
    fig = charts.metric_chart(table)
    ax = fig.axes[0]
    fig.canvas.draw()
    assert ax.get_ylim()[0] == 0  # memory axes start at zero
    assert ax.get_ylabel() == "Peak training memory (GiB)" and "(GiB)" in ax.get_title()
    labels = [t.get_text() for t in ax.get_yticklabels() if t.get_text() and t.get_position()[1] <= ax.get_ylim()[1]]
    top = max(c.value for c in table.cells.values() if c.value is not None) / GIB
    assert ax.get_ylim()[1] >= 1.1 * top  # the tallest bar (and its note) clear of the frame
    assert labels[0] == "0" and all(0 <= float(label) <= ax.get_ylim()[1] for label in labels)  # GiB numbers
    bars = _bars(ax)["sinusoidal"]
    assert [p.get_height() for p in bars] == [table.cell("sinusoidal", L).value / GIB for L in LENGTHS]
    assert table.cell("sinusoidal", 1024).text.startswith(f"{table.cell('sinusoidal', 1024).value / GIB:.3f} GiB")


def test_extrapolation_chart_is_figure_one(frame):
    table = extrapolation_tables(frame)[0]
    fig = ppl_charts.ppl_chart(table)
    (ax,) = fig.axes
    lines = _by_gid(ax, "method:")
    assert list(lines) == PPL_METHODS
    for method, line in lines.items():
        expected = [table.cell(method, lv).value for lv in L_VALID if table.cell(method, lv).value is not None]
        assert list(line.get_ydata()) == expected
    assert ax.get_xscale() == "log"
    (l_train,) = [line for line in ax.get_lines() if line.get_gid() == "L_train"]
    assert list(l_train.get_xdata()) == [64, 64]
    # rotary's OOM at 512: an 'x' at the very top of the axes (y in axes coordinates)
    oom = _by_gid(ax, "failed:")["rotary"]
    assert oom.get_marker() == "x" and list(oom.get_xdata()) == [512] and list(oom.get_ydata()) == [1.0]
    assert oom.get_clip_on() is False
    assert "nonoverlapping" in ax.get_title()
    assert ax.get_xlabel().startswith("L_valid") and "Perplexity" in ax.get_ylabel()


def test_position_loss_chart(frame):
    ((stem, fig),) = ppl_charts.position_loss_charts(frame)
    ax = fig.axes[0]
    assert "position-loss" in stem and "512" in stem
    lines = _by_gid(ax, "method:")
    # rotary OOMed at 512 so it has no per-position curve there
    assert list(lines) == ["sinusoidal", "alibi"]
    assert len(lines["alibi"].get_ydata()) == 512
    assert ax.get_xlabel().startswith("Token position") and "Loss" in ax.get_ylabel()


# -- every method visible, spreads drawn, one convention per axis kind ---------------------------


def _all_report_figures(tmp_path):
    """Every chart the report draws for efficiency, extrapolation, precision and retrieval runs,
    as (stem, Figure), through the report's own sections (so a new chart kind is covered)."""
    write_run(tmp_path, efficiency_rows(), metrics=["train_wps", "eval_wps", "peak_mem_train_bytes"])
    write_run(tmp_path, extrapolation_rows())
    write_run(tmp_path, precision_rows(), metrics=PRECISION_SUITE_METRICS, baseline=None)
    write_run(tmp_path, retrieval_rows())
    figures = []
    for section in collect_sections(load_runs(tmp_path, find_task=find_task)):
        for block in section.blocks:
            for source in block.charts:
                figures += [(stem, fig) for stem, _title, fig in source()]
    return figures


def _style(line) -> tuple:
    return (to_rgba(line.get_color()), line.get_marker(), line.get_linestyle())


def test_every_methods_line_stays_visible_when_lines_coincide(tmp_path):
    figures = _all_report_figures(tmp_path)
    stems = [stem for stem, _ in figures]
    # the kinds of line chart the report draws, each with lines that coincide in the fixtures
    for kind in (
        "peak-mem-train",
        "ppl-l64-nonoverlapping",
        "position-loss",
        "precision-staircase",
        "precision-ppl-cpu",
        "retrieval_passkey_accuracy",
    ):
        assert any(kind in stem for stem in stems), kind
    checked = 0
    for stem, fig in figures:
        for ax in fig.axes:
            lines = [line for line in ax.get_lines() if (line.get_gid() or "").startswith("method:")]
            styles = [_style(line) for line in lines]
            assert len(set(styles)) == len(styles), (stem, styles)  # no two share colour, marker and dash
            # nor marker alone: lines stay apart without colour too (print, colour blindness)
            assert len({line.get_marker() for line in lines}) == len(lines), stem
            assert len({line.get_linestyle() for line in lines}) == min(len(lines), len(charts.LINESTYLES)), stem
            for line in lines:
                if len(line.get_xdata()):
                    assert line.get_marker() not in ("None", "", None) and line.get_markerfacecolor() == "none"
            checked += len(lines) > 1
        plt.close(fig)
    assert checked >= 8


def test_line_styles_are_a_deterministic_cycle_by_method_order():
    styles = [tuple(charts.line_style(i).values()) for i in range(20)]
    assert len(set(styles)) == 20 and styles == [tuple(charts.line_style(i).values()) for i in range(20)]
    assert len({charts.line_style(i)["marker"] for i in range(10)}) == 10
    assert [charts.marker_size(i) for i in range(3)] == [11.0, 9.5, 8.0]  # markers at one point nest


def test_coinciding_memory_lines_all_show_in_the_chart(frame):
    # The fixture's memory differs by a few bytes between methods: as bars side by side each shows.
    table = next(t for t in metric_tables(frame, "efficiency") if t.metric == "peak_mem_train_bytes")
    bars = _bars(charts.metric_chart(table).axes[0])
    drawn = {m: [p.get_height() for p in patches] for m, patches in bars.items()}
    assert len(drawn) == 4 and drawn["rotary"] == pytest.approx(drawn["alibi"], rel=1e-6)
    firsts = [patches[0] for patches in bars.values()]
    assert len({(to_rgba(p.get_facecolor()), p.get_hatch()) for p in firsts}) == 4  # colour and hatch apart
    assert len({p.get_x() for p in firsts}) == 4  # side by side, none hidden behind another


def test_error_bars_show_the_min_max_the_rows_hold(frame):
    table = next(t for t in metric_tables(frame, "efficiency") if t.metric == "train_wps")
    rows = {(r["method"], r["params"]["seq_len"]): r["metrics"] for r in efficiency_rows() if r["status"] == "ok"}
    assert table.cell("rotary", 512).spread == (rows[("rotary", 512)]["train_wps_min"], rows[("rotary", 512)]["train_wps_max"])
    fig = charts.metric_chart(table)
    bars = {c.get_gid(): c for c in fig.axes[0].collections}
    for method in ("sinusoidal", "rotary", "t5_bias", "alibi"):
        segments = bars[f"errorbar:{method}"].get_segments()
        lengths = [L for L in LENGTHS if (method, L) in rows]
        assert len(segments) == len(lengths)
        for segment, L in zip(segments, lengths):
            assert list(segment[:, 1]) == pytest.approx([rows[(method, L)]["train_wps_min"], rows[(method, L)]["train_wps_max"]])
    assert "errorbar:alibi_triton" not in bars
    assert "bars: min-max over measured windows" in " ".join(t.get_text() for t in fig.texts)


def test_error_bars_show_the_spread_over_seeds_of_perplexity(tmp_path):
    rows = extrapolation_rows()
    for row in rows:
        for entry in row["series"]["evals"]:
            if entry["ppl"] is not None:
                entry["ppl_std"] = 0.1 * entry["ppl"]
    table = extrapolation_tables(load_runs(write_run(tmp_path, rows), find_task=find_task))[0]
    fig = ppl_charts.ppl_chart(table)
    bars = {c.get_gid(): c for c in fig.axes[0].collections}
    (first, *_) = bars["errorbar:alibi"].get_segments()
    value = table.cell("alibi", 64).value
    assert list(first[:, 1]) == pytest.approx([0.9 * value, 1.1 * value])
    assert "bars: ± std over seeds" in " ".join(t.get_text() for t in fig.texts)


def test_every_perplexity_chart_has_a_log_y_axis(tmp_path):
    write_run(tmp_path, extrapolation_rows())
    write_run(tmp_path, precision_rows(), metrics=PRECISION_SUITE_METRICS, baseline=None)
    loaded = load_runs(tmp_path, find_task=find_task)
    nonoverlapping, sliding = extrapolation_tables(loaded)
    assert sliding.columns == [128]  # one column, a range far under 10x: still log
    for table in (nonoverlapping, sliding):
        assert ppl_charts.ppl_chart(table).axes[0].get_yscale() == "log"
    precision = {t.metric: t for t in metric_tables(loaded, "precision", column="")}
    assert charts.is_perplexity(precision["ppl@*"]) and charts.metric_chart(precision["ppl@*"]).axes[0].get_yscale() == "log"
    # a difference of perplexities can be zero or negative: linear, and not called a perplexity
    assert not charts.is_perplexity(precision["ppl_diff@*"])
    assert charts.metric_chart(precision["ppl_diff@*"]).axes[0].get_yscale() == "linear"
    plt.close("all")


def test_unavailable_is_said_once_per_legend_entry(tmp_path):
    rows = extrapolation_rows()
    missing = base_row(
        "extrapolation",
        "extrapolation",
        "alibi_triton",
        {"L_train": 64},
        "run-x",
        status="unavailable",
        message="needs CUDA and triton",
    )
    write_run(tmp_path, rows + [missing])
    write_run(tmp_path, efficiency_rows())
    loaded = load_runs(tmp_path, find_task=find_task)
    table = extrapolation_tables(loaded)[0]
    assert "alibi_triton (unavailable)" in table.rows  # the table's own label already says it
    legend = [t.get_text() for t in ppl_charts.ppl_chart(table).axes[0].get_legend().get_texts()]
    assert "alibi_triton (unavailable)" in legend
    train = next(t for t in metric_tables(loaded, "efficiency") if t.metric == "train_wps")
    legend += [t.get_text() for t in charts.metric_chart(train).axes[0].get_legend().get_texts()]
    assert legend.count("alibi_triton (unavailable)") == 2
    assert all(text.count("(unavailable)") <= 1 for text in legend)
    plt.close("all")


def test_a_spread_of_zero_width_draws_no_bars_and_names_none(tmp_path):
    rows = efficiency_rows()
    for row in rows:
        for key in ("train_wps_min", "train_wps_max"):
            if key in row["metrics"]:
                row["metrics"][key] = row["metrics"]["train_wps"]  # one measured window
    table = next(
        t
        for t in metric_tables(load_runs(write_run(tmp_path, rows), find_task=find_task), "efficiency")
        if t.metric == "train_wps"
    )
    fig = charts.metric_chart(table)
    assert not [c for c in fig.axes[0].collections if (c.get_gid() or "").startswith("errorbar:")]
    assert "bars:" not in " ".join(t.get_text() for t in fig.texts)
    plt.close(fig)


# Every chart kind the report draws, rendered from fixture runs, is legible: tick labels on each
# axis are unique and every text (titles, labels, ticks, notes, legends, footer) lies inside the
# figure.


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
