"""The runner: one worker per case, every failure a row, resume without loss or duplicates.

Cases use the test-only task ``_testing`` (its workers do not import torch), and each test spawns
as few workers as it can: every status comes from one run.
"""

import io
import json
import sys

import pytest

from posbench.cli import app as cli
from posbench.run import runner
from posbench.run import suite as suitemod
from posbench.run.dry_run import dry_run
from posbench.run.launch import worker_env
from posbench.run.options import RunOptions, default_run_id
from posbench.store.row import ROW_KEYS, finite_metrics
from posbench.store.run_rows import latest, read_rows
from posbench.store.writing import append_row
from tests.helpers.suites import make_suite


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
