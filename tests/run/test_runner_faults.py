"""Faults during a run (issue 13's hardening): no fault loses a row and each is one line.

A second runner on the same run folder, a runner killed with its workers, unwritable env.json,
table or rows, corrupt row lines, a memory limit too small, a planted module in the current
folder, and bad input without (and with) --debug.
"""

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from posbench.cli import app as cli
from posbench.run import runner
from posbench.run import suite as suitemod
from posbench.run.machine import clean_stale_temp_dirs
from posbench.store import writing
from posbench.store.run_rows import read_usable_rows
from posbench.store.writing import append_row, save_row
from tests.helpers.suites import efficiency_suite, write_suite

REPO = Path(__file__).resolve().parents[2]


SUITE = """\
name: t
description: hardening
version: 1
task: _testing
methods: {methods}
grid:
  n: [1]
settings:
  timeout_s: {timeout}
{extra}"""


def make_suite(tmp_path, methods=("sinusoidal",), timeout=60, extra="") -> Path:
    path = tmp_path / "t.yaml"
    path.write_text(SUITE.format(methods=json.dumps(list(methods)), timeout=timeout, extra=extra))
    return path


def run_args(tmp_path, *more) -> list[str]:
    return [
        "--suite",
        str(tmp_path / "t.yaml"),
        "--device",
        "cpu",
        "--results",
        str(tmp_path / "res"),
        "--quiet",
        "--run-id",
        "r",
        *more,
    ]


@pytest.mark.subprocess
def test_workers_do_not_import_from_the_current_folder(tmp_path, monkeypatch):
    cwd = tmp_path / "here"
    (cwd / "posbench").mkdir(parents=True)
    marker = tmp_path / "imported"
    plant = f"open({str(marker)!r}, 'a').write(__name__ + '\\n')\nraise SystemExit(7)\n"
    (cwd / "pydantic.py").write_text(plant)  # the worker imports pydantic (task settings)
    (cwd / "posbench" / "__init__.py").write_text(plant)
    make_suite(tmp_path)
    monkeypatch.chdir(cwd)
    suite = suitemod.resolve(suitemod.load(tmp_path / "t.yaml"), "default")
    result = runner.run_suite(suite, runner.RunOptions("cpu", tmp_path / "res", progress=False))
    assert [r["status"] for r in result.rows] == ["ok"], result.rows[0]["message"]
    assert not marker.exists()


# ---------------------------------------------------------------- faults during a run


@pytest.mark.subprocess
def test_second_runner_gets_one_line_naming_the_holder(tmp_path, capsys):
    make_suite(tmp_path)
    run_dir = tmp_path / "res" / "t" / "r"
    run_dir.mkdir(parents=True)
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time; from pathlib import Path; from posbench.store.writing import lock_run_dir; "
            "lock_run_dir(Path(sys.argv[1])); print('locked', flush=True); time.sleep(120)",
            str(run_dir),
        ],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    try:
        assert holder.stdout.readline().strip() == "locked"
        assert cli.main(run_args(tmp_path)) == cli.EXIT_USAGE
        err = capsys.readouterr().err
        assert err == (
            f"RunLocked: {run_dir}: the run folder is in use by process {holder.pid} (another bench.py); "
            "allowed: wait for it to finish, or pick another --run-id\n"
        )
        assert not (run_dir / "cases.jsonl").exists()  # the second process ran nothing
    finally:
        holder.kill()
        holder.wait()
    assert cli.main(run_args(tmp_path)) == 0  # the lock went with its holder
    assert (run_dir / ".lock").read_text().strip() == str(os.getpid())


def _children(pid: int) -> list[int]:
    out = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            out.append(int(stat.parent.name))
    return out


def _workers(pid: int) -> list[int]:
    """The children of ``pid`` that are case workers (not, e.g., the isolated process that asks
    whether a method runs here, which the runner starts first)."""
    out = []
    for child in _children(pid):
        try:
            if b"posbench.run.worker" in Path(f"/proc/{child}/cmdline").read_bytes():
                out.append(child)
        except OSError:
            continue
    return out


def _gone(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"  # a zombie is dead
    except OSError:
        return True


@pytest.mark.subprocess
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG and /proc are Linux's")
def test_worker_dies_with_a_killed_runner_and_its_temp_dir_is_cleaned(tmp_path):
    make_suite(tmp_path, extra="  behaviour: sleep\n  sleep_s: 60\n")
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    code = (
        "import sys; from pathlib import Path; from posbench.run import runner, suite as s; "
        "su = s.resolve(s.load(sys.argv[1]), 'default'); "
        "runner.run_suite(su, runner.RunOptions('cpu', Path(sys.argv[2]), progress=False))"
    )
    bench = subprocess.Popen(
        [sys.executable, "-c", code, str(tmp_path / "t.yaml"), str(tmp_path / "res")],
        env={**os.environ, "PYTHONPATH": str(REPO), "TMPDIR": str(tmp)},
    )
    try:
        deadline = time.time() + 60
        workers = []
        while not workers and time.time() < deadline:
            time.sleep(0.2)
            # A worker, not any child: under load the first child seen was the availability
            # check's process, started before the worker and its temp folder (CI, 2026-11-24).
            workers = _workers(bench.pid)
        assert workers, "the runner started no worker"
        stale = list(tmp.glob(f"posbench-{bench.pid}-*"))
        assert stale  # the worker's temp folder, named for its runner
        bench.kill()  # kill -9: no cleanup code runs in the runner
        bench.wait()
        deadline = time.time() + 10
        while not all(_gone(w) for w in workers) and time.time() < deadline:
            time.sleep(0.1)
        assert all(_gone(w) for w in workers), "the worker outlived its runner"
    finally:
        bench.kill()
    live = tmp / f"posbench-{os.getpid()}-keep"
    live.mkdir()
    assert clean_stale_temp_dirs(str(tmp)) == stale
    assert not any(p.exists() for p in stale) and live.exists()  # a live runner's folder stays


@pytest.mark.subprocess
def test_empty_or_binary_env_json_is_rewritten(tmp_path, capsys):
    make_suite(tmp_path)
    run_dir = tmp_path / "res" / "t" / "r"
    run_dir.mkdir(parents=True)
    for content in (b"", b"\xff\xfe\x00"):
        (run_dir / "env.json").write_bytes(content)
        assert cli.main(run_args(tmp_path)) == 0
        assert json.loads((run_dir / "env.json").read_text())["posbench_version"]
    leftovers = [p.name for p in run_dir.iterdir() if p.name.endswith(".tmp")]
    assert leftovers == []  # the atomic write left no temp file


@pytest.mark.subprocess
def test_env_json_write_failure_is_one_line(tmp_path, capsys):
    make_suite(tmp_path)
    run_dir = tmp_path / "res" / "t" / "r"
    (run_dir / "env.json").mkdir(parents=True)  # writing a file there fails with a real OSError
    assert cli.main(run_args(tmp_path)) == cli.EXIT_USAGE
    err = capsys.readouterr().err
    assert err == f"WriteError: cannot write {run_dir}/env.json: Is a directory\n"


@pytest.mark.subprocess
def test_table_write_failure_keeps_the_rows(tmp_path, capsys):
    make_suite(tmp_path)
    path = tmp_path / "t.yaml"
    path.write_text(path.read_text().replace("grid:", "metrics: [value]\ngrid:"))  # a suite with a table
    run_dir = tmp_path / "res" / "t" / "r"
    (run_dir / "table.md").mkdir(parents=True)
    assert cli.main(run_args(tmp_path)) == cli.EXIT_USAGE
    err = capsys.readouterr().err
    assert err.startswith(f"WriteError: cannot write {run_dir}/table.md: Is a directory; the rows are saved")
    assert err.count("\n") == 1
    assert [r["status"] for r in read_usable_rows(run_dir / "cases.jsonl")] == ["ok"]


@pytest.mark.subprocess
def test_a_failed_row_write_loses_no_earlier_row_and_names_the_case(tmp_path, capsys, monkeypatch):
    make_suite(tmp_path, methods=("sinusoidal", "rotary", "alibi"))
    real, calls = append_row, []

    def disk_full_after_one(path, row):
        calls.append(row["case_id"])
        if len(calls) > 1:
            raise OSError(28, "No space left on device", str(path))
        real(path, row)

    monkeypatch.setattr(writing, "append_row", disk_full_after_one)
    monkeypatch.setattr(save_row, "__defaults__", ((0.01, 0.01),))
    assert cli.main(run_args(tmp_path)) == cli.EXIT_USAGE
    err = capsys.readouterr().err
    run_dir = tmp_path / "res" / "t" / "r"
    assert err == (
        f"RowNotSaved: cannot write {run_dir}/cases.jsonl: No space left on device; case rotary/n=1 "
        "finished but its row is not saved: fix the folder, then re-run the same command "
        "(it resumes and runs that case again)\n"
    )
    assert calls == ["sinusoidal/n=1"] + ["rotary/n=1"] * 3  # retried, and the run stopped there
    monkeypatch.setattr(writing, "append_row", real)
    assert cli.main(run_args(tmp_path)) == 0
    assert [r["case_id"] for r in read_usable_rows(run_dir / "cases.jsonl")] == ["sinusoidal/n=1", "rotary/n=1", "alibi/n=1"]


def test_a_row_write_that_fails_once_is_retried(tmp_path, monkeypatch):
    real, fails = append_row, [OSError(5, "Input/output error")]

    def flaky(path, row):
        if fails:
            raise fails.pop()
        real(path, row)

    monkeypatch.setattr(writing, "append_row", flaky)
    row = {"case_id": "a", "status": "ok", "method": "m", "params": {}, "metrics": {}}
    save_row(tmp_path / "cases.jsonl", row, retries=(0.01,))
    assert read_usable_rows(tmp_path / "cases.jsonl") == [row]


@pytest.mark.subprocess
def test_corrupt_rows_are_skipped_and_reported_with_file_and_line(tmp_path, capsys):
    make_suite(tmp_path, methods=("sinusoidal", "rotary"))
    run_dir = tmp_path / "res" / "t" / "r"
    run_dir.mkdir(parents=True)
    assert cli.main(run_args(tmp_path, "--methods", "sinusoidal")) == 0
    path = run_dir / "cases.jsonl"
    good = path.read_bytes()
    path.write_bytes(
        good
        + b"{}\n[1, 2]\n"
        + b'{"case_id": null, "status": "ok"}\n'
        + b"\xff\xfe{}\n"
        + b"not json\n"
        + b'{"case_id": "x", "sta'
    )  # the last one torn: silently ignored
    problems = []
    rows = read_usable_rows(path, problems)
    assert [r["case_id"] for r in rows] == ["sinusoidal/n=1"]
    expected = {
        2: "row has no 'case_id'",
        3: "expected a JSON object per line, got list",
        4: "case_id: expected a string, got NoneType",
        5: "not UTF-8 text",
        6: "not JSON (Expecting value)",
    }
    assert len(problems) == len(expected)
    for problem, (n, what) in zip(problems, expected.items()):
        assert problem.startswith(f"{path}:{n}: {what}") and problem.endswith("; line skipped"), problem
    capsys.readouterr()
    assert cli.main(run_args(tmp_path)) == 0  # resume: skips them, runs what is missing
    captured = capsys.readouterr()
    assert f"warning: {path}:3: expected a JSON object per line, got list; line skipped" in captured.err
    assert "1 case(s) run, 1 already done" in captured.out
    assert "Traceback" not in captured.err


@pytest.mark.subprocess
def test_memory_limit_too_small_is_oom_and_names_the_limit(tmp_path):
    from posbench.core.outcome import classify, failure
    from posbench.core.registry import RegistryError

    try:
        try:
            raise MemoryError()
        except MemoryError:
            raise RegistryError("error importing method file methods/rotary.py: MemoryError")
    except RegistryError as exc:
        assert classify(exc) == "oom"
        assert failure(exc, 150)["message"] == (
            "out of memory under memory_limit_mb 150 (MemoryError); allowed: a larger memory_limit_mb, or none"
        )
    path = write_suite(
        tmp_path,
        efficiency_suite("  memory_limit_mb: 150\n  warmup_steps: 0\n  measure_steps: 1\n  windows: 1\n", grid="[16]").replace(
            "[sinusoidal, alibi]", "[sinusoidal]"
        ),
    )
    suite = suitemod.resolve(suitemod.load(path), "default")
    (row,) = runner.run_suite(suite, runner.RunOptions("cpu", tmp_path / "res", progress=False)).rows
    assert row["status"] == "oom"
    assert row["message"].startswith("out of memory under memory_limit_mb 150")
    assert "methods/" not in row["message"]


# ---------------------------------------------------------------- bench.py: one line, --debug


@pytest.mark.subprocess
def test_no_traceback_for_bad_input_and_debug_shows_one(tmp_path, capsys):
    make_suite(tmp_path)
    results = tmp_path / "file"
    results.write_text("not a folder")
    args = ["--suite", str(tmp_path / "t.yaml"), "--device", "cpu", "--results", str(results), "--quiet"]
    assert cli.main(args) == cli.EXIT_USAGE
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(f"WriteError: cannot create {results}/t/") and "Traceback" not in err
    assert cli.main(args + ["--debug"]) == cli.EXIT_USAGE
    err = capsys.readouterr().err
    assert "Traceback (most recent call last)" in err and err.splitlines()[-1].startswith("WriteError: cannot create")
