"""Tables and the report built from stored rows: layout, values recomputed from rows, failures kept."""

from __future__ import annotations

import argparse
import csv
import json
import re

import pytest

from posbench.cli.report_cmds import add_report_parser
from posbench.report.build import build_report, collect_tables, load_runs
from posbench.report.render import row_anchor
from posbench.report.tabulate import metric_tables
from posbench.store.bounds import RowsError
from posbench.tasks import find as find_task
from posbench.tasks.extrapolation.ppl_tables import extrapolation_tables
from tests.helpers.report_rows import (
    CPU_ENV,
    EFF_METHODS,
    GPU_ENV,
    L_VALID,
    LENGTHS,
    PPL_METHODS,
    base_row,
    efficiency_rows,
    extrapolation_rows,
    ppl_value,
    write_run,
)


def _table(tables, metric):
    (table,) = [t for t in tables if t.metric == metric]
    return table


@pytest.fixture
def runs(tmp_path):
    write_run(tmp_path / "results", efficiency_rows())
    write_run(tmp_path / "results", extrapolation_rows())
    return tmp_path / "results"


def test_load_runs_finds_run_folders_below_a_parent_and_keeps_run_columns(runs):
    loaded = load_runs([runs], find_task=find_task)
    rows, envs = loaded.rows, loaded.envs
    assert len(rows) == 15 + 3
    assert set(rows["run_id"]) == {"run-a", "run-x"}
    assert set(rows["hardware"]) == {"CPU (Test CPU 9000)"}
    assert len(envs) == 2 and all(e["cpu"] == "Test CPU 9000" for e in envs.values())


def test_load_runs_keeps_the_last_row_of_a_resumed_case_and_skips_a_torn_line(tmp_path):
    rows = efficiency_rows()
    retry = json.loads(json.dumps(rows[0]))
    retry["metrics"]["train_wps"] = 12345.0
    run_dir = write_run(tmp_path, rows + [retry])
    with (run_dir / "cases.jsonl").open("a") as fh:
        fh.write('{"case_id": "half a li')  # killed mid-write
    frame = load_runs(run_dir, find_task=find_task).rows
    assert len(frame) == 15
    first = frame[frame["case_id"] == rows[0]["case_id"]].iloc[0]
    assert first["metrics"]["train_wps"] == 12345.0


def test_load_runs_names_the_folder_without_runs(tmp_path):
    with pytest.raises(RowsError, match="no cases.jsonl"):
        load_runs(tmp_path, find_task=find_task)


def test_efficiency_table_layout_ratios_and_failed_cells(runs):
    table = _table(metric_tables(load_runs(runs, find_task=find_task), "efficiency"), "train_wps")
    assert table.rows == EFF_METHODS
    assert table.columns == LENGTHS
    by_case = {(r["method"], r["params"]["seq_len"]): r for r in efficiency_rows()}
    for L in LENGTHS:
        base = by_case[("sinusoidal", L)]["metrics"]["train_wps"]
        for method in ("sinusoidal", "rotary", "alibi"):
            value = by_case[(method, L)]["metrics"]["train_wps"]
            cell = table.cell(method, L)
            assert cell.value == value
            assert cell.ratio == pytest.approx(value / base)
            assert cell.text.endswith(f"({value / base:.2f}x)")
            assert cell.case_id == by_case[(method, L)]["case_id"] and cell.run_id == "run-a"
    assert table.cell("alibi", 256).text == "25.8k (0.99x)"
    assert table.cell("sinusoidal", 256).text == "26.0k (1.00x)"
    assert table.cell("t5_bias", 1024).text == "OOM"
    assert table.cell("t5_bias", 1024).value is None
    assert [table.cell("alibi_triton", L).text for L in LENGTHS] == ["unavailable"] * 3
    assert "ratio to sinusoidal" in table.caption


def test_memory_table_uses_binary_units(runs):
    table = _table(metric_tables(load_runs(runs, find_task=find_task), "efficiency"), "peak_mem_train_bytes")
    assert table.cell("sinusoidal", 1024).text == "0.954 GiB (1.00x)"
    assert table.title.startswith("Peak training memory (GiB)")
    assert table.cell("sinusoidal", 1024).value == 1024 * 1_000_000 + len("sinusoidal")


def test_extrapolation_table_per_mode_with_oom_and_caption(runs):
    tables = extrapolation_tables(load_runs(runs, find_task=find_task))
    assert [t.extra["mode"] for t in tables] == [("nonoverlapping", None, False), ("sliding", 32, False)]
    table = tables[0]
    assert table.rows == PPL_METHODS and table.columns == L_VALID
    for method in PPL_METHODS:
        for lv in L_VALID:
            cell = table.cell(method, lv)
            if (method, lv) == ("rotary", 512):
                assert cell.text == "OOM" and cell.value is None and cell.status == "oom"
            else:
                assert cell.value == pytest.approx(ppl_value(method, lv))
                assert cell.text == f"{ppl_value(method, lv):.2f}"
    assert "nonoverlapping evaluation" in table.caption and "L_train = 64" in table.caption
    assert "12.50" in table.caption  # the corpus's best achievable perplexity
    assert "sliding-window evaluation, stride 32" in tables[1].caption


def test_a_failed_extrapolation_case_keeps_its_row(tmp_path):
    rows = extrapolation_rows()
    rows[1].update(status="diverged", message="loss became NaN at step 40")
    rows[1]["series"] = {}
    table = extrapolation_tables(load_runs(write_run(tmp_path, rows), find_task=find_task))[0]
    assert "rotary (diverged)" in table.rows
    assert [table.cell("rotary (diverged)", lv).text for lv in L_VALID] == ["diverged"] * 4


def test_build_report_writes_markdown_csv_latex_for_every_table(runs, tmp_path):
    out = tmp_path / "out"
    written = build_report([runs], out, find_task=find_task)
    keys = [t.key for _, tables in collect_tables(load_runs(runs, find_task=find_task)) for t in tables]
    assert len(keys) == 4 + 2  # four efficiency metrics, two evaluation modes
    for key in keys:
        for ext in ("md", "csv", "tex"):
            assert f"tables/{key}.{ext}" in written and written[f"tables/{key}.{ext}"].is_file()
    train_key = next(k for k in keys if "train-wps" in k)
    with written[f"tables/{train_key}.csv"].open() as fh:
        grid = list(csv.reader(fh))
    assert grid[0] == ["method \\ seq_len", "256", "512", "1024"]
    assert grid[3] == ["t5_bias", "13.0k (0.50x)", "9.19k (0.50x)", "OOM"]
    tex = written[f"tables/{train_key}.tex"].read_text()
    assert r"\begin{tabular}{lrrr}" in tex and r"t5\_bias & 13.0k (0.50x) & 9.19k (0.50x) & OOM \\" in tex
    md = written["report.md"].read_text()
    assert "| alibi_triton | unavailable | unavailable | unavailable |" in md
    assert "| rotary | 20.00 | 28.28 | 40.00 | OOM |" in md
    assert "Cases that did not finish" in md and "CUDA out of memory" in md
    flat = written["rows.csv"].read_text().splitlines()
    assert len(flat) == 1 + 18 and "metrics.train_wps" in flat[0]


def test_html_report_embeds_tables_charts_environments_and_row_anchors(runs, tmp_path):
    written = build_report([runs], tmp_path / "out", find_task=find_task)
    html = written["report.html"].read_text()
    loaded = load_runs(runs, find_task=find_task)
    rows = loaded.rows
    for _, tables in collect_tables(loaded):
        for t in tables:
            assert f'id="table-{t.key}"' in html
    n_png = sum(1 for k in written if k.endswith(".png"))
    assert html.count("data:image/png;base64,") == n_png == 7
    for r in rows.itertuples():
        assert f'id="{row_anchor(r.run_id, r.case_id)}"' in html
    # every link from a cell lands on an appendix row
    ids = set(re.findall(r'id="([^"]+)"', html))
    assert all(href in ids for href in re.findall(r'href="#([^"]+)"', html))
    assert 'title="case_id=efficiency/t5_bias/seq_len=1024; run_id=run-a; status=oom; CUDA out of memory"' in html
    assert "Test CPU 9000" in html and "abc1234def5678" in html


def test_two_shards_of_one_run_make_one_table(tmp_path):
    rows = efficiency_rows()
    write_run(tmp_path / "shard0", rows[:7])
    write_run(tmp_path / "shard1", rows[7:])
    written = build_report([tmp_path / "shard0", tmp_path / "shard1"], tmp_path / "out", find_task=find_task)
    train = [k for k in written if "train-wps" in k and k.endswith(".md")]
    assert len(train) == 1
    text = written[train[0]].read_text()
    assert text.count("\n| ") == 2 + len(EFF_METHODS)  # header, rule, one line per method
    assert "| t5_bias | 13.0k (0.50x) | 9.19k (0.50x) | OOM |" in text


def test_runs_on_two_gpu_types_get_a_table_each(tmp_path):
    write_run(tmp_path / "cpu", efficiency_rows(run_id="run-cpu"), CPU_ENV)
    write_run(tmp_path / "gpu", efficiency_rows(run_id="run-gpu", device="cuda:0"), GPU_ENV)
    tables = [t for t in metric_tables(load_runs([tmp_path], find_task=find_task), "efficiency") if t.metric == "train_wps"]
    assert sorted(t.hardware for t in tables) == ["CPU (Test CPU 9000)", "NVIDIA A100-SXM4-80GB"]


def test_report_subcommand(runs, tmp_path, capsys):
    parser = argparse.ArgumentParser()
    add_report_parser(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["report", str(runs), "--out", str(tmp_path / "cli")])
    assert args.func(args) == 0
    assert (tmp_path / "cli" / "report.html").is_file()
    assert "wrote 8 tables and 7 charts" in capsys.readouterr().out  # 6 + the run details of both tasks
    args = parser.parse_args(["report", str(tmp_path / "nothing-here")])
    assert args.func(args) == 2


def test_kernel_tables_split_by_head_dim_and_other_tasks_are_kept(tmp_path):
    rows = []
    for variant, ms in (("sdpa_bias", 2.0), ("alibi_triton", 1.0)):
        for d in (64, 128):
            for L in (1024, 2048):
                row = base_row("kernels", "kernels", variant, {"seq_len": L, "head_dim": d}, "run-k")
                row["metrics"] = {
                    "fwdbwd_ms": ms * L / 1024,
                    "fwdbwd_tflops": 10 / ms,
                    "fwd_ms": ms,
                    "bwd_ms": ms,
                    "peak_mem_bytes": L * 1024,
                }
                rows.append(row)
    other = base_row("kernels", "mystery", "alibi", {"dtype": "bf16"}, "run-k")  # a task this install lacks
    other["metrics"] = {"max_abs_err": 0.004}
    write_run(tmp_path, rows + [other], suite="kernels", baseline="sdpa_bias")
    sections = dict(collect_tables(load_runs(tmp_path, find_task=find_task)))
    ms_tables = [t for t in sections["Kernels"] if t.metric == "fwdbwd_ms"]
    assert [t.rest for t in ms_tables] == [{"head_dim": 64}, {"head_dim": 128}]
    assert ms_tables[0].cell("alibi_triton", 2048).text == "2 (0.50x)"
    (err,) = sections["Mystery"]  # undeclared: every number it carries gets a table
    assert err.metric == "max_abs_err" and err.cell("alibi", "bf16").text == "0.004"


def _kernel_rows(variants=("alibi_triton", "triton_no_bias", "sdpa_causal")) -> list[dict]:
    """fwdbwd_ms = (k + 1) ms for the k-th variant at L=1024, twice that at 2048."""
    rows = []
    for k, variant in enumerate(variants):
        for L in (1024, 2048):
            row = base_row("kernels", "kernels", variant, {"seq_len": L, "head_dim": 64}, "run-k")
            row["metrics"] = {
                "fwdbwd_ms": (k + 1) * L / 1024,
                "fwd_ms": 1.0,
                "bwd_ms": 1.0,
                "fwdbwd_tflops": 10.0 / (k + 1),
                "peak_mem_bytes": (k + 1) * L * 1024,
            }
            rows.append(row)
    return rows


def test_kernels_report_has_ratios_against_the_suites_baseline_from_run_json(tmp_path):
    # The kernels suite's baseline is triton_no_bias; rows never store it, run.json does.
    write_run(tmp_path, _kernel_rows(), baseline="triton_no_bias")
    written = build_report([tmp_path], tmp_path / "out", find_task=find_task)
    (table,) = [t for t in metric_tables(load_runs(tmp_path, find_task=find_task), "kernels") if t.metric == "fwdbwd_ms"]
    assert table.baseline == "triton_no_bias" and "ratio to triton_no_bias" in table.caption
    assert table.cell("alibi_triton", 1024).text == "1 (0.50x)"
    assert table.cell("sdpa_causal", 2048).ratio == pytest.approx(1.5)
    (mem,) = [t for t in metric_tables(load_runs(tmp_path, find_task=find_task), "kernels") if t.metric == "peak_mem_bytes"]
    assert mem.cell("alibi_triton", 1024).text == "0.000977 GiB (0.50x)"
    assert "No ratios" not in written["report.md"].read_text()
    assert "share of peak" not in written["report.md"].read_text()  # no row carries it: no table of n/a


def test_an_explicit_baseline_wins_over_run_json(tmp_path):
    write_run(tmp_path, _kernel_rows(), baseline="triton_no_bias")
    (table,) = [
        t
        for t in metric_tables(load_runs(tmp_path, find_task=find_task), "kernels", baseline="sdpa_causal")
        if t.metric == "fwdbwd_ms"
    ]
    assert table.cell("alibi_triton", 1024).text == "1 (0.33x)" and "ratio to sdpa_causal" in table.caption
    parser = argparse.ArgumentParser()
    add_report_parser(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["report", str(tmp_path), "--out", str(tmp_path / "o"), "--baseline", "sdpa_causal"])
    assert args.func(args) == 0
    md = (tmp_path / "o" / "report.md").read_text()
    assert "| alibi_triton | 1 (0.33x) | 2 (0.33x) |" in md


def test_a_suite_without_baseline_has_no_ratios_and_says_so(tmp_path):
    write_run(tmp_path, _kernel_rows(), baseline=None)
    (table,) = [t for t in metric_tables(load_runs(tmp_path, find_task=find_task), "kernels") if t.metric == "fwdbwd_ms"]
    assert table.cell("alibi_triton", 1024).text == "1" and table.cell("alibi_triton", 1024).ratio is None
    assert "No ratios: the suite names no baseline" in table.caption


def test_a_run_without_run_json_falls_back_to_sinusoidal(tmp_path):
    write_run(tmp_path, efficiency_rows(), meta=False)
    table = _table(metric_tables(load_runs(tmp_path, find_task=find_task), "efficiency"), "train_wps")
    assert table.baseline == "sinusoidal" and table.cell("alibi", 256).text == "25.8k (0.99x)"


def test_method_order_and_tabulated_metrics_come_from_run_json(tmp_path):
    order = ["alibi", "sinusoidal", "alibi_triton", "t5_bias", "rotary"]
    write_run(tmp_path, efficiency_rows(), methods=order, metrics=["j_per_token", "train_wps"])
    loaded = load_runs(tmp_path, find_task=find_task)
    tables = metric_tables(loaded, "efficiency")
    assert all(t.rows == order for t in tables)
    # declaration order: the suite's metrics plus those declared table=True (both memories, eval_wps)
    assert [t.metric for t in tables] == ["train_wps", "eval_wps", "peak_mem_train_bytes", "peak_mem_eval_bytes", "j_per_token"]
    assert _table(tables, "j_per_token").title.startswith("Training energy per token (J/token)")
    assert "(lower is better)" in _table(tables, "peak_mem_train_bytes").caption
    assert loaded.metas[str(tmp_path / "efficiency" / "run-a")].methods == order
