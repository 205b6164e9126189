"""The GitHub workflows are valid (schema, offline) and run commands that exist.

A workflow only fails on GitHub, after a push; these checks catch a typo'd key, a Makefile
target that was renamed or a ``bench.py`` subcommand nobody registered, on any machine.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from posbench.cli.report_cmds import add_compare_parser, add_publish_parser, add_report_parser

ROOT = Path(__file__).resolve().parents[2]
WORKFLOWS = ROOT / ".github" / "workflows"
CI, GPU = WORKFLOWS / "ci.yml", WORKFLOWS / "gpu-bench.yml"
# Subcommands owned by posbench/cli/app.py (the runner's); ours are read from the parsers below.
KNOWN_SUBCOMMANDS = {"run", "validate", "schema", "list", "report", "compare", "download"}


def _validate(path: Path) -> subprocess.CompletedProcess:
    pytest.importorskip("check_jsonschema")
    # The schema is vendored in check-jsonschema; a dead proxy proves no download is attempted.
    env = {**os.environ, "HTTPS_PROXY": "http://127.0.0.1:9", "HTTP_PROXY": "http://127.0.0.1:9", "NO_PROXY": ""}
    return subprocess.run(
        [sys.executable, "-m", "check_jsonschema", "--builtin-schema", "vendor.github-workflows", str(path)],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )


def _load(path: Path) -> dict:
    doc = yaml.safe_load(path.read_text())
    # YAML 1.1 reads the bare key `on` as True.
    doc["on"] = doc.pop(True, doc.get("on"))
    return doc


def _scripts(doc: dict) -> list[str]:
    return [step["run"] for job in doc["jobs"].values() for step in job["steps"] if "run" in step]


def _make_targets() -> set[str]:
    text = (ROOT / "Makefile").read_text()
    return set(re.findall(r"^([A-Za-z0-9_.-]+)\s*:(?!=)", text, flags=re.M))


def _our_subcommands() -> set[str]:
    sub = argparse.ArgumentParser().add_subparsers()
    add_report_parser(sub)
    add_compare_parser(sub)
    add_publish_parser(sub)
    return set(sub.choices)


@pytest.mark.subprocess
@pytest.mark.parametrize("path", [CI, GPU], ids=["ci", "gpu-bench"])
def test_workflow_matches_the_github_schema(path):
    result = _validate(path)
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.subprocess
def test_schema_check_rejects_a_broken_workflow(tmp_path):
    broken = tmp_path / "broken.yml"
    broken.write_text("on: push\njobs:\n  test:\n    steps:\n      - run: make test\n    runs_on: ubuntu-latest\n")
    assert _validate(broken).returncode != 0


@pytest.mark.parametrize("path", [CI, GPU], ids=["ci", "gpu-bench"])
def test_commands_exist(path):
    targets, subcommands = _make_targets(), KNOWN_SUBCOMMANDS | _our_subcommands()
    scripts = "\n".join(_scripts(_load(path)))
    for target in re.findall(r"\bmake\s+([A-Za-z][\w.-]*)", scripts):
        assert target in targets, f"{path.name} runs `make {target}`, which the Makefile lacks"
    for command in re.findall(r"\bbench\.py\s+([a-z][\w-]*)", scripts):
        assert command in subcommands, f"{path.name} runs `bench.py {command}`, which no parser registers"


def test_ci_runs_make_test_on_push_and_pull_request():
    doc = _load(CI)
    assert {"push", "pull_request"} <= set(doc["on"])
    (job,) = doc["jobs"].values()
    assert [s["run"] for s in job["steps"] if s.get("run", "").startswith("make")] == ["make lint", "make test"]
    assert any(s.get("with", {}).get("cache") == "pip" for s in job["steps"])
    data_step = next(s["run"] for s in job["steps"] if "POSBENCH_DATA_DIR" in s.get("run", ""))
    assert "if [ -d" in data_step  # only when a corpus folder exists


def _steps(job: dict, needle: str, key: str = "run") -> list[dict]:
    return [s for s in job["steps"] if needle in str(s.get(key, ""))]


def _script_subcommands() -> set[str]:
    spec = importlib.util.spec_from_file_location("gpu_baseline", ROOT / ".github" / "scripts" / "gpu_baseline.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    parser = module._parser()
    (sub,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return set(sub.choices)


def test_gpu_bench_runs_a_chosen_suite_on_the_gpu_and_reports_on_a_cpu_runner():
    doc = _load(GPU)
    suite_input = doc["on"]["workflow_dispatch"]["inputs"]["suite"]
    assert suite_input["type"] == "choice"
    shipped = sorted(p.stem for p in (ROOT / "suites").glob("*.yaml"))
    assert sorted(suite_input["options"]) == shipped  # every shipped suite can be run on demand
    plan, bench, report = doc["jobs"]["plan"], doc["jobs"]["bench"], doc["jobs"]["report"]
    weekly = plan["env"]["WEEKLY_SUITES"]
    assert sorted(json.loads(weekly)) == shipped  # ... and runs every week
    (planned,) = _steps(plan, "matrix --suites")
    assert planned["env"]["SUITES"] == (
        "${{ github.event_name == 'workflow_dispatch' && format('[\"{0}\"]', inputs.suite) || env.WEEKLY_SUITES }}"
    )
    # the plan's legs are the bench matrix; a report leg per suite (its shards joined)
    assert bench["needs"] == "plan" and bench["strategy"]["matrix"] == {"include": "${{ fromJSON(needs.plan.outputs.legs) }}"}
    assert report["strategy"]["matrix"] == {"suite": "${{ fromJSON(needs.plan.outputs.suites) }}"}
    assert doc["on"]["schedule"][0]["cron"]
    assert bench["runs-on"] == ["self-hosted", "linux", "gpu"]
    # the report job: a CPU runner, after the GPU job, also when a bench leg failed
    assert report["runs-on"] == "ubuntu-latest" and report["needs"] == ["plan", "bench"] and "!cancelled()" in report["if"]
    bench_scripts, report_scripts = "\n".join(_scripts({"jobs": {"b": bench}})), "\n".join(_scripts({"jobs": {"r": report}}))
    assert 'make bench SUITE="$SUITE"' in bench_scripts and "--profile gpu" in bench_scripts
    assert "bench.py" not in bench_scripts  # no CPU work holds the GPU
    assert "bench.py report" in report_scripts and "bench.py compare" in report_scripts
    assert "$GITHUB_STEP_SUMMARY" in report_scripts
    assert "BENCH_ARGS" in (ROOT / "Makefile").read_text()  # how --profile reaches bench.py
    # every subcommand of the decision script the workflow runs exists
    used = set(re.findall(r'"\$SCRIPT"\s+([a-z][\w-]*)', "\n".join(_scripts(doc))))
    assert used == _script_subcommands() == {"venv-dir", "locate", "pick", "decide"}
    assert doc["env"]["SCRIPT"] == ".github/scripts/gpu_baseline.py"


def test_gpu_bench_keeps_its_venv_outside_the_workspace():
    bench = _load(GPU)["jobs"]["bench"]
    (venv,) = _steps(bench, "venv-dir")
    assert '--root "$RUNNER_TOOL_CACHE/' in venv["run"] and venv["id"] == "venv"
    (make,) = _steps(bench, "make bench")
    assert 'VENV="$VENV_DIR"' in make["run"] and make["env"]["VENV_DIR"] == "${{ steps.venv.outputs.dir }}"
    # the spec the venv was keyed by is the one make installs (the dispatch input, else the Makefile's)
    assert 'TORCH_SPEC="$SPEC"' in make["run"] and make["env"]["SPEC"] == "${{ steps.venv.outputs.torch_spec }}"
    assert bench["env"]["TORCH_SPEC"] == "${{ inputs.torch_spec }}"
    assert ".venv" not in "\n".join(s.get("run", "") for s in bench["steps"])


def test_gpu_bench_names_artifacts_and_baselines_by_gpu_model():
    doc = _load(GPU)
    bench, report = doc["jobs"]["bench"], doc["jobs"]["report"]
    (locate,) = _steps(bench, "locate")
    assert locate["id"] == "run"
    (handover,) = _steps(bench, "upload-artifact", "uses")
    assert handover["with"]["name"] == "bench-${{ matrix.suite }}-${{ steps.run.outputs.gpu_slug }}-${{ matrix.leg }}"
    assert handover["if"].startswith("always()")
    (download_run,) = [s for s in _steps(report, "download-artifact", "uses") if "pattern" in s["with"]]
    assert download_run["with"]["pattern"] == "bench-${{ matrix.suite }}-*"  # the GPU job's hand-over
    (pick,) = _steps(report, "pick")
    baseline = "baseline-${{ matrix.suite }}-${{ steps.run.outputs.gpu_slug }}"
    assert pick["env"]["NAME"] == baseline and "actions/artifacts?name=$NAME" in pick["run"]
    (download_base,) = [s for s in _steps(report, "download-artifact", "uses") if "run-id" in s["with"]]
    assert download_base["if"] == "steps.pick.outputs.found == 'true'"  # none yet: nothing to download
    assert download_base["with"]["run-id"] == "${{ steps.pick.outputs.run_id }}"
    assert download_base["with"]["name"] == "${{ steps.pick.outputs.name }}"
    (publish,) = [s for s in _steps(report, "upload-artifact", "uses") if s["with"]["name"] == baseline]
    assert publish["if"] == "always() && steps.decide.outputs.staged == 'true'"  # also after a regression
    assert publish["with"]["path"] == "next-baseline/" and publish["with"]["retention-days"] > 0
    assert doc["permissions"]["actions"] == "read"


def test_gpu_bench_accepts_a_run_as_the_new_baseline_by_hand():
    doc = _load(GPU)
    accept = doc["on"]["workflow_dispatch"]["inputs"]["accept_baseline"]
    assert accept["type"] == "boolean" and accept["default"] is False
    report = doc["jobs"]["report"]
    (decide,) = _steps(report, "decide")
    assert decide["id"] == "decide" and '--accept "$ACCEPT"' in decide["run"]
    assert decide["env"]["ACCEPT"] == "${{ inputs.accept_baseline && 'true' || 'false' }}"  # the weekly run: false
    assert "--stage next-baseline" in decide["run"] and "--baseline baseline" in decide["run"]
    (compare,) = _steps(report, "bench.py compare")
    assert compare["if"] == "steps.decide.outputs.compare == 'true'"
    assert compare["env"]["FAIL_ON_REGRESSION"] == "${{ steps.decide.outputs.fail_on_regression }}"
    assert compare["env"]["BASE"] == "${{ steps.decide.outputs.base }}"
    # a regression (exit 1) fails the job unless the run was accepted; bad input (2) always does
    run = compare["run"]
    assert 'if [ "$status" -eq 1 ] && [ "$FAIL_ON_REGRESSION" != true ]; then status=0; fi' in run
    assert run.rstrip().endswith("exit $status") and "--allow-other-hardware" not in run


def test_the_publish_step_runs_after_green_bench_and_report_jobs_and_proposes_rows_and_pages():
    doc = _load(GPU)
    publish = doc["jobs"]["publish"]
    assert set(publish["needs"]) == {"plan", "bench", "report"} and publish["if"] == "${{ success() }}"
    assert publish["permissions"] == {"contents": "write", "pull-requests": "write"}
    runs = [s.get("run", "") for s in publish["steps"]]
    (step,) = [r for r in runs if "bench.py publish" in r]
    assert (
        "-m posbench.cli.gpu_plan merge new joined" in step
        and "posbench.cli.docs_results --out docs/results --published results/published" in step
    )
    assert "--allow-dirty" not in step and "--allow-outside-methods" not in step  # a publish refusal fails the job
    (pr,) = [r for r in runs if "gh pr create" in r]
    assert "git add results/published docs/results" in pr and runs.index(step) < runs.index(pr)
    # the bench job runs the plan's shard of the suite
    bench = doc["jobs"]["bench"]
    (make,) = [s for s in bench["steps"] if "make bench" in s.get("run", "")]
    assert '--shard $SHARD"' in make["run"] and bench["env"]["SHARD"] == "${{ matrix.shard }}"
