"""Data parallelism on CPU with gloo and two processes: the same numbers as one process, failing
ranks as rows, shards that cover a suite, and the global words/s rule.

Kept cheap for a 2-core machine: one spawned pair of ranks checks training and evaluation
together, and the runner tests use the torch-free ``_testing`` task.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from posbench.cli import app as cli
from posbench.cli.run_output import EXIT_CASES_FAILED
from posbench.core.method import ModelConfig
from posbench.core.model import TransformerLM, build_model
from posbench.engine import distributed
from posbench.engine.evaluate import evaluate
from posbench.engine.train import TrainConfig, train
from posbench.report import build as report
from posbench.store.run_rows import latest, read_rows
from posbench.tasks import find as find_task
from tests.helpers.suites import make_suite

ROOT = Path(__file__).resolve().parents[2]
WORLD = 2


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _tokens() -> np.ndarray:
    return np.random.default_rng(0).integers(0, 64, size=700)


def _model() -> TransformerLM:
    torch.manual_seed(0)
    return build_model(ModelConfig(method="alibi", vocab_size=64, n_layers=2, d_model=32, n_heads=2, d_ff=64))


def _batches(tokens):
    # The same global batches in every process: the split across ranks happens inside train().
    rng = np.random.default_rng(1)
    while True:
        starts = rng.integers(0, len(tokens) - 17, size=4)
        yield torch.from_numpy(tokens[starts[:, None] + np.arange(17)])


def _work() -> dict:
    """Training curve and evaluations; run alike by one process and by every rank."""
    tokens = _tokens()
    cfg = TrainConfig(seq_len=16, batch_size=4, steps=6, lr=3e-3, warmup_steps=2, log_every=1, precision="float32")
    curve = train(_model(), _batches(tokens), cfg).curve
    model = _model()
    evals = {}
    for mode, stride in (("nonoverlapping", None), ("sliding", 8)):
        r = evaluate(model, tokens, 32, mode=mode, stride=stride, batch_size=3)  # 3: shards of unequal size
        evals[mode] = {
            "loss": r.loss,
            "per_pos": [float(x) for x in r.per_position_loss],
            "counts": r.per_position_count.tolist(),
            "n": r.n_tokens_scored,
        }
    return {"curve": [loss for _, loss in curve], "evals": evals}


def _rank_main(rank: int, port: int, out: str) -> None:
    os.environ.update(RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=str(WORLD), MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    assert distributed.init_from_env("cpu", timeout_s=60)
    result = _work()
    # A time budget: each rank's clock re-plans the steps, and the ranks must agree on them.
    timed = train(
        _model(),
        _batches(_tokens()),
        TrainConfig(seq_len=16, batch_size=4, time_s=1.0, warmup_s=0.2, warmup_steps=1, precision="float32"),
    )
    Path(out).with_name(f"time-budget-steps-{rank}").write_text(str(timed.steps))
    # Fake window times: rank 0 took 1 s and 3 s, rank 1 2 s and 1 s; 100 tokens each per window.
    result["rates"] = distributed.global_rates(100, [1.0, 3.0] if rank == 0 else [2.0, 1.0])
    if rank == 0:
        Path(out).write_text(json.dumps(result))
    distributed.teardown()


@pytest.fixture(scope="module")
def two_ranks(tmp_path_factory):
    out = tmp_path_factory.mktemp("ddp") / "rank0.json"
    torch.multiprocessing.spawn(_rank_main, args=(_free_port(), str(out)), nprocs=WORLD, join=True)
    return json.loads(out.read_text())


@pytest.fixture(scope="module")
def one_process():
    torch.set_num_threads(1)
    return _work()


@pytest.mark.subprocess
def test_ddp_training_matches_one_process_with_the_same_global_batch(two_ranks, one_process):
    assert len(two_ranks["curve"]) == len(one_process["curve"]) == 6
    np.testing.assert_allclose(two_ranks["curve"], one_process["curve"], rtol=1e-5)
    assert one_process["curve"][-1] < one_process["curve"][0]  # it trained: the comparison means something


@pytest.mark.subprocess
def test_ranks_agree_on_the_steps_of_a_time_budget(two_ranks, tmp_path_factory):
    folder = next(tmp_path_factory.getbasetemp().glob("ddp*"))
    steps = [int((folder / f"time-budget-steps-{r}").read_text()) for r in range(WORLD)]
    assert steps[0] == steps[1] >= 1


@pytest.mark.subprocess
@pytest.mark.parametrize("mode", ["nonoverlapping", "sliding"])
def test_distributed_perplexity_equals_one_process(two_ranks, one_process, mode):
    got, want = two_ranks["evals"][mode], one_process["evals"][mode]
    assert got["n"] == want["n"] == 699 and got["counts"] == want["counts"]
    assert got["loss"] == pytest.approx(want["loss"], rel=1e-9)
    np.testing.assert_allclose(got["per_pos"], want["per_pos"], rtol=1e-9)


@pytest.mark.subprocess
def test_global_words_per_second_is_all_tokens_over_the_slowest_rank(two_ranks):
    assert distributed.global_rate([100, 100], [1.0, 2.0]) == 100.0
    # Window 0: slowest 2 s, window 1: slowest 3 s; 200 tokens in each.
    assert two_ranks["rates"] == pytest.approx([100.0, 200.0 / 3])


def test_split_and_shard_helpers_partition_exactly():
    batch = torch.arange(12).view(6, 2)
    assert torch.equal(torch.cat([distributed.split_batch(batch, r, 3) for r in range(3)]), batch)
    with pytest.raises(ValueError, match="not divisible"):
        distributed.split_batch(batch, 0, 4)
    shards = [distributed.shard_batches(10, 3, r, 2) for r in range(2)]
    assert [list(b) for b in shards[0]] == [[0, 1, 2], [6, 7, 8]]
    assert [list(b) for b in shards[1]] == [[3, 4, 5], [9]]


def _suite(tmp_path, methods, grid="[1]", **settings) -> Path:
    return make_suite(tmp_path, methods, grid, **settings)  # suite "t" of the runner's tests


def _rows(results: Path) -> dict[str, dict]:
    (run_dir,) = (results / "t").iterdir()
    return latest(read_rows(run_dir / "cases.jsonl"))


@pytest.mark.subprocess
def test_runner_launches_torchrun_and_a_failing_rank_is_an_error_row(tmp_path):
    path = _suite(tmp_path, ["sinusoidal", "rotary"], nproc=2, timeout_s=60, by_method={"sinusoidal": "fail_rank"})
    # the failing rank's error row makes the run exit EXIT_CASES_FAILED (issue 42), after every row
    assert cli.main(["--suite", str(path), "--results", str(tmp_path / "r"), "--quiet"]) == EXIT_CASES_FAILED
    rows = _rows(tmp_path / "r")
    failed, ok = rows["sinusoidal/n=1"], rows["rotary/n=1"]
    assert failed["status"] == "error" and failed["message"] == "rank 1: ValueError: boom on rank 1"
    assert ok["status"] == "ok" and ok["metrics"]["world_size"] == 2  # the suite went on, on 2 ranks


def _torchrun_bench(tmp_path, path, *extra):
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(ROOT))
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--standalone",
            "--nproc_per_node",
            "2",
            str(ROOT / "bench.py"),
            "--suite",
            str(path),
            "--results",
            str(tmp_path / "r"),
            "--quiet",
            *extra,
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.subprocess
def test_bench_under_torchrun_runs_cases_in_process_and_rank0_writes(tmp_path):
    # "raise" fails on every rank alike: an error row, and the next case still runs.
    path = _suite(tmp_path, ["sinusoidal", "rotary", "alibi"], timeout_s=60, by_method={"rotary": "raise"})
    proc = _torchrun_bench(tmp_path, path, "--allow-failures")  # the error row is by design here
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = _rows(tmp_path / "r")
    assert [r["status"] for r in rows.values()] == ["ok", "error", "ok"]
    assert rows["rotary/n=1"]["message"].startswith("rank 0: ValueError: boom in rotary")
    assert rows["alibi/n=1"]["metrics"]["world_size"] == 2 and rows["alibi/n=1"]["settings"]["nproc"] == 2
    assert proc.stdout.count("case(s) run") == 1  # rank 0 alone reports


@pytest.mark.subprocess
def test_bench_under_torchrun_stops_after_a_rank_fails_alone(tmp_path):
    # Rank 1 raises while rank 0 waits in a barrier until the process group's timeout (timeout_s):
    # the row names rank 1, and the run stops rather than trust collectives out of step.
    path = _suite(tmp_path, ["sinusoidal", "rotary"], timeout_s=3, by_method={"sinusoidal": "fail_rank"})
    proc = _torchrun_bench(tmp_path, path)
    assert proc.returncode != 0 and "RanksOutOfStep: sinusoidal/n=1: rank 1: ValueError: boom on rank 1" in proc.stderr
    rows = _rows(tmp_path / "r")
    assert list(rows) == ["sinusoidal/n=1"] and rows["sinusoidal/n=1"]["status"] == "error"


@pytest.mark.subprocess
def test_shards_cover_every_case_once_and_merge_into_one_table(tmp_path):
    methods = ["sinusoidal", "rotary", "alibi"]
    path = _suite(tmp_path, methods, grid="[1, 2]", timeout_s=30)
    for i in (0, 1):
        assert cli.main(["--suite", str(path), "--results", str(tmp_path / f"m{i}"), "--shard", f"{i}/2", "--quiet"]) == 0
    shards = [_rows(tmp_path / f"m{i}") for i in (0, 1)]
    every = {f"{m}/n={n}" for n in (1, 2) for m in methods}
    assert set(shards[0]) | set(shards[1]) == every and not set(shards[0]) & set(shards[1])
    assert len({r["run_id"] for s in shards for r in s.values()}) == 1  # one run id: the folders merge
    runs = report.load_runs([tmp_path / "m0", tmp_path / "m1"], find_task=find_task)
    ((_, tables),) = report.collect_tables(runs, "sinusoidal")
    (value,) = [t for t in tables if t.metric == "value"]
    assert {(r, c) for (r, c), cell in value.cells.items() if cell.value is not None} == {(m, n) for m in methods for n in (1, 2)}


@pytest.mark.subprocess
def test_bad_shard_is_one_line(tmp_path, capsys):
    path = _suite(tmp_path, ["sinusoidal"])
    assert cli.main(["--suite", str(path), "--shard", "2/2", "--dry-run"]) == cli.EXIT_USAGE
    assert "--shard: '2/2': shard index out of range" in capsys.readouterr().err


LEAVE_WITHOUT_TEARDOWN = """
import atexit, os, sys
import torch.distributed as dist
from posbench.engine import distributed
# Registered before the group exists, so it runs after posbench's exit handler (atexit is LIFO).
atexit.register(lambda: print("initialized at exit:", dist.is_initialized(), flush=True))
distributed.init_from_env("cpu", timeout_s=30)
distributed.all_reduce_sum([1.0])  # a collective ran: gloo's threads have had work
sys.exit(3 if os.environ["RANK"] == "1" else 0)  # rank 1 leaves as a failed worker rank does
"""


@pytest.mark.subprocess
def test_a_rank_that_leaves_without_teardown_destroys_its_group_before_python_shuts_down(tmp_path):
    """Rank 1 exits (like a worker rank whose case failed alone) without calling ``teardown``:
    the group is destroyed at exit while the interpreter is whole, not torn down during its
    finalization (where gloo's threads could abort the process: SIGABRT)."""
    port = _free_port()
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", LEAVE_WITHOUT_TEARDOWN],
            cwd=tmp_path,
            text=True,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            env=dict(
                os.environ,
                PYTHONPATH=str(ROOT),
                OMP_NUM_THREADS="1",
                RANK=str(r),
                LOCAL_RANK=str(r),
                WORLD_SIZE="2",
                MASTER_ADDR="127.0.0.1",
                MASTER_PORT=str(port),
            ),
        )
        for r in range(WORLD)
    ]
    outs = [p.communicate(timeout=120)[0] for p in procs]
    assert [p.returncode for p in procs] == [0, 3], outs
    assert all("initialized at exit: False" in out for out in outs), outs
