"""Tables and the report built from stored rows: layout, values recomputed from rows, failures kept."""

from __future__ import annotations

import argparse
import csv
import json
import re

import pytest

from posbench.cli import app as cli
from posbench.cli.report_cmds import add_report_parser
from posbench.report.build import build_report, collect_tables
from posbench.report.compare import compare_runs, main_compare
from posbench.report.render import row_anchor
from posbench.report.rows import load_runs
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
    retrieval_rows,
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


# Hardening round 5 (issue 56): a report whose every row was skipped (odd grid values: "abc", null,
# 1.5, true where the task's grid takes an integer) says so in one line with the count; it never
# claims the runs hold no rows.


def test_every_row_skipped_is_said_with_the_count(tmp_path, capsys):
    rows = efficiency_rows()
    for i, row in enumerate(rows):
        row["params"]["seq_len"] = ["abc", None, 1.5, True][i % 4]
    run_dir = write_run(tmp_path / "results", rows, meta=False)
    assert cli.main(["report", str(run_dir), "--out", str(tmp_path / "o")]) == cli.EXIT_USAGE
    err = capsys.readouterr().err.splitlines()
    assert len(err) == len(rows) + 1 and all("params.seq_len: expected a number" in line for line in err[:-1])
    assert err[-1].endswith(
        f"the runs hold no usable rows; all {len(rows)} of their rows were skipped (the warnings above say why)"
    )


# One odd value in one row never fails a whole report or compare: the row is skipped with one
# warning naming file and line, and numbers nobody can divide by give no ratio (issue 26).


DEEP = "[" * 100_000 + "]" * 100_000


def _write_lines(run_dir, lines):
    (run_dir / "cases.jsonl").write_text("".join(lines))


def _put(rows, index, change):
    rows = [dict(r, metrics=dict(r["metrics"]), params=dict(r["params"])) for r in rows]
    change(rows[index])
    return rows


BAD_ROWS = {
    "an integer of 400 digits": (lambda r: r["metrics"].update(train_wps=10**400), "metrics.train_wps: an integer of 401 digits"),
    "a string where a number belongs": (
        lambda r: r["metrics"].update(train_wps="fast"),
        'metrics.train_wps: expected a number or null, got "fast"',
    ),
    "a list as a parameter value": (
        lambda r: r["params"].update(seq_len=[256, 512]),
        "params.seq_len: expected a number, string, true/false or null, got list",
    ),
    "a string as a numeric parameter": (
        lambda r: r["params"].update(seq_len="long"),
        "params.seq_len: expected a number, got str",
    ),
    "a parameter the task needs is missing": (
        lambda r: r["params"].pop("seq_len"),
        "params: no 'seq_len'; rows of task efficiency need seq_len",
    ),
    "a billion rounds": (lambda r: r.update(round=1_000_000_000), "round: expected a whole number from 1 to 10000 or null"),
    "a string as duration": (lambda r: r.update(duration_s="long"), 'duration_s: expected a number or null, got "long"'),
}


@pytest.mark.parametrize("what", list(BAD_ROWS))
def test_a_bad_row_is_skipped_with_one_warning_in_report_and_compare(tmp_path, capsys, what):
    change, message = BAD_ROWS[what]
    clean = efficiency_rows()
    base = write_run(tmp_path / "base", clean)
    index = 3
    new = write_run(tmp_path / "new", clean)
    _write_lines(new, [json.dumps(r) + "\n" for r in _put(clean, index, change)])
    where = f"{new}/cases.jsonl:{index + 1}: "

    written = build_report([new], tmp_path / "out", find_task=find_task)
    err = capsys.readouterr().err
    assert err.count("warning: ") == 1 and f"warning: {where}{message}" in err and "; line skipped" in err
    with open(written["rows.csv"]) as fh:
        assert len(list(csv.DictReader(fh))) == len(clean) - 1  # every other row is there

    result = compare_runs(base, new, find_task=find_task)
    err = capsys.readouterr().err
    assert f"warning: {where}{message}" in err
    assert result.only_in_base == [clean[index]["case_id"]]  # the skipped case counts as missing


def test_100000_deep_json_is_skipped_by_report_and_compare(tmp_path, capsys):
    clean = efficiency_rows()
    base = write_run(tmp_path / "base", clean)
    new = write_run(tmp_path / "new", clean)
    lines = (new / "cases.jsonl").read_text().splitlines(keepends=True)
    lines.insert(2, DEEP + "\n")
    lines.insert(
        5,
        json.dumps(dict(clean[0], case_id="deep", series={"x": json.loads("[" * 60 + "]" * 60)}))[:-1].replace(
            '"series": {"x": ', '"series": {"x": ' + "[" * 1000
        )
        + "]" * 1000
        + "}\n",
    )
    _write_lines(new, lines)
    build_report([new], tmp_path / "out", find_task=find_task)
    err = capsys.readouterr().err
    assert f"{new}/cases.jsonl:3: not JSON (nested deeper than 64 levels); line skipped" in err
    assert f"{new}/cases.jsonl:6: " in err and "Traceback" not in err
    assert compare_runs(base, new, find_task=find_task).only_in_base == []


def test_a_retrieval_row_without_L_train_is_skipped_not_a_key_error(tmp_path, capsys):
    rows = retrieval_rows()
    del rows[1]["params"]["L_train"]
    run_dir = write_run(tmp_path, rows)
    written = build_report([run_dir], tmp_path / "out", find_task=find_task)
    err = capsys.readouterr().err
    assert (
        f"warning: {run_dir}/cases.jsonl:2: params: no 'L_train'; rows of task retrieval need L_train, probe; line skipped"
    ) in err
    assert rows[1]["method"] not in written["report.md"].read_text().split("Retrieval accuracy")[1].split("|")[:3]


def test_a_malformed_run_json_in_compare_is_one_line_exit_2(tmp_path, capsys):
    base = write_run(tmp_path / "base", efficiency_rows())
    new = write_run(tmp_path / "new", efficiency_rows())
    (new / "run.json").write_bytes(b'{"suite": "\xff"}')
    args = type("A", (), {"base": str(base), "new": str(new), "threshold": 0.05, "markdown": None})()
    assert main_compare(args, find_task=find_task) == 2
    assert capsys.readouterr().err.strip() == f"posbench compare: {new}/run.json: not UTF-8 text"


def _wps(rows, method, seq_len, value):
    for r in rows:
        if r["method"] == method and r["params"]["seq_len"] == seq_len:
            r["metrics"]["train_wps"] = value
    return rows


def test_a_baseline_of_zero_shows_the_ratio_as_n_a_and_compare_does_not_crash(tmp_path):
    rows = _wps(efficiency_rows(), "sinusoidal", 256, 0.0)
    run_dir = write_run(tmp_path / "new", rows)
    runs = load_runs(run_dir, find_task=find_task)
    from posbench.report.sections import collect_tables

    table = next(t for _, ts in collect_tables(runs) for t in ts if t.metric == "train_wps")
    assert table.cell("rotary", 256).text == "24.0k (n/a)" and table.cell("rotary", 256).ratio is None
    assert table.cell("rotary", 512).ratio is not None
    base = write_run(tmp_path / "base", efficiency_rows())
    result = compare_runs(base, run_dir, find_task=find_task)
    assert not [c for c in result.changes if c.case_id.endswith("sinusoidal/seq_len=256") and c.metric == "train_wps"]


def test_negative_and_huge_metrics_print_sanely_give_no_ratio_and_are_no_regression(tmp_path):
    rows = _wps(_wps(efficiency_rows(), "alibi", 512, -5.0), "rotary", 512, 1e308)
    run_dir = write_run(tmp_path / "new", rows)
    written = build_report([run_dir], tmp_path / "out", find_task=find_task)
    md = written["report.md"].read_text()
    assert not re.search(r"\d{20}", md), "a number printed with 20 or more digits"
    assert "-5.00 (n/a)" in md and "1e+308" in md
    assert not re.search(r"-\d[\d.]*x", md), "a negative ratio"
    base = write_run(tmp_path / "base", efficiency_rows())
    result = compare_runs(base, run_dir, find_task=find_task)
    flagged = {(c.case_id.split("/")[1], c.metric) for c in result.regressions}
    assert ("alibi", "train_wps") not in flagged
    text = result.markdown()
    assert not re.search(r"\d{20}", text)
    # a negative baseline against a positive value: no ratio either way, never a regression
    result = compare_runs(run_dir, base, find_task=find_task)
    assert ("alibi", "train_wps") not in {(c.case_id.split("/")[1], c.metric) for c in result.regressions}


def test_a_3_mb_message_is_cut_in_the_report_and_kept_whole_in_the_row(tmp_path):
    rows = efficiency_rows()
    failed = next(r for r in rows if r["status"] == "oom")
    failed["message"] = "x" * 3_000_000
    run_dir = write_run(tmp_path, rows)
    written = build_report([run_dir], tmp_path / "out", find_task=find_task)
    html = written["report.html"].read_text()
    assert "x" * 3_000_000 not in html and html.count("x" * 501) == 0
    assert "[cut: 3,000,000 characters in all; the stored row keeps them]" in html
    assert "x" * 3_000_000 not in written["report.md"].read_text()
    assert "x" * 3_000_000 in written["rows.csv"].read_text()  # the raw rows keep it


def test_a_family_metric_whose_column_is_4000_digits_is_a_word_not_a_crash(tmp_path):
    from tests.helpers.report_rows import precision_rows

    rows = precision_rows()
    ok = next(r for r in rows if r["status"] == "ok" and "final_train_loss" in r["metrics"])
    ok["metrics"]["ppl@float32_bias@" + "9" * 4000] = 20.0
    run_dir = write_run(tmp_path, rows)
    written = build_report([run_dir], tmp_path / "out", find_task=find_task)
    assert all(len(p.name) < 255 for p in written.values())
