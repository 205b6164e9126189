"""One odd value in one row never fails a whole report or compare: the row is skipped with one
warning naming file and line, and numbers nobody can divide by give no ratio (issue 26)."""

import csv
import json
import re

import pytest

from posbench.report.build import build_report
from posbench.report.compare import compare_runs, main_compare
from posbench.report.rows import load_runs
from posbench.tasks import find as find_task
from tests.helpers.report_rows import efficiency_rows, retrieval_rows, write_run

DEEP = "[" * 100_000 + "]" * 100_000


def _write_lines(run_dir, lines):
    (run_dir / "cases.jsonl").write_text("".join(lines))


def _put(rows, index, change):
    rows = [dict(r, metrics=dict(r["metrics"]), params=dict(r["params"])) for r in rows]
    change(rows[index])
    return rows


BAD_ROWS = {
    "an integer of 400 digits": (lambda r: r["metrics"].update(train_wps=10**400), "metrics.train_wps: an integer of 401 digits"),
    "a string where a number belongs": (
        lambda r: r["metrics"].update(train_wps="fast"),
        'metrics.train_wps: expected a number or null, got "fast"',
    ),
    "a list as a parameter value": (
        lambda r: r["params"].update(seq_len=[256, 512]),
        "params.seq_len: expected a number, string, true/false or null, got list",
    ),
    "a string as a numeric parameter": (
        lambda r: r["params"].update(seq_len="long"),
        "params.seq_len: expected a number, got str",
    ),
    "a parameter the task needs is missing": (
        lambda r: r["params"].pop("seq_len"),
        "params: no 'seq_len'; rows of task efficiency need seq_len",
    ),
    "a billion rounds": (lambda r: r.update(round=1_000_000_000), "round: expected a whole number from 1 to 10000 or null"),
    "a string as duration": (lambda r: r.update(duration_s="long"), 'duration_s: expected a number or null, got "long"'),
}


@pytest.mark.parametrize("what", list(BAD_ROWS))
def test_a_bad_row_is_skipped_with_one_warning_in_report_and_compare(tmp_path, capsys, what):
    change, message = BAD_ROWS[what]
    clean = efficiency_rows()
    base = write_run(tmp_path / "base", clean)
    index = 3
    new = write_run(tmp_path / "new", clean)
    _write_lines(new, [json.dumps(r) + "\n" for r in _put(clean, index, change)])
    where = f"{new}/cases.jsonl:{index + 1}: "

    written = build_report([new], tmp_path / "out", find_task=find_task)
    err = capsys.readouterr().err
    assert err.count("warning: ") == 1 and f"warning: {where}{message}" in err and "; line skipped" in err
    with open(written["rows.csv"]) as fh:
        assert len(list(csv.DictReader(fh))) == len(clean) - 1  # every other row is there

    result = compare_runs(base, new, find_task=find_task)
    err = capsys.readouterr().err
    assert f"warning: {where}{message}" in err
    assert result.only_in_base == [clean[index]["case_id"]]  # the skipped case counts as missing


def test_100000_deep_json_is_skipped_by_report_and_compare(tmp_path, capsys):
    clean = efficiency_rows()
    base = write_run(tmp_path / "base", clean)
    new = write_run(tmp_path / "new", clean)
    lines = (new / "cases.jsonl").read_text().splitlines(keepends=True)
    lines.insert(2, DEEP + "\n")
    lines.insert(
        5,
        json.dumps(dict(clean[0], case_id="deep", series={"x": json.loads("[" * 60 + "]" * 60)}))[:-1].replace(
            '"series": {"x": ', '"series": {"x": ' + "[" * 1000
        )
        + "]" * 1000
        + "}\n",
    )
    _write_lines(new, lines)
    build_report([new], tmp_path / "out", find_task=find_task)
    err = capsys.readouterr().err
    assert f"{new}/cases.jsonl:3: not JSON (nested deeper than 64 levels); line skipped" in err
    assert f"{new}/cases.jsonl:6: " in err and "Traceback" not in err
    assert compare_runs(base, new, find_task=find_task).only_in_base == []


def test_a_retrieval_row_without_L_train_is_skipped_not_a_key_error(tmp_path, capsys):
    rows = retrieval_rows()
    del rows[1]["params"]["L_train"]
    run_dir = write_run(tmp_path, rows)
    written = build_report([run_dir], tmp_path / "out", find_task=find_task)
    err = capsys.readouterr().err
    assert (
        f"warning: {run_dir}/cases.jsonl:2: params: no 'L_train'; rows of task retrieval need L_train, probe; line skipped"
    ) in err
    assert rows[1]["method"] not in written["report.md"].read_text().split("Retrieval accuracy")[1].split("|")[:3]


def test_a_malformed_run_json_in_compare_is_one_line_exit_2(tmp_path, capsys):
    base = write_run(tmp_path / "base", efficiency_rows())
    new = write_run(tmp_path / "new", efficiency_rows())
    (new / "run.json").write_bytes(b'{"suite": "\xff"}')
    args = type("A", (), {"base": str(base), "new": str(new), "threshold": 0.05, "markdown": None})()
    assert main_compare(args, find_task=find_task) == 2
    assert capsys.readouterr().err.strip() == f"posbench compare: {new}/run.json: not UTF-8 text"


def _wps(rows, method, seq_len, value):
    for r in rows:
        if r["method"] == method and r["params"]["seq_len"] == seq_len:
            r["metrics"]["train_wps"] = value
    return rows


def test_a_baseline_of_zero_shows_the_ratio_as_n_a_and_compare_does_not_crash(tmp_path):
    rows = _wps(efficiency_rows(), "sinusoidal", 256, 0.0)
    run_dir = write_run(tmp_path / "new", rows)
    runs = load_runs(run_dir, find_task=find_task)
    from posbench.report.sections import collect_tables

    table = next(t for _, ts in collect_tables(runs) for t in ts if t.metric == "train_wps")
    assert table.cell("rotary", 256).text == "24.0k (n/a)" and table.cell("rotary", 256).ratio is None
    assert table.cell("rotary", 512).ratio is not None
    base = write_run(tmp_path / "base", efficiency_rows())
    result = compare_runs(base, run_dir, find_task=find_task)
    assert not [c for c in result.changes if c.case_id.endswith("sinusoidal/seq_len=256") and c.metric == "train_wps"]


def test_negative_and_huge_metrics_print_sanely_give_no_ratio_and_are_no_regression(tmp_path):
    rows = _wps(_wps(efficiency_rows(), "alibi", 512, -5.0), "rotary", 512, 1e308)
    run_dir = write_run(tmp_path / "new", rows)
    written = build_report([run_dir], tmp_path / "out", find_task=find_task)
    md = written["report.md"].read_text()
    assert not re.search(r"\d{20}", md), "a number printed with 20 or more digits"
    assert "-5.00 (n/a)" in md and "1e+308" in md
    assert not re.search(r"-\d[\d.]*x", md), "a negative ratio"
    base = write_run(tmp_path / "base", efficiency_rows())
    result = compare_runs(base, run_dir, find_task=find_task)
    flagged = {(c.case_id.split("/")[1], c.metric) for c in result.regressions}
    assert ("alibi", "train_wps") not in flagged
    text = result.markdown()
    assert not re.search(r"\d{20}", text)
    # a negative baseline against a positive value: no ratio either way, never a regression
    result = compare_runs(run_dir, base, find_task=find_task)
    assert ("alibi", "train_wps") not in {(c.case_id.split("/")[1], c.metric) for c in result.regressions}


def test_a_3_mb_message_is_cut_in_the_report_and_kept_whole_in_the_row(tmp_path):
    rows = efficiency_rows()
    failed = next(r for r in rows if r["status"] == "oom")
    failed["message"] = "x" * 3_000_000
    run_dir = write_run(tmp_path, rows)
    written = build_report([run_dir], tmp_path / "out", find_task=find_task)
    html = written["report.html"].read_text()
    assert "x" * 3_000_000 not in html and html.count("x" * 501) == 0
    assert "[cut: 3,000,000 characters in all; the stored row keeps them]" in html
    assert "x" * 3_000_000 not in written["report.md"].read_text()
    assert "x" * 3_000_000 in written["rows.csv"].read_text()  # the raw rows keep it


def test_a_family_metric_whose_column_is_4000_digits_is_a_word_not_a_crash(tmp_path):
    from tests.helpers.report_rows import precision_rows

    rows = precision_rows()
    ok = next(r for r in rows if r["status"] == "ok" and "final_train_loss" in r["metrics"])
    ok["metrics"]["ppl@float32_bias@" + "9" * 4000] = 20.0
    run_dir = write_run(tmp_path, rows)
    written = build_report([run_dir], tmp_path / "out", find_task=find_task)
    assert all(len(p.name) < 255 for p in written.values())
