"""The efficiency floor (posbench/tasks/efficiency/report.py): nope runs in the cpu profiles and every
table cell shows its ratio to nope beside its ratio to the baseline, paired the same way."""

import random

import pytest

from posbench.report import bootstrap
from posbench.report import numbers as fmt
from posbench.report import rows as rowsmod
from posbench.report.sections import collect_sections
from posbench.report.tabulate import run_tables
from posbench.run import suite as suitemod
from posbench.tasks import find as find_task
from posbench.tasks.efficiency import run as effrun
from posbench.tasks.efficiency.report import ABOVE_BASE, floor_tables
from tests.helpers.report_rows import write_run

# planted speeds relative to sinusoidal, the baseline
SPEEDS = {"sinusoidal": 1.0, "alibi": 0.9, "nope": 1.05}


def _rows(methods=tuple(SPEEDS), rounds=2, windows=12, seed=5):
    """Paired-windows rows: per round one process level, drift shared by the methods, 0.3% noise."""
    rng = random.Random(seed)
    values = {m: [] for m in methods}
    for _r in range(rounds):
        level = 1 + 0.2 * rng.uniform(-1, 1)
        per = {m: [] for m in methods}
        for _w in range(windows):
            drift = 1 + 0.1 * rng.uniform(-1, 1)
            for m in methods:
                per[m].append(1000 * level * drift * SPEEDS[m] * (1 + rng.gauss(0, 0.003)))
        for m in methods:
            values[m].append(per[m])
    rows = []
    for m in methods:
        for r, vals in enumerate(values[m], 1):
            rows.append(
                {
                    "case_id": f"{m}/seq_len=1024",
                    "suite": "efficiency",
                    "task": "efficiency",
                    "method": m,
                    "params": {"seq_len": 1024},
                    "status": "ok",
                    "message": "",
                    "metrics": {"train_wps": sorted(vals)[len(vals) // 2]},
                    "series": {"train_wps_windows": vals, "train_wps_window_t": list(range(len(vals)))},
                    "info": {"pairing": "windows", "group": f"g{r}"},
                    "settings": {"rounds": rounds, "pairing": "windows"},
                    "device": "cpu",
                    "profile": "cpu",
                    "run_id": "run-f",
                    "started_at": f"2026-01-01T00:{r:02d}:00+00:00",
                    "duration_s": 1.0,
                    "posbench_version": "x",
                    "git_commit": "abc",
                    "traceback": "",
                    "round": r,
                }
            )
    return rows, values


def _runs(tmp_path, rows, baseline="sinusoidal"):
    run = write_run(
        tmp_path, rows, metrics=["train_wps"], baseline=baseline, methods=list(dict.fromkeys(r["method"] for r in rows))
    )
    return rowsmod.load_runs(run, find_task=find_task)


def _paired(values, method, base):
    as_rounds = [{"group": f"g{r}", "values": v} for r, v in enumerate(values[method], 1)]
    base_rounds = [{"group": f"g{r}", "values": v} for r, v in enumerate(values[base], 1)]
    return bootstrap.paired_ratio(as_rounds, base_rounds)


def test_cells_show_the_ratio_to_nope_beside_the_ratio_to_the_baseline(tmp_path):
    rows, values = _rows()
    (table,) = floor_tables(_runs(tmp_path, rows), metrics=["train_wps"])
    cell = table.cell("alibi", 1024)
    to_base, base_interval, _ = _paired(values, "alibi", "sinusoidal")
    to_floor, floor_interval, pairs = _paired(values, "alibi", "nope")
    assert pairs == 24 and to_floor == pytest.approx(0.9 / 1.05, abs=0.01)
    assert cell.ratio == to_base and cell.ratio_interval == base_interval  # the baseline's ratio stays
    assert cell.text.endswith(
        f"(0.90x {fmt.interval_text(to_base, base_interval)}) [{to_floor:.2f}x {fmt.interval_text(to_floor, floor_interval)}]"
    )
    assert table.extra["floor"] == "nope"
    assert table.extra["floor_ratios"]["alibi@1024"] == [to_floor, *floor_interval]
    own, lo, hi = table.extra["floor_ratios"]["sinusoidal@1024"]
    assert own == pytest.approx(1 / 1.05, abs=0.01)
    assert table.cell("sinusoidal", 1024).text.endswith(f"[{own:.2f}x {fmt.interval_text(own, (lo, hi))}]")
    assert "[" not in table.cell("nope", 1024).text
    assert "In square brackets: ratio to nope, the floor" in table.caption


def test_the_run_summary_and_the_report_show_the_floor(tmp_path):
    runs = _runs(tmp_path, _rows()[0])
    (printed,) = run_tables(runs)
    assert printed.extra["floor"] == "nope" and " [" in printed.cell("alibi", 1024).text
    (section,) = [s for s in collect_sections(runs) if s.task == "efficiency"]
    (table,) = [b.table for b in section.blocks if b.table.metric == "train_wps"]
    assert table.extra["floor_ratios"].keys() == {"sinusoidal@1024", "alibi@1024"}
    assert section.heading == "Efficiency"


def test_without_nope_the_table_is_unchanged_and_with_nope_as_baseline_nothing_doubles(tmp_path):
    """A run without nope (every run made before the floor) gets the table it always had."""
    from posbench.report.tabulate import metric_tables

    runs = _runs(tmp_path / "a", _rows(methods=("sinusoidal", "alibi"))[0])
    (table,) = floor_tables(runs, metrics=["train_wps"])
    (plain,) = metric_tables(runs, "efficiency", metrics=["train_wps"])
    assert table.caption == plain.caption and "floor" not in table.caption
    assert table.cell("alibi", 1024).text == plain.cell("alibi", 1024).text and "floor" not in table.extra
    failed = _rows()[0]
    for row in failed:
        if row["method"] == "nope":
            row["status"], row["metrics"] = "error", {}
    (no_floor,) = floor_tables(_runs(tmp_path / "c", failed), metrics=["train_wps"])
    assert "No floor: nope has no finished case." in no_floor.caption and "[" not in no_floor.cell("alibi", 1024).text
    (own,) = floor_tables(_runs(tmp_path / "b", _rows()[0], baseline="nope"), metrics=["train_wps"])
    assert own.baseline == "nope" and "[" not in own.cell("alibi", 1024).text


@pytest.mark.parametrize("profile", ["cpu", "cpu-long", "cpu-all"])
def test_the_cpu_profiles_run_nope(profile):
    suite = suitemod.resolve(suitemod.load("suites/efficiency.yaml"), profile)
    methods = {c.method for c in suite.cases("cpu")}
    assert "nope" in methods and suite.baseline == "sinusoidal"


# --------------------------------------------------------------------------------------------------
# Memory above the resting footprint (issue 55 item 4): each efficiency row records its peaks less
# the worker's footprint once the model and data are built, and the report shows that figure with
# its ratio after the whole-process peak, which stays in the row.

GIB = 2**30
MIB = 2**20


def test_the_peak_above_the_resting_footprint_is_the_peak_less_the_base():
    metrics = {}
    effrun._peak(metrics, "train", {"allocated": int(0.60 * GIB), "reserved": None}, int(0.55 * GIB))
    assert metrics["peak_mem_train_bytes"] == int(0.60 * GIB)  # the whole process's, kept
    assert metrics["peak_mem_train_above_base_bytes"] == int(0.60 * GIB) - int(0.55 * GIB)
    effrun._peak(metrics, "eval", {"allocated": None, "reserved": None}, int(0.55 * GIB))
    assert metrics["peak_mem_eval_above_base_bytes"] is None
    # a memory process's figures reach the paired-windows rows with the others
    assert set(ABOVE_BASE.values()) <= set(effrun.MEMORY_METRICS)


def _row(method, whole, above=None):
    metrics = {"train_wps": 1000.0, "peak_mem_train_bytes": whole, "mem_base_bytes": whole - (above or 0)}
    if above is not None:
        metrics["peak_mem_train_above_base_bytes"] = above
    return {
        "case_id": f"{method}/seq_len=64",
        "suite": "efficiency",
        "task": "efficiency",
        "method": method,
        "params": {"seq_len": 64},
        "status": "ok",
        "message": "",
        "metrics": metrics,
        "series": {},
        "run_id": "run-m",
        "git_commit": "abc",
    }


def test_the_report_shows_the_figure_above_the_footprint_with_its_ratio(tmp_path):
    # 0.56 GiB for every method, of which the steps held 40 MiB (sinusoidal) or 80 MiB (t5_bias):
    # the whole-process peak reads 1.07x, the peak above the footprint 2.00x
    rows = [
        _row("sinusoidal", int(0.56 * GIB), 40 * MIB),
        _row("t5_bias", int(0.56 * GIB) + 40 * MIB, 80 * MIB),
        _row("nope", int(0.56 * GIB) - 2 * MIB, 38 * MIB),
    ]
    run = write_run(tmp_path, rows, metrics=["train_wps", "peak_mem_train_bytes"], methods=["sinusoidal", "t5_bias", "nope"])
    tables = floor_tables(rowsmod.load_runs(run, find_task=find_task))
    names = [t.metric for t in tables]
    assert names.index("peak_mem_train_above_base_bytes") == names.index("peak_mem_train_bytes") + 1
    whole, above = (next(t for t in tables if t.metric == m) for m in ("peak_mem_train_bytes", "peak_mem_train_above_base_bytes"))
    assert whole.cell("t5_bias", 64).ratio == pytest.approx((0.56 * GIB + 40 * MIB) / (0.56 * GIB), rel=1e-6)
    assert above.cell("t5_bias", 64).ratio == pytest.approx(2.0)
    assert above.cell("t5_bias", 64).text.startswith("0.0781 GiB (2.00x)") and "[2.11x]" in above.cell("t5_bias", 64).text
    assert above.title.startswith("Peak training memory above the resting footprint (GiB)")
    # rows made before posbench measured it: no table of n/a
    old = [_row(m, int(0.56 * GIB)) for m in ("sinusoidal", "t5_bias")]
    run = write_run(tmp_path / "old", old, metrics=["train_wps", "peak_mem_train_bytes"])
    assert "peak_mem_train_above_base_bytes" not in [t.metric for t in floor_tables(rowsmod.load_runs(run, find_task=find_task))]


# -- model FLOPs utilisation (issue 54 item 5) -------------------------------------------------


def test_each_training_row_counts_its_flops_and_an_unknown_peak_is_no_zero():
    import torch

    from posbench.core.config import model_config
    from posbench.core.model import build_model
    from posbench.engine.flops import train_flops_per_step

    model = build_model(model_config("tiny", "alibi"))
    metrics, info = {"train_wps": 1000.0, "world_size": 1}, {}
    effrun._model_flops(metrics, info, model, 64, torch.device("cpu"), "float32")
    from posbench.core import registry

    expected = train_flops_per_step(registry.get("alibi"), model.cfg, 64, 1) / 64
    assert metrics["train_flops_per_token"] == expected and metrics["train_mfu"] is None
    assert info["mfu_peak"] == "unknown peak: cpu has no float32 entry in posbench.engine.peaks"


def test_the_mfu_table_says_unknown_peak_plainly_or_the_share_of_a_known_one(tmp_path):
    rows = [_row("sinusoidal", int(0.56 * GIB), 40 * MIB), _row("nope", int(0.56 * GIB), 38 * MIB)]
    rows[0]["metrics"].update(train_flops_per_token=5.31e6, train_mfu=None)
    rows[0]["info"] = {"mfu_peak": "unknown peak: cpu has no float32 entry in posbench.engine.peaks"}
    rows[1]["metrics"].update(train_flops_per_token=5.2e6, train_mfu=0.413)  # as a GPU row would say
    rows[1]["info"] = {"mfu_peak": "NVIDIA H200, bfloat16 dense peak 989.4 TFLOP/s"}
    run = write_run(tmp_path, rows, metrics=["train_wps"], methods=["sinusoidal", "nope"])
    tables = floor_tables(rowsmod.load_runs(run, find_task=find_task))
    assert [t.metric for t in tables][:2] == ["train_wps", "train_mfu"]
    mfu = tables[1]
    assert mfu.cell("sinusoidal", 64).text == "unknown peak (5.31M FLOP/token)"
    assert mfu.cell("nope", 64).text == "41.3% (5.20M FLOP/token)"
    assert mfu.baseline is None and "No floor" not in mfu.caption
    assert "Peaks: unknown peak: cpu has no float32 entry in posbench.engine.peaks; NVIDIA H200" in mfu.caption


def test_a_cpu_run_prints_no_table_of_unknown_peaks_and_says_why(tmp_path):
    # Issue 66: every CPU run printed a table of "unknown peak" cells; none is known: no table, one line.
    rows = [_row("sinusoidal", int(0.56 * GIB), 40 * MIB), _row("nope", int(0.56 * GIB), 38 * MIB)]
    for row in rows:
        row["metrics"].update(train_flops_per_token=5.31e6, train_mfu=None)
        row["info"] = {"mfu_peak": "unknown peak: cpu has no float32 entry in posbench.engine.peaks"}
    run = write_run(tmp_path, rows, metrics=["train_wps"], methods=["sinusoidal", "nope"])
    tables = floor_tables(rowsmod.load_runs(run, find_task=find_task))
    assert "train_mfu" not in [t.metric for t in tables]
    speed = next(t for t in tables if t.metric == "train_wps")
    assert "No MFU table: the device's dense peak is unknown (every CPU" in speed.caption


def test_the_run_summary_prints_the_peak_evaluation_memory_where_measured(tmp_path):
    rows = [_row("sinusoidal", int(0.56 * GIB)), _row("nope", int(0.55 * GIB))]
    run = write_run(tmp_path / "a", rows, metrics=["train_wps", "peak_mem_train_bytes"], methods=["sinusoidal", "nope"])
    assert "peak_mem_eval_bytes" not in [t.metric for t in run_tables(rowsmod.load_runs(run, find_task=find_task))]
    for row in rows:
        row["metrics"]["peak_mem_eval_bytes"] = int(0.3 * GIB)
    run = write_run(tmp_path / "b", rows, metrics=["train_wps", "peak_mem_train_bytes"], methods=["sinusoidal", "nope"])
    printed = [t.metric for t in run_tables(rowsmod.load_runs(run, find_task=find_task))]
    assert printed == ["train_wps", "peak_mem_train_bytes", "peak_mem_eval_bytes"]
    # a suite that asks for no memory at all gets none
    run = write_run(tmp_path / "c", rows, metrics=["train_wps"], methods=["sinusoidal", "nope"])
    assert [t.metric for t in run_tables(rowsmod.load_runs(run, find_task=find_task))] == ["train_wps"]
