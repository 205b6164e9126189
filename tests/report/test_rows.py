"""posbench.report.rows: a row's shape, reading cases.jsonl, the latest row per case, run.json, loading runs."""

import json

import pytest

from posbench import tasks
from posbench.report.rows import load_runs
from posbench.store.bounds import RowsError, check_row
from posbench.store.meta import RUN_FILE, RunMeta, read_env, read_run_meta, write_run_meta
from posbench.store.run_rows import latest, read_rows
from posbench.tasks import find as find_task
from tests.helpers.report_rows import base_row, efficiency_rows, write_run


def _write(path, lines: list[str], end="\n"):
    path.write_text("\n".join(lines) + end)
    return path


def _row(case_id="a/n=1", started="2024-06-01T12:00:00+00:00", run_id="run", **extra):
    return base_row("s", "efficiency", "alibi", {"n": 1}, run_id, case_id=case_id, started_at=started, **extra)


def test_read_rows_in_file_order_and_missing_file_is_empty(tmp_path):
    a, b = _row("a"), _row("b")
    path = _write(tmp_path / "cases.jsonl", [json.dumps(a), "", json.dumps(b)])
    assert read_rows(path) == [a, b]
    assert read_rows(tmp_path / "nothing.jsonl") == []


def test_a_torn_last_line_is_skipped_with_or_without_newline(tmp_path):
    good = json.dumps(_row())
    for end in ("", "\n"):
        path = _write(tmp_path / "cases.jsonl", [good, '{"case_id": "b", "sta'], end=end)
        assert [r["case_id"] for r in read_rows(path)] == ["a/n=1"]


def test_a_bad_line_before_the_last_is_skipped_with_one_warning_naming_file_and_line(tmp_path):
    good = json.dumps(_row())
    path = _write(tmp_path / "cases.jsonl", [good, "{not json", good])
    problems = []
    assert len(read_rows(path, problems)) == 2
    assert len(problems) == 1 and problems[0].startswith(f"{path}:2: not JSON (")
    assert problems[0].endswith("; line skipped") and "\n" not in problems[0]


@pytest.mark.parametrize(
    "change, message",
    [
        (lambda r: r.pop("status"), "row has no 'status'; a row needs case_id, method, status, params, metrics"),
        (lambda r: r.update(params=[1]), "params: expected an object, got list"),
        (lambda r: r.update(method=None), "method: expected a string, got NoneType"),
        (lambda r: r.update(series="x"), "series: expected an object, got str"),
        (lambda r: r["metrics"].update(train_wps="fast"), 'metrics.train_wps: expected a number or null, got "fast"'),
        (lambda r: r["metrics"].update(ok=True), "metrics.ok: expected a number or null, got true"),
    ],
)
def test_a_malformed_row_is_one_line_naming_file_and_line(tmp_path, change, message):
    bad = _row("b")
    change(bad)
    path = _write(tmp_path / "cases.jsonl", [json.dumps(_row()), json.dumps(bad), json.dumps(_row("c"))])
    problems = []
    assert [r["case_id"] for r in read_rows(path, problems)] == ["a/n=1", "c"]
    assert problems == [f"{path}:2: {message}; line skipped"]


def test_check_row_accepts_a_runner_row_and_rejects_a_list():
    assert check_row(_row(), "x:1")["case_id"] == "a/n=1"
    with pytest.raises(RowsError, match=r"^x:1: expected a JSON object per line, got list$"):
        check_row([1], "x:1")


def test_latest_one_rule_started_at_then_order_read():
    first = _row("a", "2024-06-01T12:00:00+00:00", status="error")
    retry = _row("a", "2024-06-01T12:05:00+00:00")
    other = _row("b", "2024-06-01T12:01:00+00:00")
    # order read does not matter when the times differ: the later start wins
    assert latest([retry, other, first])["a"] is retry
    assert list(latest([first, other, retry])) == ["a", "b"]  # keys in the order first seen
    # equal times (or none): the row read last wins
    same = _row("a", "2024-06-01T12:05:00+00:00", status="timeout")
    assert latest([retry, same])["a"] is same
    assert latest([_row("a", None, status="error"), _row("a", None)])["a"]["status"] == "ok"
    # a row without a time is older than any with one
    assert latest([retry, _row("a", None, status="error")])["a"] is retry


def test_latest_per_run_keeps_each_runs_row():
    a1, a2 = _row("a", run_id="r1"), _row("a", run_id="r2")
    assert list(latest([a1, a2], key=lambda r: (r["run_id"], r["case_id"])).values()) == [a1, a2]


def test_run_meta_round_trip_and_errors(tmp_path):
    meta = RunMeta(
        suite="kernels",
        version=2,
        task="kernels",
        baseline="triton_no_bias",
        methods=["alibi_triton", "triton_no_bias"],
        metrics=["fwdbwd_ms"],
        settings={"reps": 20},
        grid={"seq_len": [512]},
        profile="gpu",
        device="cuda",
        run_id="r",
    )
    path = write_run_meta(tmp_path, meta)
    assert path == tmp_path / RUN_FILE and read_run_meta(tmp_path) == meta
    assert json.loads(path.read_text())["baseline"] == "triton_no_bias"
    assert read_run_meta(tmp_path / "old-run") is None  # runs written before run.json existed
    path.write_text('{"suite": "k"}')
    with pytest.raises(RowsError, match=r"run.json: no 'version'; run.json needs suite, version, task, baseline"):
        read_run_meta(tmp_path)
    path.write_text("{\n  oops")
    with pytest.raises(RowsError, match=r"run.json:2: not JSON"):
        read_run_meta(tmp_path)


def test_run_meta_of_a_suite(tmp_path):
    from posbench.run import suite as suitemod

    suite = suitemod.resolve(suitemod.load("kernels"), "cpu")
    meta = RunMeta.of_suite(suite, "cpu", "run-1")
    assert (meta.suite, meta.task, meta.baseline) == ("kernels", "kernels", "triton_no_bias")
    assert meta.methods == suite.methods and meta.metrics == suite.metrics and meta.grid == suite.grid
    assert meta.settings == suite.settings.model_dump() and meta.version == suite.version
    assert all(m in tasks.get("kernels").METRICS for m in meta.metrics)


def test_load_runs_keeps_latest_per_run_and_case_and_carries_metas(tmp_path):
    rows = efficiency_rows()
    retry = json.loads(json.dumps(rows[0]))
    retry["metrics"]["train_wps"] = 1.0
    retry["started_at"] = "2024-06-01T13:00:00+00:00"
    run_dir = write_run(tmp_path, [retry] + rows)  # the retry is first in the file but started later
    runs = load_runs(tmp_path, find_task=find_task)
    assert len(runs.rows) == 15
    first = runs.rows[runs.rows["case_id"] == rows[0]["case_id"]].iloc[0]
    assert first["metrics"]["train_wps"] == 1.0
    assert runs.metas[str(run_dir)].baseline == "sinusoidal" and runs.meta_of([str(run_dir)]).task == "efficiency"
    assert runs.envs[str(run_dir)]["cpu"] == "Test CPU 9000"


def test_load_runs_skips_a_malformed_row_with_one_warning(tmp_path):
    rows = efficiency_rows()
    run_dir = write_run(tmp_path, rows)
    rows[3]["params"] = "seq_len=512"
    (run_dir / "cases.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    said = []
    runs = load_runs(tmp_path, report=said.append, find_task=find_task)
    assert len(runs.rows) == len(rows) - 1
    assert said == runs.problems == [f"{run_dir}/cases.jsonl:4: params: expected an object, got str; line skipped"]


def test_bytes_that_are_not_utf8_name_file_and_line(tmp_path):
    good = json.dumps(_row()).encode()
    path = tmp_path / "cases.jsonl"
    path.write_bytes(good + b"\n" + b'{"case_id": "\xff\xfe"}\n' + good + b"\n")
    problems = []
    assert len(read_rows(path, problems)) == 2
    assert problems == [f"{path}:2: not UTF-8 text; line skipped"]
    # a last line cut inside a multi-byte character is a torn write: skipped like torn JSON
    path.write_bytes(good + b"\n" + good[:-3] + "é".encode()[:1] + b"\n")
    assert [r["case_id"] for r in read_rows(path)] == ["a/n=1"]
    env = tmp_path / "env.json"
    env.write_bytes(b'{"python": "\xff"}')
    with pytest.raises(RowsError, match=r"env.json: not UTF-8 text$"):
        read_env(tmp_path)
