"""compare: ratios per case and metric, threshold, exit code, one-sided cases, hardware warnings, runs
on different GPU models refused unless --allow-other-hardware."""

from __future__ import annotations

import argparse

import pytest

from posbench import tasks as _registry  # noqa: E402
from posbench.cli.report_cmds import add_compare_parser
from posbench.report.compare import compare_runs, main_compare
from posbench.report.compare_cases import metric_direction
from posbench.report.compare_checks import OtherHardware
from posbench.tasks import find as find_task
from tests.helpers.report_rows import CPU_ENV, GPU_ENV, base_row, efficiency_rows, extrapolation_rows, write_run

# The tasks this installation knows, as the CLI hands them to the report.
KNOWN_TASKS = {name: _registry.get(name) for name in _registry.names(include_hidden=True)}


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
    assert (
        metric_direction("efficiency", "train_wps", KNOWN_TASKS) == 1
        and metric_direction("kernels", "fwdbwd_tflops", KNOWN_TASKS) == 1
    )
    assert (
        metric_direction("efficiency", "peak_mem_train_bytes", KNOWN_TASKS) == -1
        and metric_direction("kernels", "fwd_ms", KNOWN_TASKS) == -1
    )
    assert metric_direction("extrapolation", "ppl@nonoverlapping@512", KNOWN_TASKS) == -1  # the ppl@* family
    assert metric_direction("efficiency", "j_per_token", KNOWN_TASKS) == -1
    for task, ignored in (
        ("efficiency", "n_params"),
        ("efficiency", "batch_size"),
        ("extrapolation", "best_ppl"),
        ("efficiency", "train_wps_min"),
        ("kernels", "fwd_ms_max"),
    ):
        assert metric_direction(task, ignored, KNOWN_TASKS) is None
    # no guessing from names: an undeclared metric or an unknown task is not compared
    assert (
        metric_direction("efficiency", "other_wps", KNOWN_TASKS) is None
        and metric_direction("mine", "train_wps", KNOWN_TASKS) is None
    )


def test_a_declared_direction_decides_the_verdict(tmp_path, monkeypatch):
    from posbench.core.task import Metric
    from posbench.tasks.efficiency.task import METRICS

    # Declare train_wps lower-is-better: the same 10% fall becomes an improvement.
    monkeypatch.setitem(
        METRICS, "train_wps", Metric(title="Training speed", unit="words/s", doc="", higher_is_better=False, fmt="count")
    )
    base = write_run(tmp_path / "base", efficiency_rows())
    new = write_run(tmp_path / "new", _with_train_wps_scaled(efficiency_rows(), 0.9))
    result = compare_runs(base, new, find_task=find_task)
    assert result.regressions == [] and {c.metric for c in result.improvements} == {"train_wps"}


def test_a_malformed_row_is_skipped_with_one_warning_naming_file_and_line(tmp_path, capsys):
    base = write_run(tmp_path / "base", efficiency_rows())
    new = write_run(tmp_path / "new", efficiency_rows())
    lines = (new / "cases.jsonl").read_text().splitlines()
    lines[2] = lines[2].replace('"status": "ok"', '"status": 3', 1)
    (new / "cases.jsonl").write_text("\n".join(lines) + "\n")
    assert (
        main_compare(_args(base, new), find_task=find_task) == 1
    )  # its case is missing from new: a failure, not an internal error
    captured = capsys.readouterr()
    assert captured.err.strip() == f"warning: {new}/cases.jsonl:3: status: expected a string, got int; line skipped"
    assert "1 case(s) of base are missing from new" in captured.out


def test_identical_runs_pass(tmp_path, capsys):
    base = write_run(tmp_path / "base", efficiency_rows() + extrapolation_rows(run_id="run-a"), suite="mixed")
    new = write_run(tmp_path / "new", efficiency_rows() + extrapolation_rows(run_id="run-a"), suite="mixed")
    result = compare_runs(base, new, find_task=find_task)
    assert result.regressions == [] and result.improvements == []
    assert result.only_in_base == [] == result.only_in_new and result.hardware_warnings == []
    assert {c.ratio for c in result.changes} == {1.0}
    assert main_compare(_args(base, new), find_task=find_task) == 0
    assert "**0 regression(s), 0 improvement(s)** over 18 case(s)" in capsys.readouterr().out


def test_planted_ten_percent_train_wps_regression_fails(tmp_path):
    base = write_run(tmp_path / "base", efficiency_rows())
    new = write_run(tmp_path / "new", _with_train_wps_scaled(efficiency_rows(), 0.9))
    result = compare_runs(base, new, threshold=0.05, find_task=find_task)
    regressed = {(c.case_id, c.metric) for c in result.regressions}
    ok_cases = {r["case_id"] for r in efficiency_rows() if r["status"] == "ok"}
    assert regressed == {(case, "train_wps") for case in ok_cases}
    assert all(c.ratio == pytest.approx(0.9) for c in result.regressions)
    assert result.exit_code == 1
    md_path = tmp_path / "compare.md"
    assert main_compare(_args(base, new, "--markdown", str(md_path)), find_task=find_task) == 1
    md = md_path.read_text()
    assert "### Regressions" in md and "| efficiency/alibi/seq_len=256 | train_wps |" in md and "0.900x" in md
    # a looser threshold accepts the same change
    assert compare_runs(base, new, threshold=0.15, find_task=find_task).regressions == []
    assert main_compare(_args(base, new, "--threshold", "0.15"), find_task=find_task) == 0


def test_faster_and_smaller_is_an_improvement(tmp_path):
    base = write_run(tmp_path / "base", efficiency_rows())
    rows = _with_train_wps_scaled(efficiency_rows(), 1.2)
    for row in rows:
        if "peak_mem_train_bytes" in row["metrics"]:
            row["metrics"]["peak_mem_train_bytes"] *= 0.5
    result = compare_runs(base, write_run(tmp_path / "new", rows), find_task=find_task)
    assert {c.metric for c in result.improvements} == {"train_wps", "peak_mem_train_bytes"}
    assert result.exit_code == 0


def test_more_memory_and_a_new_oom_are_regressions(tmp_path):
    base = write_run(tmp_path / "base", efficiency_rows())
    rows = efficiency_rows()
    rows[0]["metrics"]["peak_mem_train_bytes"] *= 1.5
    rows[1].update(status="oom", metrics={})
    result = compare_runs(base, write_run(tmp_path / "new", rows), find_task=find_task)
    got = {(c.case_id, c.metric, c.verdict) for c in result.regressions}
    assert got == {(rows[0]["case_id"], "peak_mem_train_bytes", "regression"), (rows[1]["case_id"], "status", "regression")}


def test_an_evaluation_that_now_ooms_is_a_perplexity_regression(tmp_path):
    base = write_run(tmp_path / "base", extrapolation_rows())
    rows = extrapolation_rows()
    alibi_512 = next(e for e in rows[2]["series"]["evals"] if e["L_valid"] == 512)
    alibi_512.update(status="oom", ppl=None)
    result = compare_runs(base, write_run(tmp_path / "new", rows), find_task=find_task)
    (reg,) = result.regressions
    assert (reg.method, reg.metric, reg.new) == ("alibi", "ppl@nonoverlapping@512", None)


def test_cases_in_only_one_run_are_listed(tmp_path):
    rows = efficiency_rows()
    base = write_run(tmp_path / "base", rows[:-1])
    new = write_run(tmp_path / "new", rows[1:])
    result = compare_runs(base, new, find_task=find_task)
    assert result.only_in_base == [rows[0]["case_id"]]
    assert result.only_in_new == [rows[-1]["case_id"]]
    md = result.markdown()
    assert "### Only in base: missing from new, failures (1)" in md and f"- `{rows[0]['case_id']}`" in md
    assert "### Only in new (1)" in md
    # a case of BASE that NEW lacks fails the comparison; one only NEW has does not
    assert result.exit_code == 1 and result.regressions == []
    assert (
        compare_runs(write_run(tmp_path / "b2", rows[:-1]), write_run(tmp_path / "n2", rows), find_task=find_task).exit_code == 0
    )


def test_different_hardware_is_warned_when_allowed(tmp_path):
    base = write_run(tmp_path / "base", efficiency_rows(), CPU_ENV)
    new = write_run(tmp_path / "new", efficiency_rows(device="cuda:0"), GPU_ENV)
    with pytest.raises(OtherHardware, match="base: no GPU model recorded \\(device cpu\\); new: NVIDIA A100-SXM4-80GB"):
        compare_runs(base, new, find_task=find_task)
    result = compare_runs(base, new, allow_other_hardware=True, find_task=find_task)
    text = " ".join(result.hardware_warnings)
    assert "GPU differs" in text and "NVIDIA A100-SXM4-80GB" in text
    assert "device differs" in text
    assert "**Warning:** GPU differs" in result.markdown()
    cpu_b = write_run(tmp_path / "cpu-b", efficiency_rows(), CPU_ENV)
    other_cpu = write_run(tmp_path / "cpu-n", efficiency_rows(), {**CPU_ENV, "cpu": "Other CPU 1"})
    (cpu_warning,) = compare_runs(cpu_b, other_cpu, find_task=find_task).hardware_warnings  # another CPU model: a warning only
    assert cpu_warning.startswith("CPU differs: base ran on Test CPU 9000, new on Other CPU 1")


H100_ENV = {**GPU_ENV, "nvml": {"name": "NVIDIA H100 80GB HBM3", "driver": "550.54"}}


def test_runs_on_different_gpu_models_are_refused_unless_allowed(tmp_path, capsys):
    base = write_run(tmp_path / "base", efficiency_rows(device="cuda:0"), GPU_ENV)
    new = write_run(tmp_path / "new", efficiency_rows(device="cuda:0"), H100_ENV)
    assert main_compare(_args(base, new), find_task=find_task) == 2
    out = capsys.readouterr()
    assert out.out == ""  # nothing compared
    assert out.err == (
        "posbench compare: base and new ran on different GPU models (base: NVIDIA A100-SXM4-80GB; "
        "new: NVIDIA H100 80GB HBM3): their ratios would compare GPUs, not code; compare runs of one "
        "GPU model, or pass --allow-other-hardware to compare them anyway\n"
    )
    # allowed: it warns, compares and passes (the rows are the same)
    assert main_compare(_args(base, new, "--allow-other-hardware"), find_task=find_task) == 0
    out = capsys.readouterr()
    assert out.err.startswith("warning: GPU differs: base ran on NVIDIA A100-SXM4-80GB, new on NVIDIA H100 80GB HBM3")
    assert "**Warning:** GPU differs" in out.out and "0 regression(s)" in out.out
    # a slower H100 run is still judged when allowed
    slower = write_run(tmp_path / "slower", _with_train_wps_scaled(efficiency_rows(device="cuda:0"), 0.8), H100_ENV)
    assert main_compare(_args(base, slower, "--allow-other-hardware"), find_task=find_task) == 1


def test_the_same_gpu_model_compares_and_torch_names_it_without_nvml(tmp_path):
    base = write_run(tmp_path / "base", efficiency_rows(device="cuda:0"), GPU_ENV)
    new = write_run(tmp_path / "new", efficiency_rows(device="cuda:0"), {**GPU_ENV, "driver": "555.1"})
    assert compare_runs(base, new, find_task=find_task).hardware_warnings == []
    # without NVML, env.json's torch name of the GPU is the model
    no_nvml = {**GPU_ENV, "nvml": "unavailable: needs CUDA and NVML", "gpu": "NVIDIA A100-SXM4-80GB"}
    assert (
        compare_runs(
            base, write_run(tmp_path / "torch-named", efficiency_rows(device="cuda:0"), no_nvml), find_task=find_task
        ).exit_code
        == 0
    )
    with pytest.raises(OtherHardware, match="new: NVIDIA H100 80GB HBM3"):
        compare_runs(
            base,
            write_run(tmp_path / "h", efficiency_rows(device="cuda:0"), {**no_nvml, "gpu": "NVIDIA H100 80GB HBM3"}),
            find_task=find_task,
        )


def test_unreadable_input_exits_2(tmp_path, capsys):
    assert main_compare(_args(tmp_path / "missing", tmp_path / "missing"), find_task=find_task) == 2
    assert "no such folder" in capsys.readouterr().err


def test_a_different_suite_version_is_warned(tmp_path):
    base = write_run(tmp_path / "base", efficiency_rows())
    new = write_run(tmp_path / "new", efficiency_rows())
    meta = (new / "run.json").read_text().replace('"version": 1', '"version": 2')
    (new / "run.json").write_text(meta)
    (warning,) = compare_runs(base, new, find_task=find_task).hardware_warnings
    assert warning.startswith("suite efficiency version differs: base ran v1, new v2")


# -- noise-aware verdicts with interleaved rounds ---------------------------------------------------


def _rounds_run(root, base_values, alibi_ratios, suite="efficiency", task="efficiency"):
    """A run with rounds: sinusoidal's train_wps per round and alibi's as ratios to it, per round."""
    rows = []
    for name, values in (("sinusoidal", base_values), ("alibi", [b * r for b, r in zip(base_values, alibi_ratios)])):
        for r, v in enumerate(values, 1):
            rows.append(
                {
                    "case_id": f"{name}/seq_len=64",
                    "suite": suite,
                    "task": task,
                    "method": name,
                    "params": {"seq_len": 64},
                    "status": "ok",
                    "message": "",
                    "metrics": {"train_wps": v},
                    "series": {},
                    "info": {},
                    "settings": {},
                    "device": "cpu",
                    "profile": "cpu",
                    "run_id": "r",
                    "started_at": f"2026-01-01T00:{r:02d}:00+00:00",
                    "duration_s": 1.0,
                    "posbench_version": "x",
                    "git_commit": "abc",
                    "traceback": "",
                    "round": r,
                }
            )
    return write_run(root, rows, metrics=["train_wps"])


DRIFT = [1000.0, 800.0, 1150.0, 900.0, 1050.0]  # the machine's speed per round: +-20%


def test_separated_intervals_are_a_regression_overlapping_ones_within_noise(tmp_path, capsys):
    base = _rounds_run(tmp_path / "base", DRIFT, [0.90, 0.91, 0.89, 0.90, 0.905])
    # Separated: alibi now 0.80x sinusoidal in every round, although absolute speeds drift 20%.
    slow = _rounds_run(tmp_path / "slow", [d * 0.97 for d in reversed(DRIFT)], [0.80, 0.81, 0.79, 0.80, 0.805])
    result = compare_runs(base, slow, threshold=0.05, find_task=find_task)
    (reg,) = result.regressions
    assert (reg.case_id, reg.metric, reg.basis) == ("alibi/seq_len=64", "train_wps", "ratio to sinusoidal")
    assert reg.ratio == pytest.approx(0.80 / 0.90, abs=0.005) and reg.interval[1] < 0.95
    assert main_compare(_args(base, slow), find_task=find_task) == 1
    out = capsys.readouterr().out
    assert "| alibi/seq_len=64 | train_wps (ratio to sinusoidal) | 0.900x | 0.800x | 0.889x |" in out
    assert "95% interval" in out
    # The baseline itself is compared on its values: 3% slower is within the threshold.
    (same,) = [c for c in result.changes if c.case_id == "sinusoidal/seq_len=64"]
    assert same.verdict == "same" and same.basis == "" and same.interval is not None

    # Overlapping: the median ratio fell 8%, but the rounds scatter so widely that the interval
    # reaches back above 0.95: unchanged (within noise), not a regression.
    noisy = _rounds_run(tmp_path / "noisy", DRIFT, [0.70, 0.95, 0.83, 0.99, 0.76])
    result = compare_runs(base, noisy, threshold=0.05, find_task=find_task)
    assert result.regressions == [] and result.exit_code == 0
    (noise,) = result.within_noise
    assert noise.ratio < 0.95 and noise.interval[0] < 0.95 < noise.interval[1]
    assert "1 change(s) beyond the threshold are unchanged (within noise)" in result.markdown()
    assert "### Unchanged (within noise)" in result.markdown()

    # Improvement likewise: the whole interval above 1 + threshold.
    fast = _rounds_run(tmp_path / "fast", DRIFT, [1.00, 1.01, 0.99, 1.00, 1.005])
    (imp,) = compare_runs(base, fast, find_task=find_task).improvements
    assert imp.interval[0] > 1.05


def test_empty_new_run_and_different_suites_are_bad_input(tmp_path, capsys):
    base = _rounds_run(tmp_path / "base", DRIFT, [0.9] * 5)
    empty = tmp_path / "empty" / "efficiency" / "r"
    empty.mkdir(parents=True)
    (empty / "cases.jsonl").write_text("")
    assert main_compare(_args(base, empty), find_task=find_task) == 2
    err = capsys.readouterr().err.strip()
    assert err == f"posbench compare: {empty}: the new run has no rows (empty cases.jsonl); nothing to compare"
    other = _rounds_run(tmp_path / "other", DRIFT, [0.9] * 5, suite="kernels", task="kernels")
    assert main_compare(_args(base, other), find_task=find_task) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("posbench compare: base and new are different suites (base: efficiency; new: kernels)")
    assert len(err.splitlines()) == 1


def test_a_partial_new_run_fails(tmp_path):
    rows = efficiency_rows()
    base = write_run(tmp_path / "base", rows)
    ok_in_base = next(r for r in rows if r["status"] == "ok")
    partial = [r for r in rows if r is not ok_in_base]
    result = compare_runs(base, write_run(tmp_path / "new", partial), find_task=find_task)
    assert result.only_in_base == [ok_in_base["case_id"]] and result.exit_code == 1


def test_the_markdown_summary_copies_case_ids_as_inert_text(tmp_path):
    """A case id from a row is data: a pipe, a newline, a heading or a backtick in it lands in the
    summary as text, never as a new table row, heading or code span."""
    hostile = "x | forged | row |\n# Forged heading `tick`"
    rows = efficiency_rows()
    for row in rows:
        row["case_id"] += hostile
    base = write_run(tmp_path / "base", rows)
    slower = _with_train_wps_scaled([dict(r, metrics=dict(r["metrics"])) for r in rows], 0.5)
    new = write_run(tmp_path / "new", slower[1:])  # a regression table, and one case only in base
    md = compare_runs(base, new, find_task=find_task).markdown()
    assert "### Regressions" in md and "### Only in base" in md
    assert "\n# Forged heading" not in md  # no line of the summary starts a heading from data
    assert "x \\| forged \\| row \\| # Forged heading \\`tick\\`" in md  # the pipes as text, in one cell
    table = [line for line in md.splitlines() if line.startswith("| ") and "forged" in line]
    assert table and all(line.replace("\\|", "").count("|") == 7 for line in table)  # six cells, no more
    assert "- `` efficiency/" in md  # the one-sided id as one code span, its backticks inside


# -- what compare checks before it compares (issue 55 item 3) ------------------------------------


def _with_settings(rows, **settings):
    for row in rows:
        row["settings"] = {"timeout_s": 600, "dtype": "float32", **settings}
    return rows


def test_runs_measured_with_different_settings_are_refused_in_one_line(tmp_path, capsys):
    base = write_run(tmp_path / "base", _with_settings(efficiency_rows(), rounds=5, windows=14))
    new = write_run(tmp_path / "new", _with_settings(efficiency_rows(), rounds=2, windows=5, timeout_s=60))
    assert main_compare(_args(base, new), find_task=find_task) == 2
    err = capsys.readouterr().err
    assert err.strip() == (
        "posbench compare: base and new were measured with different settings: rounds (base 5, new 2); "
        "windows (base 14, new 5); their ratios would compare settings, not code; compare runs of the same "
        "settings, or pass --allow-different-settings to compare them anyway"
    )  # timeout_s changes no measurement: not named
    assert main_compare(_args(base, new, "--allow-different-settings"), find_task=find_task) == 0
    captured = capsys.readouterr()
    assert "warning: settings differ: rounds (base 5, new 2); windows (base 14, new 5)" in captured.err
    assert "> **Warning:** settings differ: rounds (base 5, new 2)" in captured.out
    # a model, dtype or steps of its own is named the same way
    other = write_run(tmp_path / "other", _with_settings(efficiency_rows(), rounds=5, windows=14, dtype="bfloat16"))
    with pytest.raises(ValueError, match=r'settings: dtype \(base "float32", new "bfloat16"\);'):
        compare_runs(base, other, find_task=find_task)


def test_methods_new_did_not_run_are_not_in_new_and_not_failures(tmp_path):
    rows = efficiency_rows()
    base = write_run(tmp_path / "base", rows)
    # new ran only sinusoidal and alibi (its run.json lists only them)
    kept = [r for r in efficiency_rows() if r["method"] in ("sinusoidal", "alibi")]
    new = write_run(tmp_path / "new", kept, methods=["sinusoidal", "alibi"])
    result = compare_runs(base, new, find_task=find_task)
    assert result.only_in_base == [] and result.exit_code == 0
    assert {r.split("/")[1] for r in result.not_in_new} == {"rotary", "t5_bias", "alibi_triton"}
    assert "### Not in new: methods new did not run, or unavailable in base (9)" in result.markdown()
    # a method new ran, missing a case of base: a failure still
    partial = write_run(tmp_path / "partial", kept[1:], methods=["sinusoidal", "alibi"])
    failed = compare_runs(base, partial, find_task=find_task)
    assert failed.only_in_base == [kept[0]["case_id"]] and failed.exit_code == 1


# -- one estimator per change, memory judged with its resolution (issue 66) --------------------------

MIB = 1 << 20


def _memory_rerun(root, above_train, above_eval, device="cpu"):
    """efficiency_rows with the peaks above the resting footprint set (bytes), every case alike."""
    rows = efficiency_rows(device=device)
    for row in rows:
        if row["status"] == "ok":
            row["metrics"].update(peak_mem_train_above_base_bytes=above_train, peak_mem_eval_above_base_bytes=above_eval)
    return write_run(root, rows, env=GPU_ENV if device == "cuda" else CPU_ENV)


def test_a_rerun_of_the_same_code_gives_no_memory_verdict(tmp_path):
    # Issue 66: a re-run of identical code on a CPU moved the peaks above the resting footprint to
    # 0.929x and 0.851x; within max(5%, 8 MiB) of the resident set that is no change.
    base = _memory_rerun(tmp_path / "base", 72 * MIB, 26 * MIB)
    new = _memory_rerun(tmp_path / "new", 0.929 * 72 * MIB, 0.851 * 26 * MIB)
    result = compare_runs(base, new, find_task=find_task)
    memory = [c for c in result.changes if c.metric.startswith("peak_mem_")]
    assert memory and all(c.memory and c.device == "cpu" for c in memory)
    assert result.regressions == result.improvements == [] and result.exit_code == 0
    moved = {c.metric for c in result.within_noise}
    assert moved == {"peak_mem_train_above_base_bytes", "peak_mem_eval_above_base_bytes"}
    assert "Memory: a difference under max(5%, 8 MiB) on cpu is within the measurement's resolution" in result.markdown()
    # a gap beyond the resolution is still a change, either way
    grown = _memory_rerun(tmp_path / "grown", 2.8 * 72 * MIB, 26 * MIB)
    assert {c.metric for c in compare_runs(base, grown, find_task=find_task).regressions} == {"peak_mem_train_above_base_bytes"}


def test_cuda_memory_has_a_finer_resolution(tmp_path):
    # CUDA's allocator counts bytes exactly: 0.929x of 1 GiB is 73 MiB, beyond max(1%, 1 MiB).
    base = _memory_rerun(tmp_path / "base", 1024 * MIB, 1024 * MIB, device="cuda")
    new = _memory_rerun(tmp_path / "new", 0.929 * 1024 * MIB, 1024 * MIB, device="cuda")
    result = compare_runs(base, new, find_task=find_task)
    assert {c.metric for c in result.improvements} == {"peak_mem_train_above_base_bytes"}
    assert "max(1%, 1 MiB) on cuda" in result.markdown()


def _windows_run(root, rounds):
    """The baseline alone, paired windows: ``rounds`` a list of each round's windows (words/s); each
    round's stored train_wps the median of its windows, as the worker stores it."""
    rows = []
    for r, windows in enumerate(rounds, 1):
        row = base_row("efficiency", "efficiency", "sinusoidal", {"seq_len": 64}, "r", round=r)
        row["metrics"] = {"train_wps": sorted(windows)[len(windows) // 2]}
        row["series"] = {"train_wps_windows": windows}
        row["info"] = {"pairing": "windows", "group": f"g{r}"}
        rows.append(row)
    return write_run(root, rows, metrics=["train_wps"])


def test_compare_shows_the_values_its_ratio_divides(tmp_path):
    # The median of the rounds' medians (the row's train_wps) falls 5k -> 4k, while the median of
    # every window, which the ratio and its interval resample, rises 1k -> 4k: the values shown are
    # the latter, so "base -> new" and new/base never point opposite ways.
    base = _windows_run(tmp_path / "base", [[10e3, 10e3, 10e3], [1e3] * 5, [5e3]])
    new = _windows_run(tmp_path / "new", [[6e3] * 3, [4e3] * 3, [4e3]])
    (change,) = compare_runs(base, new, find_task=find_task).changes
    assert (change.base, change.new) == (1e3, 4e3) and change.ratio == pytest.approx(4.0)
    assert change.interval is not None and change.basis == ""
