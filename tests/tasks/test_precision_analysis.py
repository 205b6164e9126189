"""Bias precision analysis (SambaNova, "ALiBi Deep Dive: Interpolation and Precision", 2023)."""

from __future__ import annotations

import json
import math
import time

import numpy as np
import pytest
import torch

import posbench.core.alibi_math as alibi
from posbench.tasks.precision import analysis as P
from posbench.tasks.precision import report as precision_report
from posbench.tasks.precision import run as precision_run

ALL = list(P.DTYPES)
DEFAULT_HEADS = (0, 15, 31)


def brute_bias(n_heads: int, length: int, dtype: torch.dtype, factor: float = 1.0) -> torch.Tensor:
    """(H, L) bias built a second way: numpy float32 products, then the torch cast."""
    slopes = np.array(alibi.alibi_slopes(n_heads), dtype=np.float32)[:, None]
    bias = slopes * np.arange(length, dtype=np.float32)[None, :]
    if factor != 1.0:
        bias = bias * np.float32(factor)
    return torch.from_numpy(bias).to(dtype)


def brute_counts(row: torch.Tensor, window: int) -> list[int]:
    """Distinct values per window with a Python set; every NaN is one value ('nan')."""
    values = ["nan" if math.isnan(v) else v for v in row.tolist()]
    return [len(set(values[s : s + window])) for s in range(0, len(values), window)]


def table_counts(table, dtype: str, head: int) -> list[int]:
    t = table[(table["dtype"] == dtype) & (table["head"] == head)].sort_values("window_start")
    return t["distinct"].tolist()


@pytest.fixture(scope="module")
def default_report() -> P.PrecisionReport:
    return P.analyze()


@pytest.fixture(scope="module")
def default_counts() -> dict[str, list[list[int]]]:
    """Every head's per-window counts at the defaults (32 heads, 8192, window 1000)."""
    bias = P.bloom_bias(32, 8192)
    return {name: P.count_distinct(bias.to(dt), 1000) for name, dt in P.DTYPES.items()}


def test_float8_types_are_offered():
    # torch 2.13 has both; the module looks them up so an older torch just omits them.
    assert ALL[:3] == ["float32", "float16", "bfloat16"]
    assert {"float8_e4m3fn", "float8_e5m2"} <= set(ALL)


@pytest.mark.parametrize("dtype", ALL)
def test_counts_match_brute_force_small_case(dtype):
    # 6 heads (not a power of two), 50 positions, window 7: the last window holds 1 position.
    report = P.analyze(n_heads=6, length=50, window=7, dtypes=[dtype], heads=range(6), factor=0.5)
    bias = brute_bias(6, 50, P.DTYPES[dtype])
    for head in range(6):
        assert table_counts(report.counts, dtype, head) == brute_counts(bias[head], 7)
    assert P.count_distinct(bias, 7) == [brute_counts(bias[h], 7) for h in range(6)]
    assert P.count_distinct(bias[2], 7) == brute_counts(bias[2], 7)  # (L,) in, list[int] out
    assert report.counts["window_size"].tolist()[-1] == 1
    assert report.notes == ["last window 49..49 is partial: 1 of 7 positions"]


@pytest.mark.parametrize("dtype", ALL)
def test_counts_match_brute_force_default(dtype, default_report):
    bias = brute_bias(32, 8192, P.DTYPES[dtype])
    for head in DEFAULT_HEADS:
        assert table_counts(default_report.counts, dtype, head) == brute_counts(bias[head], 1000)
    for head in (1, 7, 22):
        assert P.count_distinct(bias[head], 1000) == brute_counts(bias[head], 1000)
    last = default_report.last_window[default_report.last_window["dtype"] == dtype]
    expected_last = [brute_counts(bias[h], 1000)[-1] for h in range(32)]
    assert last.sort_values("head")["distinct"].tolist() == expected_last
    scaled = brute_bias(32, 8192, P.DTYPES[dtype], 0.25)
    for head in DEFAULT_HEADS:
        assert table_counts(default_report.scaled_counts, dtype, head) == brute_counts(scaled[head], 1000)


def test_windows_and_partial_last_window(default_report):
    t = default_report.counts
    one = t[(t["dtype"] == "float32") & (t["head"] == 0)]
    assert one["window_start"].tolist() == list(range(0, 8001, 1000))
    assert one["window_end"].tolist() == [*range(1000, 8001, 1000), 8192]
    assert one["window_size"].tolist() == [1000] * 8 + [192]
    assert default_report.notes == ["last window 8000..8191 is partial: 192 of 1000 positions"]
    assert list(t.columns)[:6] == ["dtype", "head", "window_start", "window_end", "distinct", "window_size"]


def test_float32_keeps_every_position_distinct(default_counts, default_report):
    sizes = [1000] * 8 + [192]
    assert all(row == sizes for row in default_counts["float32"])
    t = default_report.counts[default_report.counts["dtype"] == "float32"]
    assert (t["distinct"] == t["window_size"]).all()


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_counts_never_increase_with_position_at_default_heads(dtype, default_report):
    for head in DEFAULT_HEADS:
        c = table_counts(default_report.counts, dtype, head)
        assert all(a >= b for a, b in zip(c, c[1:])), (head, c)
        assert c[-2] < c[0]  # and they do fall


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_counts_never_increase_by_more_than_one_for_any_head(dtype, default_counts):
    # Within one binade the spacing is fixed and a window of 1000 steps of the slope covers
    # 1000 * slope / spacing treads, give or take one by where the window starts on the grid:
    # float16 heads 1, 5, 9, ... go 177 -> 178 between windows 6000 and 7000.
    rises = [b - a for row in default_counts[dtype] for a, b in zip(row, row[1:])]
    assert max(rises) <= 1


def test_bfloat16_never_above_float16(default_counts):
    for bf, fp in zip(default_counts["bfloat16"], default_counts["float16"]):
        assert all(b <= f for b, f in zip(bf, fp))


@pytest.mark.parametrize("factor", [0.25, 0.5])
@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16", "float8_e5m2"])
def test_power_of_two_scaling_leaves_counts_unchanged(dtype, factor, default_counts):
    # Multiplying by 2^-k only shifts exponents, so rounding picks the same neighbours as long as
    # values stay in the normal range. float8_e4m3fn is left out: its range (448 max, normals
    # from 2^-6) is crossed by the bias, so its counts do change (see the report's factor table).
    scaled = P.count_distinct(P.bloom_bias(32, 8192, dtype, factor), 1000)
    assert scaled == default_counts[dtype]


def test_scaling_in_report_and_non_power_of_two(default_report):
    for name in ("float32", "float16", "bfloat16"):
        a = default_report.counts[default_report.counts["dtype"] == name]["distinct"].tolist()
        b = default_report.scaled_counts[default_report.scaled_counts["dtype"] == name]["distinct"].tolist()
        assert a == b
    # 0.3 is allowed to change the narrow types' counts; only report them. float32 stays exact.
    report = P.analyze(factor=0.3, dtypes=["float32", "float16", "bfloat16"])
    t = report.scaled_counts
    assert (t[t["dtype"] == "float32"]["distinct"] == t[t["dtype"] == "float32"]["window_size"]).all()
    changed = (report.scaled_counts["distinct"] != report.counts["distinct"]).sum()
    print(f"factor 0.3: {changed} of {len(t)} window counts differ from factor 1")
    assert "Bias x 0.3" in P.format_tables(report)


def test_slopes_come_from_posbench_alibi(monkeypatch):
    for n in (8, 12, 32):
        row = P.bloom_bias(n, 3)[:, 1]  # position 1: the slope itself
        assert row.tolist() == torch.tensor(alibi.alibi_slopes(n), dtype=torch.float32).tolist()
    monkeypatch.setattr(alibi, "alibi_slopes", lambda n: [0.5] * n)
    assert P.bloom_bias(4, 3)[:, 2].tolist() == [1.0] * 4


def test_count_distinct_treats_nan_as_one_value():
    x = torch.tensor([float("nan"), 1.0, float("nan"), 1.0, 2.0, float("nan"), float("inf")])
    assert P.count_distinct(x, 4) == [2, 3]


def test_count_distinct_is_fast():
    bias = P.bloom_bias(32, 8192)
    casts = [bias.to(dt) for dt in P.DTYPES.values()]
    start = time.perf_counter()
    for c in casts:
        P.count_distinct(c, 1000)
    assert time.perf_counter() - start < 1.0


def test_staircase_chart_lines_are_the_cast_bias(tmp_path):
    dtypes = ["float32", "float16", "bfloat16", "float8_e5m2"]
    chart = precision_run.staircase_chart(32, 8192, 31, tmp_path / "charts" / "stairs.png", dtypes=dtypes)
    ax = chart.figure.axes[0]
    assert len(ax.lines) == len(dtypes)
    expected = brute_bias(32, 8192, torch.float32)[31, -192:]
    for line, name in zip(ax.lines, dtypes):
        assert line.get_label() == name
        assert line.get_drawstyle() == "steps-post"
        np.testing.assert_array_equal(line.get_xdata(), np.arange(8000, 8192))
        np.testing.assert_array_equal(line.get_ydata(), expected.to(P.DTYPES[name]).double().numpy())
        np.testing.assert_array_equal(chart.values[name], line.get_ydata())
    assert ax.get_title() and ax.get_xlabel() and ax.get_ylabel()
    assert [t.get_text() for t in ax.get_legend().get_texts()] == dtypes
    assert chart.png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert b"<svg" in chart.svg.read_bytes()[:500]
    assert chart.paths == [tmp_path / "charts" / "stairs.png", tmp_path / "charts" / "stairs.svg"]
    # the staircase itself: bfloat16 holds far fewer values than float32 over these positions
    assert len(set(chart.values["bfloat16"])) < len(set(chart.values["float32"])) == 192


def test_staircase_chart_default_leaves_float8_out(tmp_path):
    chart = precision_run.staircase_chart(8, 100, 3, tmp_path / "s", last=40)
    assert [line.get_label() for line in chart.figure.axes[0].lines] == list(precision_report.CHART_DTYPES)
    assert chart.positions.tolist() == list(range(60, 100))


def test_format_tables(default_report):
    text = P.format_tables(default_report)
    for head in DEFAULT_HEADS:
        assert f"### Head {head}" in text
    assert "8000..8191 (partial, 192)" in text
    assert "| positions | float32 | float16 | bfloat16 | float8_e4m3fn | float8_e5m2 |" in text
    assert "heads 0..31" in text


def test_run_precision_case_is_json_ready(tmp_path):
    settings = {
        "n_heads": 8,
        "length": 300,
        "window": 128,
        "heads": [0, 7],
        "factor": 0.25,
        "dtypes": ["float32", "bfloat16", "float8_e5m2"],
        "out_dir": str(tmp_path),
    }
    out = precision_run.run_precision_case(settings)
    back = json.loads(json.dumps(out))
    assert back["settings"]["heads"] == [0, 7]
    assert len(back["counts"]) == 3 * 2 * 3  # dtypes x heads x windows
    assert len(back["last_window"]) == 3 * 8
    assert back["counts"][-1]["window_size"] == 300 - 256
    assert [c["head"] for c in back["charts"]] == [0, 7]
    assert back["charts"][0]["dtypes"] == ["float32", "bfloat16"]  # float8 tabulated, not drawn
    for c in back["charts"]:
        assert (tmp_path / c["png"]).exists() and (tmp_path / c["svg"]).exists()
    assert "partial" in back["notes"][0]


@pytest.mark.parametrize(
    "call, allowed",
    [
        (lambda: P.analyze(dtypes=["float64"]), "allowed: float32, float16, bfloat16"),
        (lambda: P.bloom_bias(4, 8, "int8"), "allowed: float32"),
        (lambda: P.analyze(window=0), ">= 1"),
        (lambda: P.count_distinct(torch.zeros(5), 0), ">= 1"),
        (lambda: P.analyze(length=0), ">= 1"),
        (lambda: precision_run.staircase_chart(4, 0, 0, "x"), ">= 1"),
        (lambda: P.analyze(heads=(0, 32)), "in 0..31"),
        (lambda: P.analyze(factor=0), "> 0"),
        (lambda: precision_run.run_precision_case({"out_dir": ".", "lenght": 5}), "allowed: dtypes, factor"),
    ],
)
def test_bad_input_raises_one_clear_line(call, allowed):
    with pytest.raises(ValueError) as err:
        call()
    msg = str(err.value)
    assert allowed in msg and "\n" not in msg
