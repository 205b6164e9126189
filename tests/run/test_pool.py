"""The unit of distribution (a timed task's grid point with every method, else a case), shards
of whole units, and the local pool: a unit per slot (its own GPUs, from a fake device list here),
never two units on one device at once, ``--parallel`` refused for timed tasks."""

import threading
import time
from pathlib import Path

import pytest

from posbench import tasks
from posbench.cli import app as cli
from posbench.run import pool, runner, units
from posbench.run import suite as suitemod
from posbench.run.launch import run_worker
from posbench.run.options import RunOptions
from posbench.run.schedule import plan_rounds, schedule
from posbench.store.run_rows import read_rows
from tests.helpers.suites import make_suite

METHODS = ["sinusoidal", "rotary", "alibi"]


@pytest.fixture
def untimed(patch_task):
    """The test task seen as a training task (one unit per case)."""
    patch_task("_testing", TIMED=False)


def _suite(tmp_path, grid="[1, 2, 3]", **settings):
    return suitemod.resolve(suitemod.load(make_suite(tmp_path, METHODS, grid=grid, **settings)), "default")


def test_a_timed_task_has_a_unit_per_grid_point_and_a_training_task_one_per_case(tmp_path, untimed):
    suite = _suite(tmp_path, rounds=2)
    todo = schedule(suite.cases("cpu"))
    by_point = units.split(todo, timed=True)
    assert [u.key for u in by_point] == ["n=1", "n=2", "n=3"]
    # Every method and every round of the point, in the schedule's interleaved order.
    assert [(c.id, r) for c, r in by_point[0].todo] == [(c.id, r) for c, r in todo[:6]]
    assert {c.method for c, _r in by_point[1].todo} == set(METHODS)
    by_case = units.split(todo, timed=False)
    assert [u.key for u in by_case][:3] == ["sinusoidal/n=1", "rotary/n=1", "alibi/n=1"] and len(by_case) == 9
    assert all(len(u.todo) == 2 for u in by_case)  # a case's rounds stay together
    assert by_case[0].name == "sinusoidal-n-1-" + by_case[0].name.rsplit("-", 1)[1]  # file-safe, hashed
    # The contract: the test task pairs methods in rounds (timed) unless it says otherwise.
    assert tasks.get("_testing").timed is False  # the fixture's declaration wins
    assert tasks.get("kernels").timed and tasks.get("efficiency").timed and not tasks.get("extrapolation").timed


@pytest.mark.parametrize("n", [2, 3])
def test_shards_of_the_efficiency_suite_keep_each_grid_point_whole(n):
    # The real efficiency suite's gpu profile: 6 methods x 4 lengths. Shard by case index would
    # give shard 0 sinusoidal, t5_bias, alibi_triton at every length (the example).
    suite = suitemod.resolve(suitemod.load("efficiency"), "gpu")
    shards = [plan_rounds(suite, RunOptions("cuda", Path("results"), shard=(i, n)), "r", None).todo for i in range(n)]
    points = [{c.params["seq_len"] for c, _r in todo} for todo in shards]
    assert set().union(*points) == set(suite.grid["seq_len"]) and sum(map(len, points)) == len(suite.grid["seq_len"])
    for todo in shards:  # every method of each of its points, every round
        for seq_len in {c.params["seq_len"] for c, _r in todo}:
            here = [(c.method, r) for c, r in todo if c.params["seq_len"] == seq_len]
            assert sorted(here) == sorted((m, r) for m in suite.methods for r in range(1, 4))


def test_shards_of_a_training_task_split_cases(tmp_path, untimed):
    suite = _suite(tmp_path, grid="[1]")
    shards = [[c.id for c, _r in plan_rounds(suite, RunOptions("cpu", tmp_path, shard=(i, 2)), "r", None).todo] for i in (0, 1)]
    assert shards == [["sinusoidal/n=1", "alibi/n=1"], ["rotary/n=1"]]


def test_gpu_lists_and_cpu_slots_are_checked_in_one_line():
    assert pool.parse_gpus("all", ["0", "1"]) == ["0", "1"]
    assert pool.parse_gpus(" 1,0 ", ["0", "1"]) == ["1", "0"]
    for text, words in [
        ("0,0", "GPU 0 is listed twice"),
        ("0,5", "no GPU 5 here; allowed: 0, 1"),
        ("0,,1", "expected comma-separated device ids"),
    ]:
        with pytest.raises(pool.PoolError, match=words):
            pool.parse_gpus(text, ["0", "1"])
    with pytest.raises(pool.PoolError, match="--gpus all: no GPU is visible here"):
        pool.parse_gpus("all", [])
    slots = pool.gpu_slots(["0", "1", "2", "3", "4"], 2)  # nproc 2: two GPUs a slot, one left idle
    assert [s.gpus for s in slots] == [("0", "1"), ("2", "3")] and slots[1].env() == {"CUDA_VISIBLE_DEVICES": "2,3"}
    with pytest.raises(pool.PoolError, match="a case needs 4 GPUs"):
        pool.gpu_slots(["0", "1"], 4)
    with pytest.raises(pool.PoolError, match="times its methods against each other"):
        pool.cpu_slots(2, True, "efficiency")
    assert len(pool.cpu_slots(3, False, "extrapolation")) == 3


def test_the_pool_runs_each_unit_on_one_slot_and_never_two_at_once_on_a_slot(tmp_path):
    suite = _suite(tmp_path, grid="[1, 2, 3, 4, 5]")
    todo = schedule(suite.cases("cpu"))
    spans, emitted, lock = [], [], threading.Lock()

    def run_unit(unit, slot, emit, stopped):
        t0 = time.perf_counter()
        time.sleep(0.05)
        with lock:
            spans.append((slot.gpus, unit.key, t0, time.perf_counter()))
        for case, _rnd in unit.todo:
            emit(case.id, slot.gpus)

    main_thread = threading.get_ident()
    slots = pool.gpu_slots(["0", "1"], 1)
    pool.run_units(units.split(todo, True), slots, run_unit, lambda *what: emitted.append(what + (threading.get_ident(),)))
    assert sorted(k for _g, k, *_ in spans) == ["n=1", "n=2", "n=3", "n=4", "n=5"]
    for gpus in (("0",), ("1",)):  # per device: one unit after the other
        mine = sorted((a, b) for g, _k, a, b in spans if g == gpus)
        assert mine and all(b <= a2 for (_a, b), (a2, _b2) in zip(mine, mine[1:]))
    assert len(emitted) == 15 and all(t == main_thread for *_x, t in emitted)  # rows come back to the caller
    by_case = {cid: gpus for cid, gpus, _t in emitted}
    for n in range(1, 6):  # every method of a point on the same device
        assert len({by_case[f"{m}/n={n}"] for m in METHODS}) == 1


def test_an_error_in_a_slot_stops_the_pool_and_is_raised(tmp_path):
    suite = _suite(tmp_path)
    started = []

    def run_unit(unit, slot, emit, stopped):
        started.append(unit.key)
        if unit.key == "n=1":
            raise RuntimeError("slot broke")
        stopped.wait(5)

    with pytest.raises(RuntimeError, match="slot broke"):
        pool.run_units(
            units.split(schedule(suite.cases("cpu")), True), pool.gpu_slots(["0", "1"], 1), run_unit, lambda *what: None
        )
    assert "n=3" not in started


@pytest.mark.subprocess
def test_a_pooled_run_gives_every_worker_its_units_gpu_and_records_it(tmp_path, monkeypatch):
    # Fake device list on a CPU: CUDA_VISIBLE_DEVICES is what each worker gets, and the rows say so.
    path = make_suite(tmp_path, ["sinusoidal", "alibi"], grid="[1, 2]", behaviour="sleep", sleep_s=0.2, threads=1)
    suite = suitemod.resolve(suitemod.load(path), "default")
    seen, lock, real = [], threading.Lock(), run_worker

    def recording(case, timeout_s, env=None):
        t0 = time.perf_counter()
        result = real(case, timeout_s, env)
        with lock:
            seen.append(((env or {}).get("CUDA_VISIBLE_DEVICES"), case.params["n"], t0, time.perf_counter()))
        return result

    monkeypatch.setattr(runner, "run_worker", recording)
    result = runner.run_suite(suite, runner.RunOptions("cpu", tmp_path / "res", progress=False, gpus=("0", "1")))
    rows = read_rows(result.run_dir / "cases.jsonl")
    assert len(rows) == 4 and {r["status"] for r in rows} == {"ok"}
    device_of = {}
    for r in rows:
        assert r["info"]["unit"] == f"n={r['params']['n']}"
        device_of.setdefault(r["params"]["n"], set()).add(r["info"]["cuda_visible_devices"])
    assert all(len(d) == 1 for d in device_of.values()) and set().union(*device_of.values()) <= {"0", "1"}
    for gpu in ("0", "1"):  # never two timed units (nor two workers) at once on one device
        spans = sorted((a, b, n) for g, n, a, b in seen if g == gpu)
        assert all(b <= a2 for (_a, b, _n), (a2, _b2, _n2) in zip(spans, spans[1:]))
    assert {g for g, *_ in seen} == {"0", "1"}


@pytest.mark.subprocess
def test_parallel_runs_untimed_cases_side_by_side_and_a_timed_task_refuses_it(tmp_path, capsys, untimed, patch_task):
    path = make_suite(tmp_path, ["sinusoidal", "rotary"], behaviour="sleep", sleep_s=0.3, threads=1)
    code = cli.main(["--suite", str(path), "--results", str(tmp_path / "res"), "--parallel", "2", "--quiet", "--device", "cpu"])
    assert code == 0, capsys.readouterr().err
    rows = read_rows(next((tmp_path / "res" / "t").iterdir()) / "cases.jsonl")
    assert {r["info"]["pool_slot"] for r in rows} == {"0", "1"} and len(rows) == 2
    assert len({r["metrics"]["pid"] for r in rows}) == 2
    patch_task("_testing", TIMED=True)
    capsys.readouterr()
    assert (
        cli.main(["--suite", str(path), "--results", str(tmp_path / "res2"), "--parallel", "2", "--device", "cpu"])
        == cli.EXIT_USAGE
    )
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "PoolError: --parallel 2: task '_testing' times its methods" in err
    assert not (tmp_path / "res2").exists()  # refused before anything is written


@pytest.mark.subprocess
def test_ctrl_c_in_a_pooled_run_kills_every_running_worker_and_keeps_saved_rows(tmp_path):
    from posbench.run import launch

    path = make_suite(
        tmp_path,
        ["sinusoidal", "alibi"],
        grid="[1, 2]",
        threads=1,
        behaviour="sleep",
        sleep_s=60,
        by_method={"sinusoidal/n=1": "ok"},
    )

    def interrupt(row, i, n):
        raise KeyboardInterrupt  # as Ctrl-C in the thread that saves rows

    suite = suitemod.resolve(suitemod.load(path), "default")
    t0 = time.monotonic()
    with pytest.raises(runner.Interrupted) as info:
        runner.run_suite(suite, runner.RunOptions("cpu", tmp_path / "res", progress=False, gpus=("0", "1"), on_row=interrupt))
    assert time.monotonic() - t0 < 50  # the 60 s sleepers were killed, not waited for
    assert not launch._RUNNING  # no worker left running
    rows = read_rows(info.value.run_dir / "cases.jsonl")
    assert [r["case_id"] for r in rows] == ["sinusoidal/n=1"]  # the row saved before Ctrl-C stays; no killed-worker rows


def test_a_unit_whose_cases_all_have_ok_rows_is_done_while_its_process_exits():
    # follow() ends on the last row; the scheduler may still read RUNNING for that task a moment
    # later, and `status` then said "running" for a finished unit (seen once in CI).
    from posbench.core.case import CaseSpec
    from posbench.run.sweep_state import JobState, unit_status

    spec = {
        "suite": "t",
        "task": "efficiency",
        "method": "alibi",
        "params": {"seq_len": 8},
        "settings": {},
        "device": "cpu",
        "run_id": "r",
        "profile": "cpu",
    }
    unit = {"todo": [[spec, 1]], "submitted_at": "2026-11-24T00:00:00"}
    case_id = CaseSpec.from_json(spec).id
    ok = {(case_id, 1): {"status": "ok", "started_at": "2026-11-24T00:00:01"}}
    err = {(case_id, 1): {"status": "error", "started_at": "2026-11-24T00:00:01"}}
    assert unit_status(JobState("RUNNING"), unit, ok) == ("done", 1)
    assert unit_status(JobState("RUNNING"), unit, err) == ("running", 1)  # may still write a later row
    assert unit_status(JobState("RUNNING"), unit, {}) == ("running", 0)
    assert unit_status(JobState("PENDING"), unit, {}) == ("queued", 0)
    assert unit_status(JobState("COMPLETED"), unit, err) == ("failed", 1)


def test_a_row_belongs_to_a_submission_by_its_token_not_by_the_clock():
    # Rows' times are whole seconds: a failure row written in the same second as the resubmission is
    # still the old submission's (the new task once took it for its own, skipped the case, and status
    # said failed); a row the new task wrote is its own even where its node's clock runs behind.

    from posbench.core.case import CaseSpec
    from posbench.run.sweep_state import JobState, unit_status
    from posbench.store.launched_sweep import missing, of_submission

    spec = {
        "suite": "t",
        "task": "efficiency",
        "method": "alibi",
        "params": {"seq_len": 8},
        "settings": {},
        "device": "cpu",
        "run_id": "r",
        "profile": "cpu",
    }
    key = (CaseSpec.from_json(spec).id, 1)
    unit = {"todo": [[spec, 1]], "submitted_at": "2026-11-24T00:00:05+00:00", "submission": "new"}
    old = {"status": "error", "started_at": "2026-11-24T00:00:05+00:00", "info": {"submission": "old"}}
    behind = {"status": "ok", "started_at": "2026-11-24T00:00:03+00:00", "info": {"submission": "new"}}
    assert not of_submission(old, unit) and of_submission(behind, unit)
    assert not of_submission(None, unit) and not of_submission(dict(behind, info=None), unit)
    assert missing(unit, {key: old}) == [(spec, 1)] and missing(unit, {key: behind}) == []
    assert unit_status(JobState("COMPLETED"), unit, {key: old}) == ("failed", 0)
    assert unit_status(JobState("COMPLETED"), unit, {key: behind}) == ("done", 1)
    # A record written before tokens: the clock is all there is.
    legacy = {k: v for k, v in unit.items() if k != "submission"}
    assert of_submission(old, legacy) and not of_submission(behind, legacy)


def test_slots_for_is_the_one_check_of_the_run_and_its_dry_run(tmp_path, untimed):
    """``pool.slots_for``: None for one job at a time, a slot per turn or per GPU group, and the
    refusals (under torchrun, both flags)."""
    suite = _suite(tmp_path)
    base = RunOptions("cpu", tmp_path / "results", run_id="x")
    assert pool.slots_for(suite, base) is None
    assert [s.index for s in pool.slots_for(suite, RunOptions("cpu", tmp_path, parallel=3))] == [0, 1, 2]
    assert [s.gpus for s in pool.slots_for(suite, RunOptions("cuda", tmp_path, gpus=("0", "1")))] == [("0",), ("1",)]
    with pytest.raises(pool.PoolError, match="under torchrun"):
        pool.slots_for(suite, RunOptions("cpu", tmp_path, parallel=2, in_process=True))
    with pytest.raises(pool.PoolError, match="both say how many units"):
        pool.slots_for(suite, RunOptions("cuda", tmp_path, gpus=("0",), parallel=2))


def test_a_timed_tasks_parallel_is_refused_by_the_run_and_its_dry_run_alike(tmp_path):
    from posbench.run.dry_run import dry_run

    timed = _suite(tmp_path)  # the test task times its methods against each other
    assert timed.task.timed
    for check in (pool.slots_for, dry_run):
        with pytest.raises(pool.PoolError, match="times its methods against each other"):
            check(timed, RunOptions("cpu", tmp_path / "results", run_id="x", parallel=2))
