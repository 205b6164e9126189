"""The command line: exit codes, one-line errors on stderr, nothing written for an invalid suite."""

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from posbench import __version__, tasks
from posbench.cli import app as cli
from posbench.cli import help_text
from posbench.core import registry
from posbench.core.outcome import PosbenchError
from posbench.report.compare import compare_runs
from posbench.run import suite as suitemod
from posbench.tasks import find as find_task
from tests.helpers.report_rows import efficiency_rows, write_run
from tests.helpers.suites import TWO_METHODS, make_suite
from tests.helpers.suites import VALID as SUITE  # the same valid suite the validation tests start from

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def suite_file(tmp_path):
    path = tmp_path / "t.yaml"
    path.write_text(SUITE)
    return path


@pytest.mark.subprocess
def test_validate_ok_and_invalid(suite_file, tmp_path, capsys):
    assert cli.main(["validate", str(suite_file)]) == 0
    assert "ok:" in capsys.readouterr().out
    bad = tmp_path / "bad.yaml"
    bad.write_text(SUITE.replace("version: 1", "version: 1\nspeed: fast"))
    assert cli.main(["validate", str(bad)]) == cli.EXIT_USAGE
    err = capsys.readouterr().err
    assert (
        err == f"SuiteError: {bad}:4: speed: unknown key; allowed: name, description, version, task, methods, "
        "baseline, metrics, grid, settings, profiles, launcher, page_waits\n"
    )


@pytest.mark.subprocess
def test_invalid_suite_runs_nothing_and_writes_nothing(tmp_path, capsys):
    bad = tmp_path / "bad.yaml"
    bad.write_text(SUITE.replace("[sinusoidal, alibi]", "[sinusoidal, alibbi]"))
    results = tmp_path / "results"
    assert cli.main(["--suite", str(bad), "--results", str(results)]) == cli.EXIT_USAGE
    assert "did you mean 'alibi'?" in capsys.readouterr().err
    assert not results.exists()


def test_options_are_never_abbreviated(capsys):
    # `validate` has no --methods; argparse would otherwise read it as --methods-dir and answer
    # "methods folder rotray does not exist".
    with pytest.raises(SystemExit):
        cli.main(["validate", "efficiency", "--methods", "rotray"])
    assert "unrecognized arguments: --methods rotray" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        cli.main(["list", "--methods-d", "x"])
    assert "unrecognized arguments: --methods-d" in capsys.readouterr().err


@pytest.mark.subprocess
def test_bad_set_value_is_one_line(suite_file, tmp_path, capsys):
    code = cli.main(["run", "--suite", str(suite_file), "--set", "timeout_s=[1", "--results", str(tmp_path / "r")])
    assert code == cli.EXIT_USAGE
    err = capsys.readouterr().err
    assert err.startswith("SuiteError: --set timeout_s=[1: timeout_s: value is not YAML") and err.count("\n") == 1


@pytest.mark.subprocess
def test_dry_run_lists_cases_and_writes_nothing(suite_file, tmp_path, capsys):
    results = tmp_path / "results"
    args = [
        "--suite",
        str(suite_file),
        "--device",
        "cpu",
        "--results",
        str(results),
        "--dry-run",
        "--methods",
        "alibi",
        "--set",
        "grid.n=[5, 6]",
    ]
    assert cli.main(args) == 0
    out = capsys.readouterr().out
    assert "profile cpu, device cpu" in out and "  run   alibi/n=5 (new)\n  run   alibi/n=6 (new)\n" in out
    assert "sinusoidal" not in out.split("settings:")[1].split("case(s)")[0].replace("run   alibi", "")
    assert not results.exists()


def test_schema_is_json_schema(capsys):
    assert cli.main(["schema"]) == 0
    schema = json.loads(capsys.readouterr().out)
    assert schema["title"] == "SuiteFile" and "methods" in schema["properties"]


@pytest.mark.subprocess
def test_list_shows_methods_with_availability_and_suites(capsys):
    assert cli.main(["list", "--device", "cpu"]) == 0
    out = capsys.readouterr().out
    assert "sinusoidal" in out and "available" in out and "methods/sinusoidal.py" in out
    assert "efficiency" in out.split("suites:")[1]


def test_help_has_examples(capsys):
    with pytest.raises(SystemExit):
        cli.main(["run", "--help"])
    assert "python bench.py --suite efficiency --profile cpu" in capsys.readouterr().out


@pytest.mark.subprocess
def test_list_without_check_reads_methods_from_their_files(capsys):
    assert cli.main(["list"]) == 0
    methods, suites = capsys.readouterr().out.split("suites:\n")
    lines = methods.splitlines()[1:]
    assert [line.split()[0] for line in lines] == sorted(registry.listing())
    assert "  sinusoidal     " in methods and "methods/sinusoidal.py" in methods and "available" not in methods
    assert [line.split()[0] for line in suites.splitlines()] == suitemod.names()


# The commands that only look at files answer without torch (or numpy, pandas, matplotlib): torch
# alone takes seconds to import, and these must answer in well under 1.5 s.
STARTUP = """
import sys
from posbench.cli import app as cli
from posbench.cli import help_text
try:
    code = cli.main({args!r})
except SystemExit as exc:  # --help leaves through argparse
    code = exc.code
heavy = sorted(m for m in ("torch", "numpy", "pandas", "matplotlib", "triton") if m in sys.modules)
print("RESULT", code, heavy)
"""


@pytest.mark.subprocess
@pytest.mark.parametrize(
    "args",
    [
        ["--help"],
        ["run", "--help"],
        ["list"],
        ["schema"],
        ["validate", "efficiency"],
        ["validate", "extrapolation"],
        ["validate", "precision"],
        ["validate", "kernels"],
        ["validate", "decode"],
        ["validate", "retrieval"],
    ],
    ids=" ".join,
)
def test_startup_commands_import_no_torch(args):
    env = {k: v for k, v in os.environ.items() if k != "POSBENCH_METHODS_PATH"}
    env["PYTHONPATH"] = str(REPO)
    proc = subprocess.run(
        [sys.executable, "-c", STARTUP.format(args=args)], cwd=REPO, env=env, capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines()[-1] == "RESULT 0 []"


@pytest.mark.subprocess
def test_list_check_imports_methods_and_says_availability(capsys):
    assert cli.main(["list", "--check"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("methods (availability on ") and re.search(r"^  rotary +available ", out, re.M)


def test_case_line_leaves_out_metrics_measured_in_another_row_and_says_n_a_for_missing_values():
    row = {
        "method": "rotary",
        "params": {"seq_len": 64},
        "settings": {"rounds": 5},
        "round": 2,
        "status": "ok",
        "task": "efficiency",
        "metrics": {"train_wps": 15100.0, "eval_wps": None},
        "duration_s": 4.7,
    }
    line = cli.case_line(row, ["train_wps", "eval_wps", "peak_mem_train_bytes"])
    assert line.startswith("rotary        seq_len=64 round 2/5 ok          train_wps 15.1k  eval_wps n/a  (4.7 s)")
    assert "peak_mem" not in line


# Flags that contradict or say nothing, mistyped commands, odd bytes, signals: one clear line each
# (issue 26, unclear and crashes).


@pytest.fixture
def suite(tmp_path):
    path = tmp_path / "t.yaml"
    path.write_text(TWO_METHODS)
    return path


def one_line(capsys) -> str:
    captured = capsys.readouterr()
    assert captured.err.count("\n") == 1, captured.err
    return captured.err


@pytest.mark.subprocess
def test_fresh_dry_run_names_no_old_folder_and_lists_every_case(tmp_path, suite, capsys):
    results = str(tmp_path / "results")
    assert cli.main(["--suite", str(suite), "--results", results, "--quiet"]) == 0
    capsys.readouterr()
    assert cli.main(["--suite", str(suite), "--results", results, "--fresh", "--dry-run"]) == 0
    out = capsys.readouterr().out
    (old,) = (tmp_path / "results" / "t").iterdir()
    assert old.name not in out.replace(f"{old.name}-<date>-<time>", "")
    assert "already" not in out and "  done  " not in out
    assert out.count("  run   ") == 4 and "4 case(s) to run in a new run folder" in out


def test_fresh_with_retry_failed_is_refused(suite, capsys):
    assert cli.main(["--suite", str(suite), "--fresh", "--retry-failed", "--dry-run"]) == cli.EXIT_USAGE
    assert "--fresh and --retry-failed contradict each other" in one_line(capsys)


@pytest.mark.parametrize("value", ["", ",,,", " , "])
def test_methods_that_name_no_method_are_refused(suite, capsys, value):
    assert cli.main(["--suite", str(suite), "--methods", value, "--dry-run"]) == cli.EXIT_USAGE
    assert f"--methods: {value!r} names no method" in one_line(capsys)


@pytest.mark.subprocess
def test_an_empty_data_folder_is_refused(suite, capsys):
    assert cli.main(["--suite", str(suite), "--data", "", "--dry-run"]) == cli.EXIT_USAGE
    assert "--data: empty" in one_line(capsys)


def test_a_mistyped_command_says_it_is_not_one_and_lists_the_commands(capsys):
    assert cli.main(["frobnicate"]) == cli.EXIT_USAGE
    err = one_line(capsys)
    assert "'frobnicate' is not a command" in err and "--suite" not in err.split(";")[0]
    assert all(name in err for name in cli.ALL_COMMANDS)


@pytest.mark.subprocess
def test_a_set_value_that_is_not_utf8_is_one_line(suite, capsys):
    value = os.fsdecode(b"warmup_steps=\xff")  # what Python makes of the shell's raw bytes
    assert cli.main(["--suite", str(suite), "--set", value, "--dry-run"]) == cli.EXIT_USAGE
    err = one_line(capsys)
    assert err.startswith("SuiteError: --set warmup_steps=\\udcff: not UTF-8 text") and "internal" not in err


def test_download_with_an_empty_url_is_one_line(tmp_path, capsys):
    assert cli.main(["download", "wikitext-103", "--data", str(tmp_path), "--url", ""]) == cli.EXIT_USAGE
    err = one_line(capsys)
    assert err.startswith("DataError: ") and "internal" not in err


@pytest.mark.parametrize("command", [["check", "alibi", "--device", "cuda"], ["list", "--device", "cuda"]])
def test_cuda_on_a_cpu_only_torch_is_one_line(capsys, command):
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    assert cli.main(command) == cli.EXIT_USAGE
    captured = capsys.readouterr()
    assert captured.out == "" and "alibi" not in captured.out
    assert captured.err.count("\n") == 1 and "CUDA is not available here" in captured.err


def test_a_huge_error_message_is_cut_in_the_progress_line_and_kept_whole_in_the_row():
    message = "x" * 3_000_000
    row = {"method": "alibi", "params": {"n": 1}, "settings": {}, "status": "error", "message": message, "duration_s": 1.0}
    line = cli.case_line(row, [])
    assert len(line) < 500 and "message cut: 3000000 characters in the row" in line
    assert row["message"] == message
    multi = cli.case_line(dict(row, message="first\nsecond"), [])
    assert "\n" not in multi and "first" in multi and "message cut" in multi


@pytest.mark.parametrize(
    "command, target",
    [
        (["report", "somewhere"], "posbench.report.build:build_report"),
        (["download", "wikitext-103", "--data", "d"], "posbench.data.download:download_wikitext103"),
    ],
)
def test_ctrl_c_in_report_and_download_is_one_line_and_exit_130(monkeypatch, capsys, command, target):
    import importlib

    module, name = target.split(":")

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(importlib.import_module(module), name, interrupted)
    assert cli.main(command) == 130
    err = capsys.readouterr().err
    assert err.strip() == f"interrupted (Ctrl-C): bench.py {command[0]} stopped" and "Traceback" not in err


@pytest.mark.subprocess
def test_sigterm_during_a_run_prints_the_resume_command_and_exits_143(tmp_path):
    path = tmp_path / "t.yaml"
    path.write_text(TWO_METHODS + "settings:\n  by_method: {alibi: sleep}\n  sleep_s: 60\n")
    proc = subprocess.Popen(
        [sys.executable, str(REPO / "bench.py"), "--suite", str(path), "--results", "results", "--quiet"],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=dict(os.environ, PYTHONPATH=str(REPO)),
    )
    deadline = time.monotonic() + 120
    cases = None
    while time.monotonic() < deadline:  # the first case (sinusoidal) is saved, alibi sleeps
        found = list((tmp_path / "results" / "t").glob("*/cases.jsonl"))
        if found and found[0].read_text().count("\n") >= 1:
            cases = found[0]
            break
        time.sleep(0.2)
    assert cases is not None, "the run saved no row"
    time.sleep(1.0)
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 143, err
    assert "terminated (SIGTERM): 1 of 4 cases finished and saved" in err
    assert "resume with: python bench.py " in err and "--run-id" in err and "Traceback" not in err
    assert [json.loads(line)["method"] for line in cases.read_text().splitlines()] == ["sinusoidal"]


# Small frictions of daily use (issue 42, item 8): ``--version``, the program's name as invoked,
# ``schema | head -1`` without a traceback, compare's words when nothing changed, the help's example
# column, a training budget shorter than its warm-up.


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


# Hardening round 5 (issue 56): a newcomer's frictions. A mistyped option or command gets "did you
# mean"; ``--parallel 2 --dry-run`` refuses what the run refuses; ``status`` takes a folder of runs
# as ``report`` does; a run's output folds repeated unavailable cases into one line per method and
# ends by pointing at ``bench.py report``.


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


# Every user-facing error is a ``PosbenchError``: the CLI prints its one line and exits 2.


TASK_NAMES = re.compile(r"\b(efficiency|extrapolation|precision|kernels|decode|retrieval|lengthgen)\b", re.I)


def test_user_facing_errors_share_the_base_and_keep_their_old_one():
    from posbench.core.files import WriteError
    from posbench.core.registry import RegistryError
    from posbench.data.corpus import DataError
    from posbench.run.suite import SuiteError
    from posbench.store.bounds import RowsError
    from posbench.store.writing import RowNotSaved, RunLocked

    for kind in (SuiteError, RegistryError, DataError, RowsError, WriteError, RowNotSaved, RunLocked):
        assert issubclass(kind, PosbenchError), kind
    for kind in (SuiteError, RegistryError, DataError, RowsError):
        assert issubclass(kind, ValueError), kind  # code that caught ValueError still does
    assert issubclass(WriteError, OSError)
    assert not hasattr(cli, "_user_errors")


def test_any_posbench_error_is_one_line_and_exit_2(monkeypatch, capsys):
    from posbench.run import suite as suitemod

    class PluginsError(PosbenchError):
        pass

    def broken():
        raise PluginsError("plugins.yaml: something the user wrote\nsecond line")

    monkeypatch.setattr(suitemod, "schema", broken)
    assert cli.main(["schema"]) == cli.EXIT_USAGE
    assert capsys.readouterr().err == "PluginsError: plugins.yaml: something the user wrote\n"


@pytest.mark.subprocess
def test_data_flag_names_the_tasks_whose_settings_read_a_corpus(tmp_path, capsys):
    path = tmp_path / "t.yaml"
    path.write_text("name: t\ndescription: d\nversion: 1\ntask: _testing\nmethods: [sinusoidal]\ngrid:\n  n: [1]\n")
    assert cli.main(["--suite", str(path), "--data", str(tmp_path), "--dry-run"]) == cli.EXIT_USAGE
    readers = [n for n in tasks.names() if "corpus" in tasks.get(n).Settings.model_fields]
    assert {"extrapolation", "precision"} <= set(readers)
    assert capsys.readouterr().err == (
        f"SuiteError: --data: suite 't' (task _testing) reads no corpus; allowed with: {', '.join(readers)}\n"
    )


@pytest.mark.parametrize("folder", ["posbench/run", "posbench/cli"])
def test_no_task_is_named_and_no_module_is_over_500_lines(folder):
    for path in sorted((REPO / folder).rglob("*.py")):
        text = path.read_text(encoding="utf-8")
        named = [(n, line) for n, line in enumerate(text.splitlines(), 1) if TASK_NAMES.search(line)]
        assert not named, f"{path}: names a task: {named[0]}"
        assert text.count("\n") <= 500, f"{path}: {text.count(chr(10))} lines"


def test_help_examples_name_a_shipped_suite_they_run_on(capsys):
    from posbench.run import suite as suitemod

    name = help_text.example_suite()
    assert name in suitemod.names()
    resolved = suitemod.resolve(
        suitemod.load(name), "cpu", suitemod.parse_set(["warmup_steps=5", "grid.seq_len=[128, 256]"])
    )  # the example's --set, as written
    assert resolved.grid["seq_len"] == [128, 256]
    with pytest.raises(SystemExit):
        cli.main(["run", "--help"])
    assert f"python bench.py --suite {name} --profile cpu" in capsys.readouterr().out


# --------------------------------------------------------------------------------------------------
# Task packages are code that runs: building the parser, --help, --version and list import none
# (their names come from their folders); a command that needs one imports it within the method
# files' import limit, and a package that blocks, does not compile or is not there is one line.


def _bench(argv, tasks_path, **env):
    """``bench.py ARGV`` with ``tasks_path`` searched for task packages first: (status, stdout, stderr)."""
    paths = os.pathsep.join([str(tasks_path), os.environ[registry.TASKS_ENV_PATH]])
    full = {**os.environ, registry.TASKS_ENV_PATH: paths, "PYTHONPATH": str(REPO), **env}
    proc = subprocess.run(
        [sys.executable, str(REPO / "bench.py"), *argv], capture_output=True, text=True, cwd=REPO, env=full, timeout=50
    )
    return proc.returncode, proc.stdout, proc.stderr


def _task_package(folder: Path, name: str, task_py: str) -> Path:
    (folder / name).mkdir(parents=True)
    (folder / name / "__init__.py").write_text("")
    (folder / name / "task.py").write_text(task_py)
    return folder / name


def _suite_of(tmp_path: Path, task: str) -> str:
    path = tmp_path / f"{task}.yaml"
    path.write_text(SUITE.replace("task: _testing", f"task: {task}"))
    return str(path)


@pytest.mark.subprocess
def test_a_task_package_that_sleeps_holds_up_no_command_and_is_cut_at_the_limit(tmp_path):
    package = _task_package(tmp_path / "tasks", "sleeper", "import time\ntime.sleep(60)\n")
    for argv in (["--help"], ["list"], ["--version"]):
        started = time.monotonic()
        code, out, err = _bench(argv, tmp_path / "tasks")
        assert (code, err) == (0, ""), argv
        assert time.monotonic() - started < 30, argv  # the package sleeps 60 s
    started = time.monotonic()
    code, out, err = _bench(["validate", _suite_of(tmp_path, "sleeper")], tmp_path / "tasks", POSBENCH_IMPORT_TIMEOUT_S="1")
    assert time.monotonic() - started < 30
    assert code == 2 and err.count("\n") == 1, err
    assert err.startswith(f"RegistryError: error importing task package {package.resolve()}: TimeoutError: its import ")
    assert "did not finish within 1 s" in err


@pytest.mark.subprocess
def test_a_task_package_that_does_not_compile_fails_only_its_users_in_one_line(tmp_path):
    package = _task_package(tmp_path / "tasks", "broken", "def (:\n")
    for argv in (["--help"], ["list"], ["--version"]):
        code, out, err = _bench(argv, tmp_path / "tasks")
        assert (code, err) == (0, ""), argv
    code, out, err = _bench(["validate", _suite_of(tmp_path, "broken")], tmp_path / "tasks")
    assert (code, err) == (
        2,
        f"RegistryError: error importing task package {package.resolve()}: SyntaxError: invalid syntax (task.py, line 1)\n",
    )


@pytest.mark.subprocess
def test_a_missing_tasks_folder_is_one_line(tmp_path):
    for argv in (["--help"], ["--version"]):
        assert _bench(argv, tmp_path / "nowhere")[::2] == (0, ""), argv
    code, out, err = _bench(["validate", "efficiency"], tmp_path / "nowhere")
    assert (code, err) == (
        2,
        f"RegistryError: tasks folder {tmp_path / 'nowhere'} (POSBENCH_TASKS_PATH) does not exist or is not a folder\n",
    )
