"""Hardening rounds 5 and 6 (issues 56, 67), a regression of round 3: a cases.jsonl whose last row lost its
newline keeps that row everywhere: the resumed run counts it done, and its printed table and
table.md show it."""

import json
import re

import pytest

from posbench.cli import app as cli
from tests.helpers.suites import make_suite


@pytest.mark.subprocess
def test_the_last_row_without_newline_stays_in_the_printed_table(tmp_path, capsys):
    make_suite(tmp_path, ["sinusoidal", "alibi"], grid="[1]")
    base = ["--suite", str(tmp_path / "t.yaml"), "--device", "cpu", "--results", str(tmp_path / "res"), "--run-id", "r"]
    assert cli.main(base) == 0
    rows = tmp_path / "res" / "t" / "r" / "cases.jsonl"
    rows.write_bytes(rows.read_bytes().rstrip(b"\n"))
    capsys.readouterr()
    assert cli.main(base) == 0
    out = capsys.readouterr().out
    assert "0 case(s) run, 2 already done" in out
    table = [line for line in out.splitlines() if line.startswith(("sinusoidal", "alibi", "| sinusoidal", "| alibi"))]
    assert len(table) == 2, out
    assert "alibi" in (tmp_path / "res" / "t" / "r" / "table.md").read_text()


@pytest.mark.subprocess
def test_the_last_row_without_newline_stays_in_the_table_of_a_run_that_adds_rows(tmp_path, capsys):
    # issue 67: three methods in rounds, the last row (the third method's last round) without its
    # newline; the next run appends a joining method's rows after it (the newline put back first)
    make_suite(tmp_path, ["sinusoidal", "alibi", "rotary"], grid="[1]", rounds=2)
    base = ["--suite", str(tmp_path / "t.yaml"), "--device", "cpu", "--results", str(tmp_path / "res"), "--run-id", "r"]
    assert cli.main(base) == 0
    rows = tmp_path / "res" / "t" / "r" / "cases.jsonl"
    rows.write_bytes(rows.read_bytes().rstrip(b"\n"))
    capsys.readouterr()
    assert cli.main([*base, "--methods", "sinusoidal,alibi,rotary,nope"]) == 0
    out = capsys.readouterr().out
    assert "case(s) run, 6 already done" in out
    table = [line.split()[0] for line in out.splitlines() if line.startswith(("sinusoidal ", "alibi ", "rotary ", "nope "))]
    assert sorted(table) == ["alibi", "nope", "rotary", "sinusoidal"], out
    assert all(json.loads(line)["case_id"] for line in rows.read_bytes().splitlines())  # a row a line


def _undertrained_run(tmp_path, bound: float):
    """An extrapolation run folder of sinusoidal (23.1 at L_train) and alibi (14.1), with the
    source's bound ``bound``, as a run of the cpu profile narrowed to those two writes it."""
    from tests.helpers.report_rows import base_row, write_run

    rows = []
    for method, at_train in (("sinusoidal", 23.1), ("alibi", 14.1)):
        row = base_row("extrapolation", "extrapolation", method, {"L_train": 64}, "run-u")
        row["case_id"] = f"{method}/L_train=64"
        row["metrics"] = {"ppl_at_train_len": at_train, "ppl_at_max_len": 30.0, "best_ppl_eval": bound}
        rows.append(row)
    return write_run(tmp_path, rows, metrics=["ppl_at_train_len", "ppl_at_max_len"]), rows


@pytest.mark.subprocess  # bench.py run reads the method files in a child
@pytest.mark.parametrize("bound, code", [(5.0, 3), (7.65, 0)])
def test_a_run_whose_every_method_failed_learn_first_exits_3(tmp_path, monkeypatch, capsys, bound, code):
    """Issue 66: ``BROKEN PROFILE: 0 of 2 learnt`` exited 0. Both far from the bound: exit 3 (one
    line naming the table; --allow-failures gives 0); alibi learnt at bound 7.65: exit 0 (the
    table says BROKEN PROFILE: 1 of 2, but one method learnt)."""
    from posbench.run import runner

    run_dir, rows = _undertrained_run(tmp_path / "res", bound)
    monkeypatch.setattr(runner, "run_suite", lambda suite, options: runner.RunResult(run_dir, "run-u", rows, 0, 2))
    argv = ["--suite", "extrapolation", "--device", "cpu", "--profile", "cpu", "--results", str(tmp_path / "res")]
    assert cli.main([*argv, "--run-id", "run-u", "--quiet"]) == code
    err = capsys.readouterr().err
    assert ("BROKEN PROFILE: 0 of 2 learnt the task at L_train; exit status 3" in err) == (code == 3)
    assert cli.main([*argv, "--run-id", "run-u", "--quiet", "--allow-failures"]) == 0


@pytest.mark.subprocess  # a run: a worker process per job
def test_progress_a_first_line_a_counter_without_gaps_and_group_times_said_once(tmp_path, capsys, never_here):
    """Issue 66: nothing was printed before the first group ended, the counter skipped numbers
    (``[10/105]`` then ``[13/105]``: unavailable rows hidden but counted) and every line of a group
    showed the group's time."""
    make_suite(tmp_path, ["sinusoidal", "rotary", never_here], grid="[1, 2]", rounds=2, pairing="windows")
    argv = ["--suite", str(tmp_path / "t.yaml"), "--device", "cpu", "--results", str(tmp_path / "res"), "--run-id", "r"]
    assert cli.main(argv) == 0
    lines = capsys.readouterr().out.splitlines()
    run_dir = tmp_path / "res" / "t" / "r"
    # the first line, printed once planned (before any worker): what runs, how many, where
    assert lines[0] == (
        f"t: 6 case(s) to run (12 runs: a row per case and round): sinusoidal, rotary, never_here; "
        f"0 already done; rows go to {run_dir}/cases.jsonl"
    )
    # each paired group says so as it starts (its rows come only when it ends), the first at once
    started = [line for line in lines if " started: " in line]
    assert len(started) == 4 and lines[1] == started[0]
    form = r"\[\d+-\d+/8\] started: 2 methods at n=[12] round [12]/2 \((sinusoidal, rotary|rotary, sinusoidal); paired windows, "
    assert all(re.fullmatch(form + r"their lines when all end\)", line) for line in started)
    assert [line.split()[0] for line in started] == ["[1-2/8]", "[3-4/8]", "[5-6/8]", "[7-8/8]"]
    numbered = [line for line in lines if line.startswith("[") and not line.startswith("[-]") and line not in started]
    assert [line.split()[0] for line in numbered] == [f"[{k}/8]" for k in range(1, 9)]  # 4 rows set aside
    assert sum(line.startswith("[-] never_here") for line in lines) == 1  # said once for the method
    # each case's line shows its share of its group; the group's own time is said once per group
    assert all("1/2 of its group's time" in line for line in numbered)
    groups = [line for line in lines if "methods at n=" in line and "in one worker (paired windows)" in line]
    assert len(groups) == 4
    summary = next(line for line in lines if "case(s) run" in line)
    assert summary.startswith("8 case(s) run, 0 already done (rows: 4 case(s) x their rounds), 4 unavailable here; rows in")
    stored = [json.loads(line) for line in (run_dir / "cases.jsonl").read_text().splitlines()]
    assert sum(r["status"] != "unavailable" for r in stored) == 8  # the count the summary and counter end at
    assert all(r["info"]["pairing"] == "windows" for r in stored if r["status"] == "ok")  # the worker's info kept


@pytest.mark.subprocess  # bench.py run reads the method files in a child
def test_dry_run_says_why_each_case_runs_and_estimates_the_time(tmp_path, capsys):
    """Issue 66: ``--dry-run`` on an existing folder gave no reason and no time. Each case says
    why it runs; the time comes from the folder's recorded case times."""
    from tests.helpers.report_rows import base_row, write_run

    make_suite(tmp_path, ["sinusoidal", "rotary"], grid="[1, 2]")
    rows = []
    for method, n, status in (("sinusoidal", 1, "ok"), ("sinusoidal", 2, "error"), ("rotary", 1, "ok")):
        row = base_row("t", "_testing", method, {"n": n}, "r", status=status, duration_s=30.0)
        rows.append(dict(row, case_id=f"{method}/n={n}"))
    write_run(tmp_path / "res", rows, methods=["sinusoidal", "rotary"])
    argv = ["--suite", str(tmp_path / "t.yaml"), "--device", "cpu", "--results", str(tmp_path / "res"), "--run-id", "r"]
    assert cli.main([*argv, "--dry-run", "--retry-failed", "--methods", "sinusoidal,rotary,alibi"]) == 0
    out = capsys.readouterr().out
    assert "  run   sinusoidal/n=2 (failed, retried)\n" in out
    assert "  run   rotary/n=2 (new)\n" in out
    # alibi joins a finished point with every method named: the point is measured again, paired
    assert "  run   sinusoidal/n=1 (measured again: a method joins its grid point)\n" in out
    assert "  run   alibi/n=1 (new, joining the run)\n" in out
    # six runs: four at 30 s (each case's own time, else its method's), alibi's two unknown
    assert out.rstrip().endswith(
        "time: about 2 min from this run folder's recorded case times, not counting 2 run(s) with no recorded time"
    )
