"""Sweeps launched through submitit: its local executor, and a real one-node Slurm started by the
fixture (``tests/helpers/slurm_cluster.py``; skipped with the reason where it cannot start).
One array task per unit, each writing rows/<unit>.jsonl; a task killed mid-way gives its cases
rows with the job's state, ``bench.py status`` names it and the command that resubmits it, and
the resubmitted task skips the cases that already have a row."""

import json
import shlex
import subprocess
import time

import pytest

from posbench.cli import app as cli
from posbench.report import rows as rowsmod
from posbench.run import sweep_state
from posbench.store.launched_sweep import read_record
from posbench.store.run_rows import read_run_rows
from posbench.tasks import find as find_task
from tests.helpers import slurm_cluster
from tests.helpers.suites import make_suite


def _rows_by_case(run_dir):
    out = {}
    for row in read_run_rows(run_dir):
        out.setdefault(row["case_id"], []).append(row)
    return out


def _status(run_dir, capsys):
    capsys.readouterr()
    assert cli.main(["status", str(run_dir), "--allow-failures"]) == 0  # (a failed unit: exit 3 without it)
    return capsys.readouterr().out


@pytest.mark.subprocess
def test_the_local_executor_runs_a_unit_per_task_and_a_killed_task_resumes(tmp_path, capsys, monkeypatch):
    # One unit (a grid point of a timed task); alibi interrupts its array task's process once.
    # (No threads setting: a worker that sets torch's threads imports torch, seconds a case.)
    flag = tmp_path / "flag"
    path = make_suite(tmp_path, ["sinusoidal", "alibi"], timeout_s=60, by_method={"alibi": "interrupt_once"}, flag_file=str(flag))
    # (no --quiet: it would hide the unit lines and tables read below; --allow-failures: alibi's
    # task fails once by design, which is exit 3 without it)
    argv = [
        "--suite",
        str(path),
        "--results",
        str(tmp_path / "res"),
        "--device",
        "cpu",
        "--allow-failures",
        "--launcher",
        "local",
    ]
    assert cli.main(argv) == 0
    out = capsys.readouterr().out
    (run_dir,) = (tmp_path / "res" / "t").iterdir()
    assert flag.exists() and "0 done, 1 failed" in out and "job " in out, out
    rows = _rows_by_case(run_dir)
    assert [r["status"] for r in rows["sinusoidal/n=1"]] == ["ok"]
    (failed,) = rows["alibi/n=1"]
    assert failed["status"] == "error" and "local array task" in failed["message"] and "ENDED" in failed["message"]
    assert failed["info"]["unit"] == "n=1" and (run_dir / "cases.jsonl").read_text() == ""
    resubmit = next(line for line in out.splitlines() if line.startswith("resubmit what failed: "))
    command = shlex.split(resubmit.split(": ", 1)[1])
    assert command[:2] == ["python", "bench.py"] and command[-3:] == ["--run-id", run_dir.name, "--retry-failed"]
    # The resubmission lands in the same second as the failure row (rows' times are whole seconds).
    # In a test process that had already loaded the methods (a CI worker after earlier tests) it
    # took under a second and did so about 2 runs in 5: the new task then read the old failure row
    # as its own, skipped alibi and status said "0 done, 1 failed". Rows now name their submission
    # (of_submission); pinning the clock here makes that race happen every time.
    from posbench.run import slurm as launcher

    monkeypatch.setattr(launcher, "_now", lambda: failed["started_at"])
    assert cli.main(command[2:]) == 0
    out = capsys.readouterr().out
    assert "1 done, 0 failed" in out and "Value, t" in out, out  # the same table as a local run
    rows = _rows_by_case(run_dir)
    assert len(rows["sinusoidal/n=1"]) == 1  # finished cases are not run again
    assert [r["status"] for r in rows["alibi/n=1"]] == ["error", "ok"]
    record = read_record(run_dir)
    assert record["units"]["n=1"]["submitted_at"] == failed["started_at"]  # the pinned clock took effect
    assert rows["alibi/n=1"][1]["info"]["submission"] == record["units"]["n=1"]["submission"] != failed["info"]["submission"]
    assert {r["info"]["unit"] for rs in rows.values() for r in rs} == {"n=1"}
    runs = rowsmod.load_runs(run_dir, find_task=find_task)
    assert sorted(runs.rows["status"]) == ["ok", "ok"]


@pytest.fixture
def slurm(tmp_path_factory, monkeypatch):
    folder = tmp_path_factory.mktemp("slurm")
    try:
        env = slurm_cluster.start(folder)
    except slurm_cluster.Unavailable as exc:
        pytest.skip(f"no Slurm here: {exc}")
    monkeypatch.setenv("SLURM_CONF", env["SLURM_CONF"])
    yield folder
    slurm_cluster.stop(folder)


def _wait(condition, timeout_s=60.0):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.3)
    raise AssertionError("timed out waiting")


@pytest.mark.subprocess
def test_a_slurm_job_array_runs_four_units_and_resumes_a_cancelled_task(tmp_path, slurm, capsys, monkeypatch):
    from posbench.run import slurm as launcher

    monkeypatch.setitem(launcher.POLL_S, "slurm", 0.5)  # the follower asks squeue often: a quick test
    path = make_suite(
        tmp_path,
        ["sinusoidal", "alibi"],
        grid="[1, 2, 3, 4]",
        threads=1,
        timeout_s=60,
        sleep_s=3,
        by_method={"alibi/n=2": "sleep"},
    )
    argv = [
        "--suite",
        str(path),
        "--results",
        str(tmp_path / "res"),
        "--device",
        "cpu",
        "--quiet",
        "--launcher",
        "slurm",
        "--set",
        "launcher.time_min=5",
        "--set",
        "launcher.cpus_per_task=1",
    ]
    assert cli.main(argv + ["--detach"]) == 0
    (run_dir,) = (tmp_path / "res" / "t").iterdir()
    record = json.loads((run_dir / "launcher.json").read_text())
    assert sorted(record["units"]) == ["n=1", "n=2", "n=3", "n=4"]
    jobs = {u["job_id"].split("_")[0] for u in record["units"].values()}
    assert len(jobs) == 1  # one job array, a task per unit
    # Mid-way through unit n=2: sinusoidal has its row, alibi is sleeping. Cancel that task.
    _wait(lambda: "sinusoidal/n=2" in _rows_by_case(run_dir))
    subprocess.run(["scancel", record["units"]["n=2"]["job_id"]], check=True)
    _wait(lambda: not any(s.active for s in sweep_state.settle(run_dir, record).values()))
    out = _status(run_dir, capsys)
    assert "3 done, 1 failed" in out and "CANCELLED" in out
    rows = _rows_by_case(run_dir)
    (cancelled,) = rows["alibi/n=2"]
    assert cancelled["status"] == "error" and "CANCELLED" in cancelled["message"]
    assert len(list((run_dir / "rows").glob("*.jsonl"))) == 4  # a rows file per task, none shared
    resubmit = next(line for line in out.splitlines() if line.startswith("resubmit what failed: "))
    assert cli.main(shlex.split(resubmit.split(": ", 1)[1])[2:]) == 0
    out = capsys.readouterr().out
    assert "4 done, 0 failed" in out
    rows = _rows_by_case(run_dir)
    assert [r["status"] for r in rows["alibi/n=2"]] == ["error", "ok"] and len(rows["sinusoidal/n=2"]) == 1
    assert all(len(rs) == 1 for cid, rs in rows.items() if cid != "alibi/n=2") and len(rows) == 8
    assert all(r["info"]["job_id"].startswith(tuple(jobs)) for r in rows["sinusoidal/n=1"])
