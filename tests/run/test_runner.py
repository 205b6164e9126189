"""The runner: one worker per case, every failure a row, resume without loss or duplicates.

Cases use the test-only task ``_testing`` (its workers do not import torch), and each test spawns
as few workers as it can: every status comes from one run.
"""

import io
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
from posbench.run.dry_run import dry_run
from posbench.run.launch import worker_env
from posbench.run.machine import clean_stale_temp_dirs
from posbench.run.options import RunOptions, default_run_id
from posbench.store import writing
from posbench.store.row import ROW_KEYS, finite_metrics
from posbench.store.run_rows import latest, read_rows, read_usable_rows
from posbench.store.writing import append_row, save_row
from tests.helpers.suites import efficiency_suite, make_suite, write_suite


@pytest.mark.subprocess
def test_every_status_is_a_row_and_the_suite_goes_on(tmp_path, never_here):
    behaviours = {
        "sinusoidal/n=1": "ok",
        "sinusoidal/n=2": "nan",
        "rotary": "raise",
        "t5_bias": "kill",
        "alibi": "sleep",
        "nope/n=1": "oom",
        "nope/n=2": "alloc",
    }
    path = make_suite(
        tmp_path,
        ["sinusoidal", "rotary", "t5_bias", "alibi", "nope", never_here],
        grid="[1, 2]",
        timeout_s=3,
        memory_limit_mb=1024,
        alloc_mb=4096,
        sleep_s=60,
        by_method={k: v for k, v in behaviours.items()} | {"rotary/n=2": "crash", "alibi/n=2": "ok", "t5_bias/n=2": "ok"},
    )
    suite = suitemod.resolve(suitemod.load(path), "default")
    result = runner.run_suite(suite, runner.RunOptions("cpu", tmp_path / "results", progress=False))
    rows = {r["case_id"]: r for r in result.rows}
    status = {cid: r["status"] for cid, r in rows.items()}
    assert status == {
        "sinusoidal/n=1": "ok",
        "rotary/n=1": "error",
        "t5_bias/n=1": "error",
        "alibi/n=1": "timeout",
        "nope/n=1": "oom",
        "never_here/n=1": "unavailable",
        "sinusoidal/n=2": "diverged",
        "rotary/n=2": "error",
        "t5_bias/n=2": "ok",
        "alibi/n=2": "ok",
        "nope/n=2": "oom",
        "never_here/n=2": "unavailable",
    }
    ok = rows["sinusoidal/n=1"]
    assert set(ok) == set(ROW_KEYS)
    assert ok["metrics"]["value"] == 1000 and ok["series"] == {"steps": [1, 2, 3]} and ok["params"] == {"n": 1}
    assert ok["run_id"] == result.run_id and ok["settings"]["timeout_s"] == 3.0 and ok["device"] == "cpu"
    raised = rows["rotary/n=1"]
    assert raised["message"] == "ValueError: boom in rotary" and "Traceback" in raised["traceback"]
    assert rows["t5_bias/n=1"]["message"] == "worker died without a result (killed by SIGKILL)"
    assert rows["rotary/n=2"]["message"] == "worker died without a result (exit code 3)"
    assert rows["alibi/n=1"]["message"] == "no result after 3 s; worker killed"
    # a real RLIMIT_AS failure; the message names the limit, not the code that was allocating
    assert rows["nope/n=2"]["message"] == (
        "out of memory under memory_limit_mb 1024 (MemoryError); allowed: a larger memory_limit_mb, or none"
    )
    assert rows["never_here/n=1"]["message"] == "needs a machine that does not exist"
    assert rows["never_here/n=1"]["duration_s"] < 1  # decided without a worker
    assert (result.run_dir / "env.json").exists()

    # Same command again: everything is done. --retry-failed re-runs error and timeout only.
    again = runner.run_suite(suite, runner.RunOptions("cpu", tmp_path / "results", progress=False, methods=["rotary"]))
    assert again.ran == 0
    retried = runner.run_suite(
        suite, runner.RunOptions("cpu", tmp_path / "results", progress=False, retry_failed=True, methods=["rotary"])
    )
    assert retried.ran == 2
    lines = (result.run_dir / "cases.jsonl").read_text().splitlines()
    assert len(lines) == 14 and len(latest(json.loads(x) for x in lines)) == 12


@pytest.mark.subprocess
def test_interrupt_then_resume_loses_and_repeats_nothing(tmp_path, capsys):
    flag = tmp_path / "interrupted.flag"
    path = make_suite(tmp_path, ["sinusoidal", "rotary", "alibi"], by_method={"rotary": "interrupt_once"}, flag_file=str(flag))
    # (no --quiet: it would hide the tables this test reads from the output)
    args = ["--suite", str(path), "--device", "cpu", "--results", str(tmp_path / "res")]
    assert cli.main(args) == cli.EXIT_INTERRUPTED
    err = capsys.readouterr().err
    assert "interrupted: 1 of 3 cases finished" in err and "resume with: python bench.py" in err
    run_dir = next((tmp_path / "res" / "t").iterdir())
    first = read_rows(run_dir / "cases.jsonl")
    assert [r["case_id"] for r in first] == ["sinusoidal/n=1"]
    assert (run_dir / "cases.jsonl").read_bytes().endswith(b"\n")

    assert cli.main(args) == 0
    rows = read_rows(run_dir / "cases.jsonl")
    assert [r["case_id"] for r in rows] == ["sinusoidal/n=1", "rotary/n=1", "alibi/n=1"]
    assert rows[0] == first[0]  # the finished case was not run again
    assert all(r["status"] == "ok" for r in rows)
    out = capsys.readouterr().out
    assert "2 case(s) run, 1 already done" in out and (run_dir / "table.md").exists()
    # run.json: what was run, written at the start; the run's table reads its order and baseline
    meta = json.loads((run_dir / "run.json").read_text())
    assert {k: meta[k] for k in ("suite", "version", "task", "baseline", "methods", "metrics", "grid")} == {
        "suite": "t",
        "version": 1,
        "task": "_testing",
        "baseline": "sinusoidal",
        "methods": ["sinusoidal", "rotary", "alibi"],
        "metrics": ["value"],
        "grid": {"n": [1]},
    }
    assert meta["settings"]["flag_file"] == str(flag)
    table = (run_dir / "table.md").read_text()
    assert "| method \\ n | 1 |\n| --- | ---: |\n| sinusoidal | 1000 (1.00x) |\n| rotary | 1000 (1.00x) |" in table
    assert "Value, t" in out and "table.csv" in out


def test_torn_last_line_is_ignored_and_repaired(tmp_path):
    path = tmp_path / "cases.jsonl"
    a, c = ({"case_id": x, "method": "m", "status": "ok", "params": {}, "metrics": {}} for x in "ac")
    append_row(path, a)
    with open(path, "a") as fh:
        fh.write('{"case_id": "b", "sta')  # a runner killed in the middle of a write
    assert [r["case_id"] for r in read_rows(path)] == ["a"]
    append_row(path, c)
    assert path.read_text().splitlines() == [json.dumps(a), json.dumps(c)]


def test_fresh_and_explicit_run_ids(tmp_path):
    path = make_suite(tmp_path, ["sinusoidal"])
    suite = suitemod.resolve(suitemod.load(path), "default")
    assert default_run_id(suite, "cpu") == f"default-cpu-{suite.fingerprint()}"
    planned = dry_run(suite, RunOptions("cpu", tmp_path / "nothing", run_id="x"))
    todo, done = planned.todo, planned.done
    assert [c.id for c in todo] == ["sinusoidal/n=1"] and done == {}
    # --methods may name a registered method the suite does not list: it joins this run.
    todo = dry_run(suite, RunOptions("cpu", tmp_path / "nothing", run_id="x", methods=["alibi", "sinusoidal"])).todo
    assert [c.id for c in todo] == ["sinusoidal/n=1", "alibi/n=1"]
    with pytest.raises(
        suitemod.SuiteError,
        match=r"--methods: unknown method 'rotray' \(did you mean 'rotary'\?\); "
        r"allowed: the suite's methods or any registered one: .*alibi",
    ):
        dry_run(suite, RunOptions("cpu", tmp_path / "nothing", run_id="x", methods=["rotray"]))


def test_non_finite_metrics_become_null():
    assert finite_metrics({"a": float("nan"), "b": 1.5, "c": None}) == {"a": None, "b": 1.5, "c": None}


class _Terminal(io.StringIO):
    def isatty(self):
        return True


@pytest.mark.subprocess
@pytest.mark.parametrize("terminal", [False, True], ids=["log", "terminal"])
def test_progress_is_one_line_per_case_when_output_is_not_a_terminal(tmp_path, monkeypatch, capsys, terminal):
    from posbench.cli import app as cli

    path = make_suite(tmp_path, ["sinusoidal", "rotary"], grid="[1, 2]", timeout_s=30)
    err = _Terminal() if terminal else io.StringIO()  # StringIO.isatty() is False, as for a log file
    monkeypatch.setattr(sys, "stderr", err)
    assert cli.main(["--suite", str(path), "--results", str(tmp_path / "r")]) == 0
    out = capsys.readouterr().out
    case_lines = [line for line in out.splitlines() if line.startswith("[")]
    assert [line.split()[0:2] for line in case_lines] == [
        ["[1/4]", "sinusoidal"],
        ["[2/4]", "rotary"],
        ["[3/4]", "sinusoidal"],
        ["[4/4]", "rotary"],
    ]
    if terminal:
        assert "\r" in err.getvalue() and "4/4" in err.getvalue()  # the bar, redrawn in place
    else:
        assert err.getvalue() == ""  # no bar frames in a log


@pytest.mark.subprocess
def test_cpu_workers_share_one_allocator_policy(tmp_path, monkeypatch):
    """glibc's adaptive mmap threshold made a CPU decode step 2-3x slower or faster depending on
    what the process had freed before: every CPU worker gets the same fixed MALLOC_* policy, a
    user's own setting wins, CUDA workers are left alone, and env.json records it."""
    path = make_suite(tmp_path, ["sinusoidal"])
    suite = suitemod.resolve(suitemod.load(path), "default")
    monkeypatch.delenv("MALLOC_MMAP_THRESHOLD_", raising=False)
    monkeypatch.setenv("MALLOC_TRIM_THRESHOLD_", "123")
    (case,) = suite.cases("cpu", "x")
    env = worker_env(case)
    assert env["MALLOC_MMAP_THRESHOLD_"] == str(32 << 20) and env["MALLOC_TRIM_THRESHOLD_"] == "123"
    (gpu_case,) = suite.cases("cuda", "x")
    assert "MALLOC_MMAP_THRESHOLD_" not in worker_env(gpu_case)
    result = runner.run_suite(suite, runner.RunOptions("cpu", tmp_path / "results", progress=False))
    recorded = json.loads((result.run_dir / "env.json").read_text())["worker_malloc"]
    assert recorded == {"MALLOC_MMAP_THRESHOLD_": str(32 << 20), "MALLOC_TRIM_THRESHOLD_": "123"}
    # and the subnormal flush the suite asked for (_testing: off), in env.json and the row
    assert json.loads((result.run_dir / "env.json").read_text())["flush_denormal"] is False
    assert [r["info"]["flush_denormal"] for r in result.rows] == [False]


# Faults during a run (issue 13's hardening): no fault loses a row and each is one line. A second
# runner on the same run folder, a runner killed with its workers, unwritable env.json, table or
# rows, corrupt row lines, a memory limit too small, a planted module in the current folder, and bad
# input without (and with) --debug.


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


def faults_suite(tmp_path, methods=("sinusoidal",), timeout=60, extra="") -> Path:
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
    faults_suite(tmp_path)
    monkeypatch.chdir(cwd)
    suite = suitemod.resolve(suitemod.load(tmp_path / "t.yaml"), "default")
    result = runner.run_suite(suite, runner.RunOptions("cpu", tmp_path / "res", progress=False))
    assert [r["status"] for r in result.rows] == ["ok"], result.rows[0]["message"]
    assert not marker.exists()


# ---------------------------------------------------------------- faults during a run


@pytest.mark.subprocess
def test_second_runner_gets_one_line_naming_the_holder(tmp_path, capsys):
    faults_suite(tmp_path)
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
    faults_suite(tmp_path, extra="  behaviour: sleep\n  sleep_s: 60\n")
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
    faults_suite(tmp_path)
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
    faults_suite(tmp_path)
    run_dir = tmp_path / "res" / "t" / "r"
    (run_dir / "env.json").mkdir(parents=True)  # writing a file there fails with a real OSError
    assert cli.main(run_args(tmp_path)) == cli.EXIT_USAGE
    err = capsys.readouterr().err
    assert err == f"WriteError: cannot write {run_dir}/env.json: Is a directory\n"


@pytest.mark.subprocess
def test_table_write_failure_keeps_the_rows(tmp_path, capsys):
    faults_suite(tmp_path)
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
    faults_suite(tmp_path, methods=("sinusoidal", "rotary", "alibi"))
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
    faults_suite(tmp_path, methods=("sinusoidal", "rotary"))
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
    assert "2 case(s) run, 1 already done" in captured.out  # rotary joins: sinusoidal again with it
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
    faults_suite(tmp_path)
    results = tmp_path / "file"
    results.write_text("not a folder")
    args = ["--suite", str(tmp_path / "t.yaml"), "--device", "cpu", "--results", str(results), "--quiet"]
    assert cli.main(args) == cli.EXIT_USAGE
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(f"WriteError: cannot create {results}/t/") and "Traceback" not in err
    assert cli.main(args + ["--debug"]) == cli.EXIT_USAGE
    err = capsys.readouterr().err
    assert "Traceback (most recent call last)" in err and err.splitlines()[-1].startswith("WriteError: cannot create")
