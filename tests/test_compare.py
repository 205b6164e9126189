"""compare: ratios per case and metric, threshold, exit code, one-sided cases, hardware warnings."""
from __future__ import annotations

import argparse

import pytest

from posbench.cli_report import add_compare_parser
from posbench.compare import compare_runs, main_compare, metric_direction
from report_fixtures import CPU_ENV, GPU_ENV, efficiency_rows, extrapolation_rows, write_run


def _args(base, new, *extra):
    parser = argparse.ArgumentParser()
    add_compare_parser(parser.add_subparsers(dest="command"))
    return parser.parse_args(["compare", str(base), str(new), *extra])


def _with_train_wps_scaled(rows, factor):
    for row in rows:
        if row["metrics"].get("train_wps") is not None:
            row["metrics"]["train_wps"] *= factor
    return rows


def test_metric_directions_come_from_the_tasks_declarations():
    assert metric_direction("efficiency", "train_wps") == 1 and metric_direction("kernels", "fwdbwd_tflops") == 1
    assert metric_direction("efficiency", "peak_mem_train_bytes") == -1 and metric_direction("kernels", "fwd_ms") == -1
    assert metric_direction("extrapolation", "ppl@nonoverlapping@512") == -1  # the ppl@* family
    assert metric_direction("efficiency", "j_per_token") == -1
    for task, ignored in (("efficiency", "n_params"), ("efficiency", "batch_size"), ("extrapolation", "best_ppl"),
                          ("efficiency", "train_wps_min"), ("kernels", "fwd_ms_max")):
        assert metric_direction(task, ignored) is None
    # no guessing from names: an undeclared metric or an unknown task is not compared
    assert metric_direction("efficiency", "other_wps") is None and metric_direction("mine", "train_wps") is None


def test_a_declared_direction_decides_the_verdict(tmp_path, monkeypatch):
    from posbench.tasks import Metric, efficiency

    # Declare train_wps lower-is-better: the same 10% fall becomes an improvement.
    monkeypatch.setitem(efficiency.METRICS, "train_wps", Metric("Training speed", "words/s", "", False, "count"))
    base = write_run(tmp_path / "base", efficiency_rows())
    new = write_run(tmp_path / "new", _with_train_wps_scaled(efficiency_rows(), 0.9))
    result = compare_runs(base, new)
    assert result.regressions == [] and {c.metric for c in result.improvements} == {"train_wps"}


def test_a_malformed_row_is_one_line_naming_file_and_line(tmp_path, capsys):
    base = write_run(tmp_path / "base", efficiency_rows())
    new = write_run(tmp_path / "new", efficiency_rows())
    lines = (new / "cases.jsonl").read_text().splitlines()
    lines[2] = lines[2].replace('"status": "ok"', '"status": 3', 1)
    (new / "cases.jsonl").write_text("\n".join(lines) + "\n")
    assert main_compare(_args(base, new)) == 2
    err = capsys.readouterr().err.strip()
    assert err == f"posbench compare: {new}/cases.jsonl:3: status: expected a string, got int"


def test_identical_runs_pass(tmp_path, capsys):
    base = write_run(tmp_path / "base", efficiency_rows() + extrapolation_rows(run_id="run-a"),
                     suite="mixed")
    new = write_run(tmp_path / "new", efficiency_rows() + extrapolation_rows(run_id="run-a"),
                    suite="mixed")
    result = compare_runs(base, new)
    assert result.regressions == [] and result.improvements == []
    assert result.only_in_base == [] == result.only_in_new and result.hardware_warnings == []
    assert {c.ratio for c in result.changes} == {1.0}
    assert main_compare(_args(base, new)) == 0
    assert "**0 regression(s), 0 improvement(s)** over 18 case(s)" in capsys.readouterr().out


def test_planted_ten_percent_train_wps_regression_fails(tmp_path):
    base = write_run(tmp_path / "base", efficiency_rows())
    new = write_run(tmp_path / "new", _with_train_wps_scaled(efficiency_rows(), 0.9))
    result = compare_runs(base, new, threshold=0.05)
    regressed = {(c.case_id, c.metric) for c in result.regressions}
    ok_cases = {r["case_id"] for r in efficiency_rows() if r["status"] == "ok"}
    assert regressed == {(case, "train_wps") for case in ok_cases}
    assert all(c.ratio == pytest.approx(0.9) for c in result.regressions)
    assert result.exit_code == 1
    md_path = tmp_path / "compare.md"
    assert main_compare(_args(base, new, "--markdown", str(md_path))) == 1
    md = md_path.read_text()
    assert "### Regressions" in md and "| efficiency/alibi/seq_len=256 | train_wps |" in md and "0.900x" in md
    # a looser threshold accepts the same change
    assert compare_runs(base, new, threshold=0.15).regressions == []
    assert main_compare(_args(base, new, "--threshold", "0.15")) == 0


def test_faster_and_smaller_is_an_improvement(tmp_path):
    base = write_run(tmp_path / "base", efficiency_rows())
    rows = _with_train_wps_scaled(efficiency_rows(), 1.2)
    for row in rows:
        if "peak_mem_train_bytes" in row["metrics"]:
            row["metrics"]["peak_mem_train_bytes"] *= 0.5
    result = compare_runs(base, write_run(tmp_path / "new", rows))
    assert {c.metric for c in result.improvements} == {"train_wps", "peak_mem_train_bytes"}
    assert result.exit_code == 0


def test_more_memory_and_a_new_oom_are_regressions(tmp_path):
    base = write_run(tmp_path / "base", efficiency_rows())
    rows = efficiency_rows()
    rows[0]["metrics"]["peak_mem_train_bytes"] *= 1.5
    rows[1].update(status="oom", metrics={})
    result = compare_runs(base, write_run(tmp_path / "new", rows))
    got = {(c.case_id, c.metric, c.verdict) for c in result.regressions}
    assert got == {(rows[0]["case_id"], "peak_mem_train_bytes", "regression"),
                   (rows[1]["case_id"], "status", "regression")}


def test_an_evaluation_that_now_ooms_is_a_perplexity_regression(tmp_path):
    base = write_run(tmp_path / "base", extrapolation_rows())
    rows = extrapolation_rows()
    alibi_512 = next(e for e in rows[2]["series"]["evals"] if e["L_valid"] == 512)
    alibi_512.update(status="oom", ppl=None)
    result = compare_runs(base, write_run(tmp_path / "new", rows))
    (reg,) = result.regressions
    assert (reg.method, reg.metric, reg.new) == ("alibi", "ppl@nonoverlapping@512", None)


def test_cases_in_only_one_run_are_listed(tmp_path):
    rows = efficiency_rows()
    base = write_run(tmp_path / "base", rows[:-1])
    new = write_run(tmp_path / "new", rows[1:])
    result = compare_runs(base, new)
    assert result.only_in_base == [rows[0]["case_id"]]
    assert result.only_in_new == [rows[-1]["case_id"]]
    md = result.markdown()
    assert "### Only in base (1)" in md and f"- `{rows[0]['case_id']}`" in md
    assert "### Only in new (1)" in md


def test_different_hardware_is_warned(tmp_path):
    base = write_run(tmp_path / "base", efficiency_rows(), CPU_ENV)
    new = write_run(tmp_path / "new", efficiency_rows(device="cuda:0"), GPU_ENV)
    result = compare_runs(base, new)
    text = " ".join(result.hardware_warnings)
    assert "GPU differs" in text and "NVIDIA A100-SXM4-80GB" in text
    assert "device differs" in text
    assert "**Warning:** GPU differs" in result.markdown()


def test_unreadable_input_exits_2(tmp_path, capsys):
    assert main_compare(_args(tmp_path / "missing", tmp_path / "missing")) == 2
    assert "no such folder" in capsys.readouterr().err


def test_a_different_suite_version_is_warned(tmp_path):
    base = write_run(tmp_path / "base", efficiency_rows())
    new = write_run(tmp_path / "new", efficiency_rows())
    meta = (new / "run.json").read_text().replace('"version": 1', '"version": 2')
    (new / "run.json").write_text(meta)
    (warning,) = compare_runs(base, new).hardware_warnings
    assert warning.startswith("suite efficiency version differs: base ran v1, new v2")
