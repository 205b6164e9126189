"""Every CSV posbench writes (rows.csv, tables/*.csv, a run's table.csv) neutralises cells a
spreadsheet would run as a formula: OWASP's rule, a leading single quote (issue 26)."""

import csv
import io

import pytest

from posbench.report.build import build_report
from posbench.report.render import cells_csv, csv_cell
from posbench.report.rows import load_runs
from posbench.report.tabulate import run_tables
from posbench.tasks import find as find_task
from tests.helpers.report_rows import efficiency_rows, write_run

DANGEROUS = ("=", "+", "-", "@", "\t", "\r")


@pytest.mark.parametrize("text", ["=1+1", "+cmd|' /C calc'!A0", "-2+3", "@SUM(A1)", "\tx", "\rx", '=HYPERLINK("http://x")'])
def test_a_formula_gets_a_leading_quote(text):
    assert csv_cell(text) == "'" + text


@pytest.mark.parametrize("value", [-1.5, 3, "-1.5", "+2", "-1e-05", "1.2e+308", "plain", "", None, "25.8k (0.99x)"])
def test_numbers_and_plain_text_stay_as_they_are(value):
    assert csv_cell(value) == value


def _hostile_rows():
    rows = efficiency_rows()
    for r in rows:
        if r["method"] == "rotary":
            r["method"] = "=cmd|' /C calc'!A0"
        if r["method"] == "alibi":
            r["method"] = "@SUM(1+1)"
        if r["status"] != "ok":
            r["message"] = '+HYPERLINK("http://evil")'
        r["case_id"] = "-" + r["case_id"]
        r["git_commit"] = "\tabc"
        r["params"] = {"seq_len": r["params"]["seq_len"]}
        if r["status"] == "ok":
            r["metrics"]["=evil"] = 1.0
    return rows


def _cells(text: str) -> list[str]:
    return [cell for row in csv.reader(io.StringIO(text)) for cell in row]


def _assert_safe(text: str, where: str):
    for cell in _cells(text):
        if cell.startswith(DANGEROUS):
            float(cell)  # only a plain number may start with + or -
            assert not cell.startswith(("=", "@", "\t", "\r")), f"{where}: {cell!r}"


def test_rows_csv_and_every_table_csv_of_a_report_are_neutralised(tmp_path):
    run_dir = write_run(tmp_path, _hostile_rows(), metrics=["train_wps", "=evil"])
    written = build_report([run_dir], tmp_path / "out", find_task=find_task)
    csvs = [p for k, p in written.items() if k.endswith(".csv")]
    assert written["rows.csv"] in csvs and any(k.startswith("tables/") for k in written if k.endswith(".csv"))
    for path in csvs:
        _assert_safe(path.read_text(), str(path))
    rows_text = written["rows.csv"].read_text()
    assert "'=cmd|' /C calc'!A0" in rows_text and "'+HYPERLINK" in rows_text and "'-efficiency/" in rows_text
    tables = [p.read_text() for k, p in written.items() if k.startswith("tables/") and k.endswith(".csv")]
    assert any("'@SUM(1+1)" in t for t in tables)


def test_a_runs_table_csv_is_neutralised(tmp_path):
    run_dir = write_run(tmp_path, _hostile_rows(), metrics=["train_wps"])
    text = cells_csv(run_tables(load_runs(run_dir, find_task=find_task)))
    _assert_safe(text, "table.csv")
    assert "'=cmd|' /C calc'!A0" in _cells(text)
