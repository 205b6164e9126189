"""Hardening round 5 (issue 56): resuming ``--run-id`` with other settings refuses in one line
(rows measured under the old ones are never mixed with new ones, run.json is never rewritten),
and ``status``'s re-run command is the run's own command (its ``--set`` included)."""

import json
import shlex

import pytest

from posbench.cli import app as cli
from tests.helpers.suites import make_suite


@pytest.mark.subprocess
def test_run_id_with_other_settings_refuses_and_status_reruns_the_exact_command(tmp_path, capsys):
    make_suite(tmp_path, ["sinusoidal", "alibi"], grid="[1, 2]")
    base = ["--suite", str(tmp_path / "t.yaml"), "--device", "cpu", "--results", str(tmp_path / "res"), "--quiet"]
    first = base + ["--run-id", "r", "--set", 'by_method={"alibi/n=2": "raise"}', "--set", "grid.n=[1, 2]"]
    assert cli.main(first) == cli.EXIT_CASES_FAILED
    run_dir = tmp_path / "res" / "t" / "r"
    rows, meta = (run_dir / "cases.jsonl").read_text(), (run_dir / "run.json").read_text()
    capsys.readouterr()

    assert cli.main(base + ["--run-id", "r", "--set", "grid.n=[1, 3]"]) == cli.EXIT_USAGE
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--run-id r: this command's by_method, grid.n differ from the run folder's" in err
    assert (run_dir / "cases.jsonl").read_text() == rows and (run_dir / "run.json").read_text() == meta

    assert cli.main(["status", str(run_dir)]) == cli.EXIT_CASES_FAILED
    line = [x for x in capsys.readouterr().out.splitlines() if x.startswith("re-run the error")][0]
    rerun = shlex.split(line.split(": ", 1)[1])
    assert rerun[:2] == ["python", "bench.py"] and rerun[-3:] == ["--run-id", "r", "--retry-failed"]
    assert rerun[2:-3] == [a for a in first if a not in ("--run-id", "r")]
    assert json.loads(meta)["command"] == ["python", "bench.py", *first]
    # the dry run of that command plans this run's failed case, nothing else
    assert cli.main(rerun[2:] + ["--dry-run"]) == 0
    planned = [x.split()[1] for x in capsys.readouterr().out.splitlines() if x.startswith("  run ")]
    assert planned == ["alibi/n=2"]


# Hardening round 5 (issue 56): valid input that was refused. ``--methods cope --set
# method_options={cope: ...}`` (the method joins through ``--methods``) and a ``--data`` folder
# whose name holds an emoji.


def _run(argv, capsys):
    code = cli.main(argv)
    out = capsys.readouterr()
    return code, out.out, out.err


@pytest.mark.subprocess  # the CLI reads the method files in a child process
def test_options_for_a_method_that_joins_through_methods_are_accepted(tmp_path, capsys):
    base = ["--suite", "extrapolation", "--profile", "cpu", "--results", str(tmp_path), "--dry-run"]
    code, out, err = _run(base + ["--methods", "cope", "--set", "method_options={cope: {npos_max: 16}}"], capsys)
    assert code == 0, err
    assert json.loads(out.splitlines()[1].removeprefix("settings: "))["method_options"] == {"cope": {"npos_max": 16}}
    # a method neither the suite nor --methods names is still refused
    code, out, err = _run(base + ["--methods", "alibi", "--set", "method_options={cope: {npos_max: 16}}"], capsys)
    assert code == cli.EXIT_USAGE and "options for 'cope', which is not in methods" in err


@pytest.mark.subprocess  # the CLI reads the method files in a child process
def test_a_data_folder_named_with_an_emoji_is_read_as_a_path(tmp_path, capsys):
    data = tmp_path / "wiki \U0001f600"
    data.mkdir()
    code, out, err = _run(["--suite", "extrapolation", "--profile", "cpu", "--data", str(data), "--dry-run"], capsys)
    assert "not YAML" not in err and "\U0001f600" in err  # the corpus is missing there: said, by its name
