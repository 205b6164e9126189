"""Paired windows (``pairing: windows``): the balanced window order, per-window pairing and the
cluster bootstrap under a planted drift, one worker process per grid point and round with a row
per case, a failing method or a crashed group, resume and retry per (case, round), and a short
real run of the efficiency suite."""

import json
import math
import random
import re
import statistics
from collections import Counter
from pathlib import Path

import pytest

from posbench.cli import app as cli
from posbench.cli.run_output import EXIT_CASES_FAILED
from posbench.core import registry
from posbench.core.method import PositionMethod
from posbench.core.registry import register
from posbench.engine import timing_windows as paired
from posbench.report import bootstrap
from posbench.report import numbers as fmt
from posbench.report import rows as rowsmod
from posbench.report.tabulate import metric_tables
from posbench.run import runner, worker
from posbench.run import suite as suitemod
from posbench.run.options import RunOptions
from posbench.run.schedule import check_pairing, jobs, plan_rounds, schedule
from posbench.store.run_rows import case_rows, read_rows
from posbench.tasks import find as find_task
from tests.helpers.ratios import recovers_planted_ratio
from tests.helpers.report_rows import write_run
from tests.helpers.suites import make_suite

# -- the window order ---------------------------------------------------------------------------


@pytest.mark.parametrize("n", [1, 2, 3, 4, 5, 6])
def test_window_order_is_a_balanced_williams_design(n):
    cycle = n if n % 2 == 0 else 2 * n
    rows = [paired.window_order(n, i) for i in range(cycle)]
    assert all(sorted(r) == list(range(n)) for r in rows)
    assert paired.window_order(n, cycle + 1) == rows[1]  # it repeats with the cycle
    # Every method in every position equally often ...
    for pos in range(n):
        assert Counter(r[pos] for r in rows) == Counter({m: cycle // n for m in range(n)})
    # ... and right after every other method equally often (once per pair for even n, twice for odd).
    follows = Counter((a, b) for r in rows for a, b in zip(r, r[1:]))
    if n > 1:
        assert set(follows) == {(a, b) for a in range(n) for b in range(n) if a != b}
        assert set(follows.values()) == {1 if n % 2 == 0 else 2}
    if n > 2:  # over the whole run of windows too, no method always follows the same one
        sequence = [m for r in rows * 2 for m in r]
        before = {}
        for a, b in zip(sequence, sequence[1:]):
            before.setdefault(b, set()).add(a)
        assert all(len(preds) > 1 for preds in before.values())
    with pytest.raises(ValueError, match="n must be at least 1"):
        paired.window_order(0, 0)


def test_alternate_interleaves_windows_and_a_failing_member_drops_out_alone():
    calls = []
    clock = iter(range(1000))

    def measure(m):
        calls.append(m.key)
        if m.key == "b" and calls.count("b") == 2:
            raise RuntimeError("boom in b's second window")
        return 0.25

    members = [paired.Member(k) for k in "abc"]
    paired.alternate(members, "train", 4, measure, clock=lambda: float(next(clock)))
    # window w runs every member in the order of row w; b raised in its second window
    expected = []
    for w in range(4):
        expected += ["abc"[i] for i in paired.window_order(3, w) if not ("abc"[i] == "b" and w > 1)]
    assert calls == expected
    a, b, c = members
    assert a.ok and c.ok and len(a.windows["train"]) == len(c.windows["train"]) == 4
    assert b.failure["status"] == "error" and b.failure["message"] == "RuntimeError: boom in b's second window"
    assert "Traceback" in b.failure["traceback"] and len(b.windows["train"]) == 1
    starts = [t for m in (a, c) for t, _ in m.windows["train"]]
    assert len(set(starts)) == len(starts)  # each window its own start time
    assert all(s == 0.25 for _, s in a.windows["train"])
    # A member that failed runs nothing more, not even through guard.
    assert b.guard(lambda: pytest.fail("must not run")) is None


# -- pairing and the bootstrap ----------------------------------------------------------------


def _drifting_windows(rounds=4, windows=20, ratio=0.9, seed=3, round_ratios=None):
    """Window speeds of a baseline and a method alternating in one process per round: each
    process has its own level (up to +-20%), the speed drifts +-20% over tens of seconds within
    it, and each window has 0.5% noise of its own. Paired windows are 0.5 s apart; who goes first
    alternates, as the balanced order does."""
    rng = random.Random(seed)
    method, base, speeds = [], [], []
    t = 0.0
    for r in range(rounds):
        level = 1 + 0.2 * rng.uniform(-1, 1)
        true_ratio = round_ratios[r] if round_ratios else ratio
        b, m = [], []
        for w in range(windows):
            for who in ("base", "method") if w % 2 == 0 else ("method", "base"):
                speed = level * (1 + 0.2 * math.sin(t / 7))
                speeds.append(speed)
                value = 1000 * speed * (1 + rng.gauss(0, 0.005)) * (true_ratio if who == "method" else 1)
                (m if who == "method" else b).append(value)
                t += 0.5
        method.append({"group": f"g{r}", "values": m})
        base.append({"group": f"g{r}", "values": b})
    return method, base, speeds


def test_window_pairs_recover_a_planted_ratio_under_20_percent_drift():
    method, base, speeds = _drifting_windows()
    interval = recovers_planted_ratio(method, base, speeds, pairs=80, tol=0.004, width=0.018)
    # The same windows unpaired (each side's median over everything) keep the drift: far wider.
    wide = bootstrap.ratio_of_medians_interval(bootstrap.value_clusters(method), bootstrap.value_clusters(base))
    assert wide[1] - wide[0] > 5 * (interval[1] - interval[0])
    # Rounds where one method ran alone (the group differs: a retried case) pair by their medians.
    moved = [dict(method[0], group="elsewhere")] + method[1:]
    clusters = bootstrap.window_clusters(moved, base)
    assert [len(c) for c in clusters] == [1, 20, 20, 20]
    assert clusters[0][0] == pytest.approx(statistics.median(method[0]["values"]) / statistics.median(base[0]["values"]))
    # A round missing on either side (a failed round) drops out.
    assert len(bootstrap.window_clusters([None] + method[1:], base)) == 3


def test_the_interval_widens_with_differences_between_processes():
    """Per-process differences in the ratio itself (0.88 .. 0.94) cannot be averaged away by
    many windows of the same processes: the cluster bootstrap resamples rounds first."""
    method, base, _ = _drifting_windows(round_ratios=[0.88, 0.92, 0.90, 0.94])
    ratio, interval, _ = bootstrap.paired_ratio(method, base)
    flat = bootstrap.bootstrap_interval(bootstrap.pooled(bootstrap.window_clusters(method, base)))
    assert interval[1] - interval[0] > 0.02 > flat[1] - flat[0]
    assert bootstrap.bootstrap_interval([[1.0]]) is None and bootstrap.bootstrap_interval([[1.0, 1.1]]) is not None


def _window_rows(method_rounds, base_rounds, run_id="run-w"):
    rows = []
    for name, rounds in (("sinusoidal", base_rounds), ("alibi", method_rounds)):
        for r, entry in enumerate(rounds, 1):
            values = entry["values"]
            rows.append(
                {
                    "case_id": f"{name}/seq_len=64",
                    "suite": "efficiency",
                    "task": "efficiency",
                    "method": name,
                    "params": {"seq_len": 64},
                    "status": "ok",
                    "message": "",
                    "metrics": {"train_wps": statistics.median(values)},
                    "series": {"train_wps_windows": values, "train_wps_window_t": list(range(len(values)))},
                    "info": {"pairing": "windows", "group": entry["group"]},
                    "settings": {"rounds": len(rounds), "pairing": "windows"},
                    "device": "cpu",
                    "profile": "cpu",
                    "run_id": run_id,
                    "started_at": f"2026-01-01T00:{r:02d}:00+00:00",
                    "duration_s": 1.0,
                    "posbench_version": "x",
                    "git_commit": "abc",
                    "traceback": "",
                    "round": r,
                }
            )
    return rows


def test_merged_rows_keep_each_rounds_windows_and_tables_pair_them(tmp_path):
    method, base, _ = _drifting_windows(rounds=3, windows=10, ratio=0.95)
    rows = _window_rows(method, base)
    merged = case_rows(rows)["alibi/seq_len=64"]
    assert merged["series"]["train_wps_by_window"] == [{"group": f"g{r}", "values": method[r]["values"]} for r in range(3)]
    assert merged["metrics"]["n_rounds"] == 3
    # one round of a paired-windows case is merged too (its windows still pair)
    (single,) = case_rows(rows[:1]).values()
    assert single["series"]["train_wps_by_window"] == [base[0]]

    run = write_run(tmp_path, rows, metrics=["train_wps"], methods=["sinusoidal", "alibi"])
    (table,) = metric_tables(rowsmod.load_runs(run, find_task=find_task), "efficiency", metrics=["train_wps"])
    cell = table.cell("alibi", 64)
    ratio, interval, pairs = bootstrap.paired_ratio(method, base)
    assert pairs == 30 and cell.ratio == ratio and cell.ratio_interval == interval
    assert ratio == pytest.approx(0.95, abs=0.005)
    assert cell.text.endswith(f"(0.95x {fmt.interval_text(ratio, interval)})")
    assert "median of per-window ratios (paired windows" in table.caption


def test_compare_pairs_windows_within_each_run(tmp_path):
    from posbench.report.compare import compare_runs

    one = _window_rows(*_drifting_windows(seed=1, ratio=0.9)[:2], run_id="run-1")
    two = _window_rows(*_drifting_windows(seed=2, ratio=0.9)[:2], run_id="run-2")
    result = compare_runs(write_run(tmp_path / "a", one), write_run(tmp_path / "b", two), find_task=find_task)
    (change,) = [c for c in result.changes if c.case_id == "alibi/seq_len=64"]
    # each run's per-window ratio to its own baseline: the different drift of the runs cancels
    assert change.basis == "ratio to sinusoidal" and change.ratio == pytest.approx(1.0, abs=0.01)
    assert change.verdict == "same" and change.interval[1] - change.interval[0] < 0.02


# -- the runner: one process per grid point and round ---------------------------------------------


def _suite(tmp_path, methods, **settings):
    path = make_suite(tmp_path, methods, **{"pairing": "windows", **settings})
    return path, suitemod.resolve(suitemod.load(path), "default")


def test_jobs_group_a_grid_points_cases_per_round(tmp_path):
    _, suite = _suite(tmp_path, ["sinusoidal", "rotary", "alibi"], grid="[1, 2]", rounds=2)
    grouped = jobs(schedule(suite.cases("cpu")))
    assert [([c.id for c in cases], r) for cases, r in grouped] == [
        (["sinusoidal/n=1", "rotary/n=1", "alibi/n=1"], 1),
        (["rotary/n=1", "alibi/n=1", "sinusoidal/n=1"], 2),
        (["sinusoidal/n=2", "rotary/n=2", "alibi/n=2"], 1),
        (["rotary/n=2", "alibi/n=2", "sinusoidal/n=2"], 2),
    ]
    _, plain = _suite(tmp_path, ["sinusoidal", "rotary"], pairing="rounds")
    assert [len(cases) for cases, _ in jobs(schedule(plain.cases("cpu")))] == [1, 1]


@pytest.mark.subprocess
def test_a_group_is_one_process_with_a_row_per_case_and_a_failing_method_fails_alone(tmp_path):
    _, suite = _suite(
        tmp_path,
        ["sinusoidal", "rotary", "alibi"],
        grid="[1, 2]",
        rounds=2,
        by_method={"rotary/n=1": "raise", "alibi/n=2": "nan"},
    )
    seen = []
    result = runner.run_suite(
        suite,
        runner.RunOptions(
            "cpu", tmp_path / "res", progress=False, on_row=lambda row, i, n: seen.append((row["case_id"], row["round"], i, n))
        ),
    )
    assert [s[2:] for s in seen] == [(i, 12) for i in range(1, 13)]  # progress counts cases
    stored = read_rows(result.run_dir / "cases.jsonl")
    by_key = {(r["case_id"], r["round"]): r for r in stored}
    assert len(by_key) == 12
    # one worker process per (grid point, round): its cases share the pid, the next group has another
    pids = {}
    for r in stored:
        if r["status"] == "ok":
            pids.setdefault((r["params"]["n"], r["round"]), set()).add(r["metrics"]["pid"])
    assert all(len(p) == 1 for p in pids.values()) and len(set().union(*pids.values())) == 4
    for rnd in (1, 2):
        failed = by_key[("rotary/n=1", rnd)]
        assert failed["status"] == "error" and failed["message"] == "ValueError: boom in rotary"
        assert "Traceback" in failed["traceback"]
        assert by_key[("alibi/n=2", rnd)]["status"] == "diverged"
        assert by_key[("sinusoidal/n=1", rnd)]["status"] == by_key[("alibi/n=1", rnd)]["status"] == "ok"
        assert by_key[("sinusoidal/n=1", rnd)]["info"] == {
            "pairing": "windows",
            "group_size": "3",
            "round": str(rnd),
            "flush_denormal": False,  # the worker says whether it flushed (_testing: off)
        }
    assert {r["case_id"]: r["status"] for r in result.rows} == {
        "sinusoidal/n=1": "ok",
        "rotary/n=1": "error",
        "alibi/n=1": "ok",
        "sinusoidal/n=2": "ok",
        "rotary/n=2": "ok",
        "alibi/n=2": "diverged",
    }


@pytest.mark.subprocess
def test_a_crashed_group_gives_every_case_of_it_an_error_row(tmp_path, never_here):
    _, suite = _suite(
        tmp_path, ["sinusoidal", "rotary", never_here], grid="[1, 2]", by_method={"rotary/n=2": "kill"}, timeout_s=20
    )
    result = runner.run_suite(suite, runner.RunOptions("cpu", tmp_path / "res", progress=False))
    rows = {r["case_id"]: r for r in result.rows}
    assert {cid: r["status"] for cid, r in rows.items()} == {
        "sinusoidal/n=1": "ok",
        "rotary/n=1": "ok",
        "never_here/n=1": "unavailable",
        "sinusoidal/n=2": "error",
        "rotary/n=2": "error",
        "never_here/n=2": "unavailable",
    }
    for cid in ("sinusoidal/n=2", "rotary/n=2"):
        assert rows[cid]["message"] == ("worker died without a result (killed by SIGKILL) (one process for sinusoidal, rotary)")
    assert rows["never_here/n=2"]["message"] == "needs a machine that does not exist"


@pytest.mark.subprocess
def test_a_group_past_its_time_limit_times_out_every_case_of_it(tmp_path):
    _, suite = _suite(tmp_path, ["sinusoidal", "rotary"], by_method={"rotary": "sleep"}, sleep_s=60, timeout_s=1)
    result = runner.run_suite(suite, runner.RunOptions("cpu", tmp_path / "res", progress=False))
    # the limit is timeout_s per case of the group: 2 s for two
    assert [(r["status"], r["message"]) for r in result.rows] == [
        ("timeout", "no result after 2 s; worker killed (one process for sinusoidal, rotary)")
    ] * 2


@pytest.mark.subprocess
def test_resume_runs_only_the_missing_case_rounds_and_retry_reruns_one(tmp_path, capsys):
    flag = tmp_path / "interrupted.flag"
    path, suite = _suite(
        tmp_path,
        ["sinusoidal", "rotary", "alibi"],
        grid="[1, 2]",
        rounds=2,
        by_method={"alibi/n=2": "interrupt_once"},
        flag_file=str(flag),
    )
    args = ["--suite", str(path), "--device", "cpu", "--results", str(tmp_path / "res"), "--quiet"]
    assert cli.main(args) == cli.EXIT_INTERRUPTED  # in the first group of n=2
    assert "interrupted: 6 of 12 cases finished" in capsys.readouterr().err
    run_dir = next((tmp_path / "res" / "t").iterdir())
    first = read_rows(run_dir / "cases.jsonl")
    assert sorted((r["case_id"], r["round"]) for r in first) == sorted(
        (f"{m}/n=1", r) for m in ("sinusoidal", "rotary", "alibi") for r in (1, 2)
    )

    assert cli.main(args) == 0
    stored = read_rows(run_dir / "cases.jsonl")
    assert stored[:6] == first and len(stored) == 12
    assert sorted((r["case_id"], r["round"]) for r in stored[6:]) == sorted(
        (f"{m}/n=2", r) for m in ("sinusoidal", "rotary", "alibi") for r in (1, 2)
    )
    assert "6 case(s) run, 6 already done" in capsys.readouterr().out

    # --retry-failed: just the failed (case, round) runs again, in a group of its own.
    lines = [json.loads(line) for line in (run_dir / "cases.jsonl").read_text().splitlines()]
    target = next(i for i, r in enumerate(lines) if (r["case_id"], r["round"]) == ("rotary/n=2", 2))
    lines[target].update(status="error", message="ValueError: boom")
    (run_dir / "cases.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines))
    todo = plan_rounds(suite, RunOptions("cpu", tmp_path / "res", retry_failed=True), run_dir.name, run_dir).todo
    assert [([c.id for c in cases], r) for cases, r in jobs(todo)] == [(["rotary/n=2"], 2)]
    again = runner.run_suite(
        suite, runner.RunOptions("cpu", tmp_path / "res", run_id=run_dir.name, retry_failed=True, progress=False)
    )
    assert again.ran == 1 and all(r["status"] == "ok" for r in again.rows)


def test_windows_pairing_needs_one_process(tmp_path):
    from posbench.tasks.efficiency.task import Settings

    _, suite = _suite(tmp_path, ["sinusoidal"])
    with pytest.raises(
        suitemod.SuiteError,
        match="pairing: windows runs every method of a grid point in one worker process, which a run under torchrun",
    ):
        check_pairing(suite, in_process=True)
    with pytest.raises(
        ValueError,
        match="pairing: windows measures every method of a grid point in one process; allowed: nproc 1, or pairing: rounds",
    ):
        Settings(model="tiny", tokens_per_step=64, pairing="windows", nproc=2)


# -- the efficiency task ----------------------------------------------------------------------------


@pytest.fixture
def broken_methods():
    """Two methods registered in this process: one raises while it is built, one in training."""

    @register
    class BrokenInit(PositionMethod):
        name = "broken_init"

        def __init__(self, cfg):
            raise RuntimeError("cannot build broken_init")

    @register
    class BrokenStep(PositionMethod):
        name = "broken_step"

        def attend(self, q, k, v, q_pos, k_pos, layer, state=None):
            import torch

            if torch.is_grad_enabled():
                raise RuntimeError("broken_step cannot train")
            return super().attend(q, k, v, q_pos, k_pos, layer)

    yield
    registry.unregister("broken_init")
    registry.unregister("broken_step")


def _efficiency_cases(methods, **settings):
    from posbench.core.case import Case
    from posbench.tasks.efficiency.task import Params, Settings

    base = dict(
        model="tiny",
        tokens_per_step=64,
        warmup_steps=1,
        measure_steps=1,
        eval_measure_steps=2,
        windows=3,
        threads=1,
        pairing="windows",
        model_overrides={"n_layers": 1},
    )
    return [
        Case(
            suite="s",
            task="efficiency",
            method=m,
            params=Params(seq_len=16),
            settings=Settings(**{**base, **settings}),
            device="cpu",
            profile="cpu",
            run_id="r",
        )
        for m in methods
    ]


@pytest.mark.slow  # times 3 evaluation and 3 training windows per method
def test_efficiency_group_alternates_windows_and_a_broken_method_fails_alone(broken_methods):
    from posbench.tasks.efficiency.run import run_group

    cases = _efficiency_cases(["sinusoidal", "broken_init", "alibi", "broken_step"])
    out = run_group(cases, 2)  # round 2: no memory processes
    assert out["broken_init/seq_len=16"]["status"] == "error"
    assert out["broken_init/seq_len=16"]["message"] == "RuntimeError: cannot build broken_init"
    assert out["broken_step/seq_len=16"]["message"] == "RuntimeError: broken_step cannot train"
    ok = {k: out[k] for k in ("sinusoidal/seq_len=16", "alibi/seq_len=16")}
    assert all(r["status"] == "ok" for r in ok.values())
    groups = {r["info"]["group"] for r in ok.values()}
    assert len(groups) == 1 and all(r["info"]["pairing"] == "windows" for r in ok.values())
    for r in ok.values():
        m, series = r["metrics"], r["series"]
        for phase in ("eval", "train"):
            assert len(series[f"{phase}_wps_windows"]) == len(series[f"{phase}_wps_window_t"]) == 3
            assert m[f"{phase}_wps"] == statistics.median(series[f"{phase}_wps_windows"])
        assert "peak_mem_train_bytes" not in m and "round-1 row" in r["info"]["memory"]
        assert m["batch_size"] == 4 and math.isfinite(m["train_loss"])
        assert m["energy_j"] is None and r["info"]["energy_source"] == "unavailable: needs CUDA"
    # The two methods' windows interleave in time, phase by phase: evaluation, then training.
    times = sorted(
        (t, k, phase) for k, r in ok.items() for phase in ("eval", "train") for t in r["series"][f"{phase}_wps_window_t"]
    )
    assert [p for _, _, p in times] == ["eval"] * 6 + ["train"] * 6
    owners = [k for _, k, p in times if p == "eval"]
    assert all(owners[2 * w] != owners[2 * w + 1] for w in range(3))
    # broken_step's evaluation windows were measured before it failed in training
    assert out["broken_step/seq_len=16"]["metrics"] == {}


def test_a_failure_outside_every_method_fails_the_whole_group():
    cases = _efficiency_cases(["sinusoidal", "alibi"], tokens_per_step=8)
    out = worker.run_group({"group": [c.to_json() for c in cases], "round": 2})["group"]
    assert [r["status"] for r in out] == ["error", "error"]
    assert out[0]["message"] == "ValueError: tokens_per_step 8 < seq_len 16: no full sequence fits in a step"


@pytest.mark.subprocess
def test_short_real_run_of_the_cpu_efficiency_suite_pairs_windows(tmp_path, capsys):
    plugins = tmp_path / "plugins"
    plugins.mkdir()
    (plugins / "cannot_build.py").write_text(
        "from posbench.core.method import PositionMethod\nfrom posbench.core.registry import register\n\n\n@register\n"
        "class CannotBuild(PositionMethod):\n    name = 'cannot_build'\n\n    def __init__(self, cfg):\n"
        "        raise RuntimeError('cannot build this one')\n"
    )
    code = cli.main(
        [
            "--suite",
            "efficiency",
            "--profile",
            "cpu",
            "--methods",
            "sinusoidal,alibi,cannot_build",
            "--methods-dir",
            str(plugins),
            "--results",
            str(tmp_path / "res"),
            "--quiet",
            "--set",
            "grid.seq_len=[32]",
            "--set",
            "tokens_per_step=64",
            "--set",
            "warmup_steps=1",
            "--set",
            "measure_steps=1",
            "--set",
            "eval_measure_steps=2",
            "--set",
            "windows=4",
            "--set",
            "rounds=2",
            "--set",
            "model_overrides={n_layers: 1}",
        ]
    )
    out = capsys.readouterr().out
    assert code == EXIT_CASES_FAILED, out  # cannot_build's error rows: the run says so (issue 42)
    (run_dir,) = (tmp_path / "res" / "efficiency").iterdir()
    rows = {(r["method"], r["round"]): r for r in read_rows(run_dir / "cases.jsonl")}
    assert set(rows) == {(m, r) for m in ("sinusoidal", "alibi", "cannot_build") for r in (1, 2)}
    # cannot_build fails alone: in its memory process (round 1), in the group (round 2)
    assert rows[("cannot_build", 1)]["message"] == "memory process: RuntimeError: cannot build this one"
    assert rows[("cannot_build", 2)]["message"] == "RuntimeError: cannot build this one"
    for rnd in (1, 2):
        s, a = rows[("sinusoidal", rnd)], rows[("alibi", rnd)]
        assert s["status"] == a["status"] == "ok" and s["info"]["group"] == a["info"]["group"]
        assert s["info"]["pairing"] == "windows" and s["settings"]["pairing"] == "windows"
        assert len(a["series"]["train_wps_windows"]) == len(a["series"]["eval_wps_windows"]) == 4
    assert rows[("sinusoidal", 1)]["info"]["group"] != rows[("sinusoidal", 2)]["info"]["group"]
    # peak memory from each method's own process, in the round-1 row
    assert rows[("alibi", 1)]["metrics"]["peak_mem_train_bytes"] > 0
    assert "own process" in rows[("alibi", 1)]["info"]["memory"]
    assert "peak_mem_train_bytes" not in rows[("alibi", 2)]["metrics"]
    table = (run_dir / "table.md").read_text()
    train = table.split("**Training speed")[1].split("**Evaluation speed")[0]
    alibi = next(line for line in train.splitlines() if line.startswith("| alibi"))
    # the ratio carries its interval: ±h where symmetric, else its bounds (numbers.interval_text)
    assert (
        re.search(r"x (±\d+\.\d\d|\[\d+\.\d\d, \d+\.\d\d\])\)", alibi) and "median of per-window ratios (paired windows" in table
    )
    merged = case_rows(read_rows(run_dir / "cases.jsonl"))
    assert len(merged["alibi/seq_len=32"]["series"]["train_wps_by_window"]) == 2
    assert Path(run_dir / "table.csv").read_text().count("alibi") >= 3


def test_evaluation_windows_have_their_own_length(monkeypatch):
    from posbench.tasks.efficiency.run import Bench, run, run_group
    from posbench.tasks.efficiency.task import Settings

    calls = Counter()
    step = Bench.eval_step

    def counted(self):
        calls[self.model.method.name] += 1
        return step(self)

    monkeypatch.setattr(Bench, "eval_step", counted)
    (alone,) = _efficiency_cases(["alibi"], pairing="rounds", warmup_steps=2, windows=3, eval_measure_steps=5)
    run(alone)
    assert calls == {"alibi": 2 + 3 * 5}
    calls.clear()
    run_group(_efficiency_cases(["sinusoidal", "alibi"], warmup_steps=1, windows=2, eval_measure_steps=4), 2)
    assert calls == {"sinusoidal": 1 + 2 * 4, "alibi": 1 + 2 * 4}
    assert Settings(model="tiny", tokens_per_step=64, measure_steps=3).eval_steps == 3
