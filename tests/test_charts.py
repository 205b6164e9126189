"""Charts checked for what a reader sees: lines, labels, scales, marks, and values equal to the tables."""
from __future__ import annotations

import pytest

from posbench import charts
from posbench.report import load_runs
from posbench.report_ppl import extrapolation_tables
from posbench.table import efficiency_tables
from report_fixtures import EFF_METHODS, L_VALID, LENGTHS, PPL_METHODS, efficiency_rows, extrapolation_rows, write_run

GIB = float(1 << 30)


def _by_gid(ax, prefix):
    return {line.get_gid().split(":", 1)[1]: line for line in ax.get_lines()
            if (line.get_gid() or "").startswith(prefix)}


@pytest.fixture
def frame(tmp_path):
    write_run(tmp_path, efficiency_rows())
    write_run(tmp_path, extrapolation_rows())
    return load_runs(tmp_path)


def test_words_per_second_chart_plots_the_table(frame, tmp_path):
    table = next(t for t in efficiency_tables(frame) if t.metric == "train_wps")
    fig = charts.metric_chart(table)
    (ax,) = fig.axes
    lines = _by_gid(ax, "method:")
    assert list(lines) == EFF_METHODS
    for method, line in lines.items():
        expected = [(L, table.cell(method, L).value) for L in LENGTHS if table.cell(method, L).value is not None]
        assert list(zip(line.get_xdata(), line.get_ydata())) == expected
    assert len(lines["alibi_triton"].get_xdata()) == 0  # unavailable: no points, no OOM marks
    assert list(_by_gid(ax, "failed:")) == ["t5_bias"]
    assert list(_by_gid(ax, "failed:")["t5_bias"].get_xdata()) == [1024]
    assert ax.get_xscale() == "log"
    assert ax.get_title() == "Training speed (words/s), efficiency"
    assert ax.get_xlabel() == "seq_len (tokens)" and "words/s" in ax.get_ylabel()
    legend = [t.get_text() for t in ax.get_legend().get_texts()]
    assert "alibi_triton (unavailable)" in legend and "x: OOM / failed" in legend
    caption = " ".join(t.get_text() for t in fig.texts)
    assert "Test CPU 9000" in caption and "abc1234def" in caption

    paths = charts.save_figure(fig, tmp_path / "charts", "train")
    assert paths["png"].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "<svg" in paths["svg"].read_text()[:500]


def test_memory_chart_is_in_gib_from_zero(frame):
    table = next(t for t in efficiency_tables(frame) if t.metric == "peak_mem_train_bytes")
    fig = charts.metric_chart(table)
    ax = fig.axes[0]
    fig.canvas.draw()
    assert ax.get_ylim()[0] == 0  # memory axes start at zero
    assert ax.get_ylabel() == "Peak training memory (GiB)" and "(GiB)" in ax.get_title()
    labels = [t.get_text() for t in ax.get_yticklabels() if t.get_text()]
    assert labels[0] == "0" and all(float(label) <= 1.0 for label in labels)  # plain GiB numbers, unit in the label
    line = _by_gid(ax, "method:")["sinusoidal"]
    assert list(line.get_ydata()) == [table.cell("sinusoidal", L).value / GIB for L in LENGTHS]
    assert table.cell("sinusoidal", 1024).text.startswith(f"{table.cell('sinusoidal', 1024).value / GIB:.3f} GiB")


def test_extrapolation_chart_is_figure_one(frame):
    table = extrapolation_tables(frame)[0]
    fig = charts.ppl_chart(table)
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
    ((stem, fig),) = charts.position_loss_charts(frame)
    ax = fig.axes[0]
    assert "position-loss" in stem and "512" in stem
    lines = _by_gid(ax, "method:")
    # rotary OOMed at 512 so it has no per-position curve there
    assert list(lines) == ["sinusoidal", "alibi"]
    assert len(lines["alibi"].get_ydata()) == 512
    assert ax.get_xlabel().startswith("Token position") and "Loss" in ax.get_ylabel()
