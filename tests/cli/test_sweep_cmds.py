"""The rest of issue 42's daily frictions (item 8): ``status`` on a plain run folder, ``--quiet``
keeping only errors and the final summary line, CUDA-only methods set aside in one note under a
run's own tables (their rows stay in cases.jsonl and in the report), the ``report`` epilog's run ids in the form runs have,
and launched sweeps (``status``, a followed sweep) exiting 3 when a case failed."""

import json
import re
import shlex
from pathlib import Path

import pytest

from posbench.cli import app as cli
from posbench.cli import report_cmds, sweep_cmds
from posbench.report.render import to_text
from posbench.report.rows import load_runs
from posbench.report.tabulate import metric_tables, run_tables
from posbench.run import suite as suitemod
from posbench.run import sweep_state
from posbench.run.options import default_run_id
from posbench.tasks import find as find_task
from tests.helpers.report_rows import base_row, efficiency_rows, write_run
from tests.helpers.suites import make_suite

# A run folder's name: <profile>-<device>-<8 hex digits of settings and grid>, -<date>-<time> with --fresh
RUN_ID = re.compile(r"[\w.]+-(cpu|cuda)-[0-9a-f]{8}(-\d{8}-\d{6})?")


def _status(run_dir, *more) -> int:
    return cli.main(["status", str(run_dir), *more])


def test_status_of_a_plain_run_folder_counts_its_cases_and_exits_3_on_a_failure(tmp_path, capsys):
    rows = efficiency_rows()
    rows[0].update(status="error", message="RuntimeError: boom", metrics={})  # sinusoidal at 256
    run_dir = write_run(tmp_path / "results", rows, metrics=["train_wps"])
    assert _status(run_dir) == cli.EXIT_CASES_FAILED
    out, err = capsys.readouterr()
    lines = out.splitlines()
    assert lines[0].startswith(f"{run_dir} (run folder, suite efficiency")
    assert lines[0].endswith("): 15 case(s): 10 ok, 3 unavailable, 1 error, 1 oom")
    assert lines[1].split() == ["efficiency/sinusoidal/seq_len=256", "error", "RuntimeError:", "boom"]
    assert lines[2].split() == ["efficiency/t5_bias/seq_len=1024", "oom", "CUDA", "out", "of", "memory"]
    assert lines[3].startswith("re-run the error and timeout cases: ")
    rerun = shlex.split(lines[3].split(": ", 1)[1])
    assert rerun[:2] == ["python", "bench.py"] and rerun[-3:] == ["--run-id", "run-a", "--retry-failed"]
    assert rerun[2:4] == ["--suite", "efficiency"] and rerun[rerun.index("--results") + 1] == str(tmp_path / "results")
    assert "2 case(s) failed (1 error, 1 oom); exit status 3" in err
    assert _status(run_dir, "--allow-failures") == 0
    assert capsys.readouterr().err == ""  # the failures are in the lines above already


def test_status_of_a_run_folder_without_failures_exits_0_and_names_each_status(tmp_path, capsys):
    rows = [r for r in efficiency_rows() if r["status"] != "oom"]
    run_dir = write_run(tmp_path, rows)
    assert _status(run_dir) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0].endswith("14 case(s): 11 ok, 3 unavailable") and "re-run" not in out


def test_status_of_a_folder_that_holds_no_run_is_one_line(tmp_path, capsys):
    assert _status(tmp_path) == cli.EXIT_USAGE
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "no cases.jsonl and no launcher.json; allowed: a run folder" in err


def test_status_of_a_missing_folder_is_a_plain_line(tmp_path, capsys):
    assert _status(tmp_path / "nope") == cli.EXIT_USAGE
    err = capsys.readouterr().err
    assert err.startswith(f"status: {tmp_path / 'nope'}: no such folder; allowed: a run folder (results/<suite>/<run-id>)")
    assert err.count("\n") == 1
    assert "PoolError" not in err


class _Unit:
    def __init__(self, state):
        self.state, self.exit_code, self.reason = state, "", ""


def _sweep(monkeypatch, run_dir: Path, words: list[str]) -> None:
    """``sweep_state.status`` of a launched sweep whose units ended as ``words`` (done/failed)."""
    units = [
        (f"n={i}", {"todo": [[{}, 1]], "job_id": f"7_{i}"}, _Unit("COMPLETED" if w == "done" else "FAILED"), w, 1)
        for i, w in enumerate(words, 1)
    ]
    monkeypatch.setattr(sweep_state, "status", lambda folder: ({"launcher": "local", "command": ["--suite", "t"]}, units))


def test_a_launched_sweep_with_a_failed_case_exits_3_unless_failures_are_allowed(tmp_path, monkeypatch, capsys):
    rows = [
        base_row("t", "_testing", m, {"n": 1}, "r", status=s, message="boom" if s == "error" else "")
        for m, s in (("sinusoidal", "ok"), ("alibi", "error"))
    ]
    run_dir = write_run(tmp_path, rows)
    _sweep(monkeypatch, run_dir, ["done", "failed"])
    assert sweep_cmds.print_status(run_dir) == cli.EXIT_CASES_FAILED
    out, err = capsys.readouterr()
    assert "1 done, 1 failed" in out and "resubmit what failed: " in out and "exit status 3" in err
    assert sweep_cmds.print_status(run_dir, allow_failures=True) == 0
    assert _status(run_dir) == cli.EXIT_CASES_FAILED and _status(run_dir, "--allow-failures") == 0


def test_a_followed_sweep_whose_table_learnt_nothing_exits_3(tmp_path, capsys):
    """Issue 66: a run (or a followed sweep) whose learn-first table says 0 of N learnt exits 3."""
    units = [("n=1", {"todo": [[{}, 1]], "job_id": "7_1"}, _Unit("COMPLETED"), "done", 1)]
    rows = [base_row("t", "_testing", "sinusoidal", {"n": 1}, "r")]
    broken = ["Copy gain, L_train = 64 — BROKEN PROFILE: 0 of 2 learnt the task at L_train"]
    record = {"launcher": "local", "command": []}
    assert sweep_cmds.print_units(tmp_path, record, units, rows, False, True, broken) == cli.EXIT_CASES_FAILED
    assert "BROKEN PROFILE: 0 of 2 learnt the task at L_train; exit status 3" in capsys.readouterr().err
    assert sweep_cmds.print_units(tmp_path, record, units, rows, True, True, broken) == 0
    assert sweep_cmds.print_units(tmp_path, record, units, rows, False, True) == 0


def test_a_launched_unit_that_failed_without_a_row_still_exits_3(tmp_path, monkeypatch, capsys):
    run_dir = write_run(tmp_path, [base_row("t", "_testing", "sinusoidal", {"n": 1}, "r")])
    _sweep(monkeypatch, run_dir, ["done", "failed"])
    assert sweep_cmds.print_status(run_dir) == cli.EXIT_CASES_FAILED
    assert "1 unit(s) failed; exit status 3" in capsys.readouterr().err
    _sweep(monkeypatch, run_dir, ["done", "done"])
    assert sweep_cmds.print_status(run_dir, quiet=True) == 0
    out = capsys.readouterr().out
    assert out.count("\n") == 1 and "2 done, 0 failed" in out  # --quiet: the summary line alone


@pytest.mark.subprocess  # a run: a worker process per case
def test_quiet_prints_only_the_final_summary_line_and_the_errors(tmp_path, capsys):
    make_suite(tmp_path, ["sinusoidal", "rotary"], grid="[1, 2]", by_method={"rotary/n=2": "raise"})
    argv = ["--suite", str(tmp_path / "t.yaml"), "--device", "cpu", "--results", str(tmp_path / "res"), "--fresh"]
    assert cli.main(argv + ["--quiet"]) == cli.EXIT_CASES_FAILED
    out, err = capsys.readouterr()
    (run_dir,) = (tmp_path / "res" / "t").iterdir()
    assert out == f"4 case(s) run, 0 already done; rows in {run_dir}/cases.jsonl, tables in {run_dir}/table.md\n"
    assert (
        err == "1 case(s) failed (1 error); exit status 3 (--allow-failures gives 0; --retry-failed re-runs error and timeout)\n"
    )
    assert "Value, t" in (run_dir / "table.md").read_text()  # written, not printed
    assert RUN_ID.fullmatch(run_dir.name), run_dir.name  # the --fresh form the report epilog shows
    # without --quiet: a line per case and the tables, as before
    assert cli.main(argv + ["--allow-failures"]) == 0
    out = capsys.readouterr().out
    assert out.count("[") >= 4 and "Value, t" in out and "table: " in out


def test_cuda_only_methods_leave_a_cpu_table_for_one_note_naming_them_and_why(tmp_path):
    rows = efficiency_rows()
    for L in (256, 512, 1024):
        rows.append(
            base_row(
                "efficiency",
                "efficiency",
                "t5_triton",
                {"seq_len": L},
                "run-a",
                status="unavailable",
                message="needs a CUDA GPU and triton",
            )
        )
    run_dir = write_run(tmp_path, rows, metrics=["train_wps"])
    (table,) = run_tables(load_runs(run_dir, find_task=find_task))
    assert table.rows == ["sinusoidal", "rotary", "t5_bias", "alibi"]
    assert table.note == (
        "Not run on this machine (unavailable): alibi_triton (needs CUDA and triton); t5_triton (needs a CUDA GPU and triton)."
    )
    text = to_text(table)
    assert "unavailable  unavailable" not in text and text.rstrip().endswith(table.note)
    assert table.caption.endswith(table.note)
    assert table.cell("t5_bias", 1024).text == "OOM"  # a failure keeps its cell
    # the report keeps the rows (and their legend entries): only a run's own tables set them aside
    assert "alibi_triton" in metric_tables(load_runs(run_dir, find_task=find_task), "efficiency", metrics=["train_wps"])[0].rows
    kept = [json.loads(line) for line in (run_dir / "cases.jsonl").read_text().splitlines()]
    assert sum(r["method"] in ("alibi_triton", "t5_triton") for r in kept) == 6  # the rows stay


def test_a_table_of_nothing_but_unavailable_methods_keeps_showing_them(tmp_path):
    rows = [r for r in efficiency_rows() if r["method"] == "alibi_triton"]
    run_dir = write_run(tmp_path, rows, metrics=["train_wps"], baseline=None)
    (table,) = run_tables(load_runs(run_dir, find_task=find_task))
    assert table.rows == ["alibi_triton"] and table.note == ""


def test_report_epilog_names_run_folders_as_runs_name_them():
    suite = suitemod.resolve(suitemod.load("efficiency"), "cpu", {})
    assert RUN_ID.fullmatch(default_run_id(suite, "cpu"))
    for epilog in (report_cmds.REPORT_EPILOG, report_cmds.COMPARE_EPILOG):
        ids = re.findall(r"results/\w+/([^\s/]+)", epilog)
        assert ids and all(RUN_ID.fullmatch(i) for i in ids), ids
    assert "2024-06-01T12-00-00" not in report_cmds.REPORT_EPILOG


@pytest.mark.subprocess  # a local job array: a process per unit
def test_a_followed_local_sweep_with_a_failed_case_exits_3_and_quiet_keeps_one_line(tmp_path, capsys):
    make_suite(tmp_path, ["sinusoidal", "alibi"], threads=1, timeout_s=60, by_method={"alibi": "raise"})
    argv = [
        "--suite",
        str(tmp_path / "t.yaml"),
        "--results",
        str(tmp_path / "res"),
        "--device",
        "cpu",
        "--launcher",
        "local",
        "--quiet",
    ]
    assert cli.main(argv) == cli.EXIT_CASES_FAILED
    out, err = capsys.readouterr()
    (run_dir,) = (tmp_path / "res" / "t").iterdir()
    assert out.splitlines()[0] == f"{run_dir} (local, 1 units): 0 queued, 0 running, 0 done, 1 failed"
    assert out.splitlines()[1].startswith("resubmit what failed: ") and len(out.splitlines()) == 2
    assert "1 case(s) failed (1 error); exit status 3" in err and (run_dir / "table.md").is_file()
    assert _status(run_dir) == cli.EXIT_CASES_FAILED and _status(run_dir, "--allow-failures") == 0
