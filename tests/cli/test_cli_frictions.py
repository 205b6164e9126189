"""Small frictions of daily use (issue 42, item 8): ``--version``, the program's name as invoked,
``schema | head -1`` without a traceback, compare's words when nothing changed, the help's example
column, a training budget shorter than its warm-up."""

import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from posbench import __version__
from posbench.cli import app as cli
from posbench.report.compare import compare_runs
from posbench.tasks import find as find_task
from tests.helpers.report_rows import efficiency_rows, write_run

REPO = Path(__file__).resolve().parents[2]


def test_version_prints_posbench_and_its_version(capsys):
    with pytest.raises(SystemExit) as info:
        cli.main(["--version"])
    assert info.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith(f"posbench {__version__} (") and out.count("\n") == 1
    # issue 55 item 6: the commit it runs (here a checkout) and torch's version
    import torch

    from posbench.engine.env import git_commit

    assert f"commit {git_commit()[0]}, " in out
    assert out.rstrip().endswith(f"), torch {torch.__version__}")


def test_version_without_a_checkout_says_the_installed_version(monkeypatch, capsys):
    from posbench.engine import env

    monkeypatch.setattr(env, "own_checkout", lambda package=None: None)
    with pytest.raises(SystemExit):
        cli.main(["--version"])
    assert capsys.readouterr().out.startswith(f"posbench {__version__} (installed v{env.installed_version()}), torch ")


def test_usage_lines_name_the_program_as_invoked(monkeypatch, capsys):
    monkeypatch.setattr(sys, "argv", ["/usr/local/bin/posbench"])
    assert cli.parser().format_usage().startswith("usage: posbench ")
    assert cli.main(["frobnicate"]) == cli.EXIT_USAGE
    assert capsys.readouterr().err.startswith("posbench: 'frobnicate' is not a command")
    monkeypatch.setattr(sys, "argv", ["bench.py"])
    assert cli.parser().format_usage().startswith("usage: bench.py ")


@pytest.mark.subprocess
@pytest.mark.parametrize("argv", [["schema"], ["--help"]])
def test_a_reader_that_stops_early_gets_exit_0_and_no_traceback(argv):
    # schema's output (over 100 kB) outgrows a pipe's buffer: the write meets the closed pipe
    proc = subprocess.Popen(
        [sys.executable, str(REPO / "bench.py"), *argv], stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=REPO
    )
    first = proc.stdout.readline()
    proc.stdout.close()
    err = proc.stderr.read()
    assert first and proc.wait(timeout=60) == 0
    assert err == b"", err.decode()


def test_compare_with_nothing_changed_says_so_plainly(tmp_path):
    base = write_run(tmp_path / "base", efficiency_rows())
    new = write_run(tmp_path / "new", efficiency_rows())
    md = compare_runs(base, new, find_task=find_task).markdown()
    assert "found in both runs; no change beyond the threshold." in md
    assert "0 change(s)" not in md


def test_run_help_examples_keep_a_space_before_each_comment(capsys):
    with pytest.raises(SystemExit):
        cli.main(["run", "--help"])
    out = capsys.readouterr().out
    assert "--set launcher.partition=dev # a Slurm job array" in out
    examples = [line for line in out.split("examples:")[1].splitlines() if "# " in line]
    assert examples and all(" # " in line for line in examples)


def test_steps_below_warmup_steps_is_one_warning_line(capsys):
    cli.warn_short_budget(SimpleNamespace(steps=20, warmup_steps=30))
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("warning: steps 20 is below warmup_steps 30")
    for quiet in (SimpleNamespace(steps=30, warmup_steps=30), SimpleNamespace(steps=None, warmup_steps=30), SimpleNamespace()):
        cli.warn_short_budget(quiet)
    assert capsys.readouterr().err == ""


@pytest.mark.subprocess  # the dry run asks the method, in a child process, whether it runs here
def test_set_steps_below_the_profiles_warmup_warns_on_a_dry_run(tmp_path, capsys):
    argv = [
        "--suite",
        "extrapolation",
        "--profile",
        "cpu",
        "--device",
        "cpu",
        "--methods",
        "alibi",
        "--set",
        "steps=20",
        "--dry-run",
        "--results",
        str(tmp_path),
    ]
    assert cli.main(argv) == 0
    assert "warning: steps 20 is below warmup_steps 30" in capsys.readouterr().err
