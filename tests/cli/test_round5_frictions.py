"""Hardening round 5 (issue 56): a newcomer's frictions. A mistyped option or command gets "did
you mean"; ``--parallel 2 --dry-run`` refuses what the run refuses; ``status`` takes a folder of
runs as ``report`` does; a run's output folds repeated unavailable cases into one line per method
and ends by pointing at ``bench.py report``."""

import pytest

from posbench.cli import app as cli
from tests.helpers.report_rows import efficiency_rows, write_run
from tests.helpers.suites import make_suite


def test_a_mistyped_option_or_command_gets_did_you_mean(capsys):
    for argv, said in [
        (["--sute", "efficiency"], "unrecognized arguments: --sute efficiency (did you mean --suite?)"),
        (["report", "x", "--outt", "y"], "unrecognized arguments: --outt y (did you mean --out?)"),
    ]:
        with pytest.raises(SystemExit) as info:
            cli.main(argv)
        assert info.value.code == cli.EXIT_USAGE
        err = capsys.readouterr().err
        assert said in err and "required" not in err
    assert cli.main(["lst"]) == cli.EXIT_USAGE
    assert "'lst' is not a command (did you mean 'list'?)" in capsys.readouterr().err
    assert cli.main([]) == cli.EXIT_USAGE
    assert capsys.readouterr().err.startswith("SuiteError: --suite is required")


@pytest.mark.subprocess  # the CLI reads the method files in a child process
def test_parallel_dry_run_refuses_what_the_run_refuses(tmp_path, capsys):
    argv = ["--suite", "efficiency", "--profile", "cpu", "--results", str(tmp_path), "--parallel", "2", "--dry-run"]
    assert cli.main(argv) == cli.EXIT_USAGE
    out, err = capsys.readouterr()
    assert out == "" and "--parallel 2: task 'efficiency' times its methods" in err


def test_status_of_a_folder_of_runs_gives_each_runs_line(tmp_path, capsys):
    rows = efficiency_rows()
    first = write_run(tmp_path / "results", rows)
    second = write_run(tmp_path / "results", [dict(r, run_id="run-b") for r in rows], run_id="run-b")
    assert cli.main(["status", str(first.parent)]) == cli.EXIT_CASES_FAILED  # the oom row of each
    lines = capsys.readouterr().out.splitlines()
    assert [line.split(" ")[0] for line in lines] == [str(first), str(second)]


@pytest.mark.subprocess
def test_unavailable_cases_are_said_once_per_method_and_the_run_points_to_report(tmp_path, never_here, capsys):
    make_suite(tmp_path, ["sinusoidal", never_here], grid="[1, 2, 3]")
    run = tmp_path / "res" / "t" / "r"
    argv = ["--suite", str(tmp_path / "t.yaml"), "--device", "cpu", "--results", str(tmp_path / "res"), "--run-id", "r"]
    assert cli.main(argv) == 0
    out = capsys.readouterr().out
    assert sum("never_here" in line and "unavailable" in line for line in out.splitlines() if line.startswith("[")) == 1
    assert "(2 more unavailable case(s) of the methods above not shown; their rows are in cases.jsonl)" in out
    assert f"charts and the full report: python bench.py report {run}" in out
