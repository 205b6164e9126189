"""The one table model and renderer: the run's own table.md/table.csv, terminal text, number formats."""

import csv
import io

import pytest

from posbench.report import numbers as fmt
from posbench.report import render
from posbench.report.rows import load_runs
from posbench.report.table import Cell, Table, TableSpec
from posbench.report.tabulate import run_tables
from posbench.tasks import find as find_task
from tests.helpers.report_rows import base_row, write_run

GiB = 1 << 30


def row(method, seq_len, status="ok", train=None, eval_=None, mem=None):
    r = base_row("efficiency", "efficiency", method, {"seq_len": seq_len}, "run-t", status=status)
    if status == "ok":
        r["metrics"] = {"train_wps": train, "eval_wps": eval_, "peak_mem_train_bytes": mem}
    return r


ROWS = [
    row("sinusoidal", 512, train=26_000.0, eval_=77_800.0, mem=18.0 * GiB),
    row("alibi", 512, train=25_800.0, eval_=76_400.0, mem=18.18 * GiB),
    row("t5_bias", 512, status="oom"),
    row("sinusoidal", 1024, train=20_000.0, eval_=60_000.0, mem=25 * GiB),
    row("alibi", 1024, train=21_000.0, eval_=30_000.0, mem=25 * GiB),
    row("t5_bias", 1024, status="unavailable"),
]
METRICS = ["train_wps", "eval_wps", "peak_mem_train_bytes"]
ORDER = ["sinusoidal", "t5_bias", "alibi"]


def tables_of(tmp_path, rows=ROWS, baseline="sinusoidal", methods=ORDER):
    write_run(tmp_path, rows, baseline=baseline, metrics=METRICS, methods=methods)
    return run_tables(load_runs(tmp_path, find_task=find_task))


def test_run_tables_layout_rows_columns_and_cells(tmp_path):
    tables = tables_of(tmp_path)
    assert [t.metric for t in tables] == METRICS  # the suite's metrics, no others
    train, evals, mem = tables
    assert train.title == "Training speed (words/s), efficiency" and mem.title == "Peak training memory (GiB), efficiency"
    assert all(t.rows == ORDER and t.columns == [512, 1024] for t in tables)  # run.json's method order
    assert train.cell("alibi", 512).text == "25.8k (0.99x)"
    assert evals.cell("sinusoidal", 512).text == "77.8k (1.00x)"
    assert mem.cell("alibi", 512).text == "18.2 GiB (1.01x)"  # GiB, named
    assert train.cell("t5_bias", 512).text == "OOM" and evals.cell("t5_bias", 1024).text == "unavailable"
    assert evals.cell("alibi", 1024).ratio == pytest.approx(0.5)


def test_no_ratio_when_the_baseline_failed(tmp_path):
    rows = [row("sinusoidal", 64, status="error"), row("alibi", 64, train=1000.0, eval_=1.0, mem=1e6)]
    train = tables_of(tmp_path, rows, methods=["sinusoidal", "alibi"])[0]
    assert train.cell("alibi", 64).text == "1.00k" and train.cell("alibi", 64).ratio is None
    assert train.cell("sinusoidal", 64).text == "error"


def test_ok_case_without_the_metric_says_not_applicable(tmp_path):
    rows = ROWS + [row("nope", 512, train=25_000.0, eval_=None, mem=18.0 * GiB)]
    train, evals, _ = tables_of(tmp_path, rows, methods=ORDER + ["nope"])
    assert evals.cell("nope", 512).text == "n/a"
    assert train.cell("nope", 512).text == "25.0k (0.96x)"


def test_run_tables_keep_only_the_given_cases(tmp_path):
    write_run(tmp_path, ROWS, metrics=METRICS, methods=ORDER)
    (train, _, _) = run_tables(
        load_runs(tmp_path, find_task=find_task), {r["case_id"] for r in ROWS if r["params"]["seq_len"] == 512}
    )
    assert train.columns == [512]


def test_run_files_markdown_and_cell_csv(tmp_path):
    tables = tables_of(tmp_path)
    md_path, csv_path = render.write_run_files(tables, tmp_path, note="note line")
    md = md_path.read_text().splitlines()
    assert md[0] == "note line" and md[2] == "**Training speed (words/s), efficiency**"
    assert md[4] == "| method \\ seq_len | 512 | 1024 |"
    assert "| t5_bias | OOM | unavailable |" in md and "| alibi | 25.8k (0.99x) | 21.0k (1.05x) |" in md
    cells = list(csv.DictReader(io.StringIO(csv_path.read_text())))
    assert list(cells[0]) == render.CELL_COLUMNS and len(cells) == 3 * 3 * 2
    alibi = next(c for c in cells if c["metric"] == "train_wps" and c["method"] == "alibi" and c["column"] == "seq_len=512")
    assert float(alibi["value"]) == 25_800.0 and float(alibi["ratio"]) == pytest.approx(25_800 / 26_000)
    assert alibi["text"] == "25.8k (0.99x)" and alibi["case_id"] == ROWS[1]["case_id"]
    oom = next(c for c in cells if c["method"] == "t5_bias" and c["column"] == "seq_len=512")
    assert (oom["value"], oom["status"], oom["text"]) == ("", "oom", "OOM")


def test_terminal_text_is_aligned():
    t = Table(
        TableSpec(task="x", metric="m", column_header="L"),
        key="k",
        title="T",
        columns=[1, 22],
        rows=["a", "long_name"],
        cells={("a", 1): Cell("1.00k"), ("long_name", 22): Cell("3")},
    )
    lines = render.to_text(t).splitlines()
    assert lines == ["T", "method \\ L      1  22", "a           1.00k   —", "long_name       —   3"]


def test_a_table_reads_its_declared_spec():
    spec = TableSpec(task="x", metric="ppl", unit="perplexity", fmt="ppl", column_header="L_valid", higher_is_better=False)
    t = Table(spec, key="k", title="T", columns=[64])
    assert (t.task, t.metric, t.unit, t.fmt, t.column_header, t.row_header) == (
        "x",
        "ppl",
        "perplexity",
        "ppl",
        "L_valid",
        "method",
    )
    assert t.higher_is_better is False and t.rows == [] and t.caption == "" and t.cell("a", 64).status == "missing"
    assert Table(spec, key="k", title="T").rows is not t.rows  # each table its own lists


def test_the_spec_fields_are_not_table_keywords():
    """A table is built from its declared ``TableSpec``: the spec's fields given as keywords are refused."""
    spec = TableSpec(task="x", metric="acc", unit="fraction", column_header="n", higher_is_better=True)
    with pytest.raises(TypeError, match="'task'"):
        Table(key="k", title="T", task="x", metric="acc", unit="fraction", column_header="n", higher_is_better=True)
    with pytest.raises(TypeError, match="'metric'"):
        Table(spec, key="k", title="T", metric="ppl")
    with pytest.raises(TypeError, match="'spec'"):
        Table(key="k", title="T")
    assert Table(spec, key="k", title="T", pooled=True).spec == spec


def test_formats():
    assert fmt.count(25_812.0) == "25.8k" and fmt.count(1_234_567) == "1.23M" and fmt.count(512) == "512"
    # Memory: one unit everywhere, GiB, always named; three significant digits.
    assert fmt.nbytes(526 * (1 << 20)) == "0.514 GiB" and fmt.nbytes(17.9 * GiB) == "17.9 GiB"
    assert fmt.nbytes(150 * GiB) == "150 GiB" and fmt.nbytes(1.5 * GiB) == "1.50 GiB"
    assert fmt.nbytes(256 * 1024) == "0.000244 GiB" and fmt.nbytes(2048) == "1.91e-06 GiB" and fmt.nbytes(0) == "0 GiB"
    assert fmt.number(977e6, "bytes") == "0.910 GiB"
    assert fmt.number(None) == "n/a" and fmt.number(float("nan"), "count") == "n/a"
    assert fmt.number(3.14159, "ppl") == "3.14" and fmt.number(0.0123456) == "0.01235"
    assert fmt.number(2.0, "ms") == "2" and fmt.number(7.0, "int") == "7"
    assert fmt.ratio(0.987) == "0.99x" and fmt.status("oom") == "OOM" and fmt.status("timeout") == "timeout"


def test_a_cell_can_carry_an_interval():
    # Confidence intervals travel in the same cell text: value, ratio, and the ratio's interval as
    # it is: ± its half-width where symmetric to the digits printed, else its bounds.
    assert fmt.value_with_ratio(25_800.0, "count", 0.98, (0.97, 0.99)) == "25.8k (0.98x ±0.01)"
    assert fmt.value_with_ratio(25_800.0, "count", 0.99, (0.96, 1.00)) == "25.8k (0.99x [0.96, 1.00])"
    assert fmt.value_with_ratio(25_800.0, "count") == "25.8k"
    assert fmt.interval(1.5 * GiB, 2 * GiB, "bytes") == "[1.50 GiB, 2.00 GiB]"


def test_an_asymmetric_interval_is_printed_as_it_is():
    # Issue 66: alibi's 0.837 [0.706, 1.408] was printed ±0.57, and a reader rebuilt [0.27, 1.41].
    text = fmt.ratio_text(0.837, (0.706, 1.408))
    assert text == "0.84x [0.71, 1.41]" and "±" not in text
    assert fmt.ratio_text(1.048, (0.938, 1.075)) == "1.05x [0.94, 1.07]"
    # symmetric to the digits printed: the true half-width, which rebuilds both printed bounds
    assert fmt.ratio_text(1.0, (0.9, 1.1)) == "1.00x ±0.10"
    assert fmt.ratio_text(0.95, (0.94, 0.96), unpaired=True) == "0.95x ±0.01 unpaired"
    # a one-sided interval (the upper bound on the ratio itself) is no ±0.00
    assert fmt.ratio_text(0.97, (0.96, 0.97)) == "0.97x [0.96, 0.97]"


def test_run_tables_print_the_family_table_a_suite_metric_is_shown_in(tmp_path):
    from tests.helpers.report_rows import PRECISION_SUITE_METRICS, precision_rows

    write_run(tmp_path, precision_rows(), metrics=PRECISION_SUITE_METRICS, baseline=None)
    tables = run_tables(load_runs(tmp_path, find_task=find_task))
    # last_window_distinct@float16 and @bfloat16 are columns of one table; ppl_diff_at_max_len of ppl_diff@*
    assert [t.metric for t in tables] == ["last_window_distinct@*", "ppl_diff@*"]
    text = render.to_text(tables[0]).splitlines()
    assert text[1].split() == ["method", "\\", "dtype", "float32", "float16", "bfloat16"]
    assert text[2].split() == ["alibi", "256", "31", "4"]
    assert render.to_text(tables[1]).splitlines()[2].split() == [
        "alibi",
        "0.0625",
        "0.5",
        "2",
    ]  # four significant digits (the cost is ~1e-4 on a CPU)
