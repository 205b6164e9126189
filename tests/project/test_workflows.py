"""The GitHub workflows are valid (schema, offline) and run commands that exist.

A workflow only fails on GitHub, after a push; these checks catch a typo'd key, a Makefile
target that was renamed or a ``bench.py`` subcommand nobody registered, on any machine.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from posbench.cli.report_cmds import add_compare_parser, add_report_parser

ROOT = Path(__file__).resolve().parents[2]
WORKFLOWS = ROOT / ".github" / "workflows"
CI, GPU = WORKFLOWS / "ci.yml", WORKFLOWS / "gpu-bench.yml"
# Subcommands owned by posbench/cli.py (the runner's); ours are read from the parsers below.
KNOWN_SUBCOMMANDS = {"run", "validate", "schema", "list", "report", "compare", "download"}


def _validate(path: Path) -> subprocess.CompletedProcess:
    pytest.importorskip("check_jsonschema")
    # The schema is vendored in check-jsonschema; a dead proxy proves no download is attempted.
    env = {**os.environ, "HTTPS_PROXY": "http://127.0.0.1:9", "HTTP_PROXY": "http://127.0.0.1:9",
           "NO_PROXY": ""}
    return subprocess.run(
        [sys.executable, "-m", "check_jsonschema", "--builtin-schema", "vendor.github-workflows", str(path)],
        capture_output=True, text=True, env=env, timeout=120)


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


def test_gpu_bench_runs_a_chosen_suite_reports_compares_and_uploads():
    doc = _load(GPU)
    suite_input = doc["on"]["workflow_dispatch"]["inputs"]["suite"]
    assert suite_input["type"] == "choice"
    shipped = sorted(p.stem for p in (Path(__file__).resolve().parents[2] / "suites").glob("*.yaml"))
    assert sorted(suite_input["options"]) == shipped  # every shipped suite can be run on demand
    (job,) = doc["jobs"].values()
    weekly = job["strategy"]["matrix"]["suite"].split("||")[1].split("'")[1]
    assert sorted(json.loads(weekly)) == shipped  # ... and runs every week
    assert doc["on"]["schedule"][0]["cron"]
    (job,) = doc["jobs"].values()
    assert job["runs-on"] == ["self-hosted", "linux", "gpu"]
    scripts = "\n".join(_scripts(doc))
    assert 'make bench SUITE="$SUITE"' in scripts and "--profile gpu" in scripts
    assert "bench.py report" in scripts and "bench.py compare" in scripts
    assert "$GITHUB_STEP_SUMMARY" in scripts
    download = next(s for s in job["steps"] if "download-artifact" in s.get("uses", ""))
    assert download["continue-on-error"] is True
    upload = next(s for s in job["steps"] if "upload-artifact" in s.get("uses", ""))
    assert upload["with"]["retention-days"] > 0 and upload["if"] == "always()"
    assert "BENCH_ARGS" in (ROOT / "Makefile").read_text()  # how --profile reaches bench.py
