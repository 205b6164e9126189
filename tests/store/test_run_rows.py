"""The one rows reader merges a launched sweep's per-task rows files (``rows/<unit>.jsonl``)
with ``cases.jsonl``: report, compare and resume see one run, the latest row of a case winning
whichever file holds it."""

import json
import os

import pytest

from posbench.report import rows as rowsmod
from posbench.run import suite as suitemod
from posbench.run.options import RunOptions
from posbench.run.schedule import plan_rounds
from posbench.store.bounds import RowsError
from posbench.store.row import make_row
from posbench.store.run_rows import merge_rounds, read_run_rows, rows_files
from posbench.tasks import find as find_task
from tests.helpers.report_rows import efficiency_rows, write_run
from tests.helpers.suites import make_suite


def _write(path, rows):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def test_report_reads_cases_jsonl_and_every_task_rows_file_as_one_run(tmp_path):
    rows = efficiency_rows("run-a")
    run_dir = write_run(tmp_path, rows[:5])
    _write(run_dir / "rows" / "seq_len-256-x.jsonl", rows[5:10])
    _write(run_dir / "rows" / "seq_len-512-y.jsonl", rows[10:])
    late = dict(rows[0], metrics={**rows[0]["metrics"], "train_wps": 1.0}, started_at="2024-06-02T00:00:00+00:00")
    _write(run_dir / "rows" / "zz-retry.jsonl", [late])  # a retried case in a later task file
    (run_dir / "rows" / "notes.txt").write_text("not rows")  # only *.jsonl files are rows
    assert [p.name for p in rows_files(run_dir)] == [
        "cases.jsonl",
        "seq_len-256-x.jsonl",
        "seq_len-512-y.jsonl",
        "zz-retry.jsonl",
    ]
    runs = rowsmod.load_runs(tmp_path, find_task=find_task)
    assert len(runs.rows) == len(rows) and set(runs.rows["source"]) == {str(run_dir)}
    first = runs.rows[runs.rows["case_id"] == rows[0]["case_id"]].iloc[0]
    assert first["metrics"]["train_wps"] == 1.0  # the latest row, from the task's file


def test_a_bad_line_in_a_task_file_is_named_and_skipped(tmp_path):
    rows = efficiency_rows("run-a")
    run_dir = write_run(tmp_path, rows[:2])
    (run_dir / "rows").mkdir()
    (run_dir / "rows" / "u.jsonl").write_text(json.dumps(rows[2]) + "\n{broken\n")
    problems = []
    got = read_run_rows(run_dir, problems)
    assert [r["case_id"] for r in got] == [r["case_id"] for r in rows[:3]]
    assert len(problems) == 1 and f"{run_dir / 'rows' / 'u.jsonl'}:2" in problems[0]


def test_a_rows_folder_that_is_a_link_is_refused(tmp_path):
    run_dir = write_run(tmp_path, efficiency_rows("run-a")[:1])
    (tmp_path / "elsewhere").mkdir()
    os.symlink(tmp_path / "elsewhere", run_dir / "rows")
    with pytest.raises(RowsError, match="symbolic link"):
        read_run_rows(run_dir)


def test_resume_skips_cases_whose_rows_are_in_task_files(tmp_path):
    suite = suitemod.resolve(suitemod.load(make_suite(tmp_path, ["sinusoidal", "alibi"], grid="[1, 2]")), "default")
    run_dir = tmp_path / "res" / "t" / "r"
    cases = {c.id: c for c in suite.cases("cpu", "r")}
    done = make_row(
        cases["alibi/n=2"], {"status": "ok", "metrics": {"value": 2000}}, __import__("datetime").datetime.now(), 0.1, "abc"
    )
    _write(run_dir / "rows" / "n-2-abcd.jsonl", [done])
    (run_dir / "cases.jsonl").touch()
    plan = plan_rounds(suite, RunOptions("cpu", run_dir.parent), "r", run_dir)
    todo, finished = plan.todo, plan.done
    assert [c.id for c, _r in todo] == ["sinusoidal/n=1", "alibi/n=1", "sinusoidal/n=2"]
    assert list(finished) == [("alibi/n=2", 1)]


def test_a_case_with_one_round_timed_apart_claims_no_pairing():
    # a join resumed unpaired: round 1 measured with the others, rounds 2-3 alone (info.paired
    # false); the merged row carries the mark, so the table prints its ratio unpaired
    row = {"case_id": "alibi/n=1", "method": "alibi", "params": {"n": 1}, "status": "ok", "metrics": {"value": 1.0}}
    rows = [dict(row, round=1, info={"pairing": "rounds"})]
    rows += [dict(row, round=r, info={"paired": False}) for r in (2, 3)]
    merged = merge_rounds(rows)
    assert merged["info"] == {"pairing": "rounds", "paired": False} and rows[0]["info"] == {"pairing": "rounds"}
    assert "paired" not in merge_rounds(rows[:1] + [dict(row, round=2)]).get("info", {})
