"""The plugin author's journey, as the README tells it, from a folder outside the checkout:
``list`` shows the method, ``check`` runs the conformance kit on it, ``--methods alibi,mine``
runs it in a shipped suite (same run folder and table), and ``report`` has a row for it. Then
what goes wrong on the way: a plugin that raises, a file that does not parse, typos."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from posbench.core import conformance as testing
from posbench.core import registry
from posbench.store.run_rows import latest, read_rows

ROOT = Path(__file__).resolve().parents[2]

MINE = textwrap.dedent('''
    """A linear distance bias with one slope per head, from float32 positions."""
    import torch

    from posbench.core.method import PositionMethod, causal_attention
    from posbench.core.registry import register


    @register
    class Mine(PositionMethod):
        name = "mine"

        def attend(self, q, k, v, q_pos, k_pos, layer, state=None):
            # (Tq, Tk) distances from float32 positions, then one slope per head: (H, Tq, Tk)
            dist = (q_pos.float()[:, None] - k_pos.float()[None, :]).clamp(min=0)
            slopes = 0.5 ** torch.arange(1, q.shape[1] + 1, device=q.device, dtype=torch.float32)
            # every attend honours the layer's sliding window (None: all earlier keys)
            return causal_attention(q, k, v, bias=-slopes[:, None, None] * dist, window=self.window(layer))
''')

RAISES = textwrap.dedent("""
    from posbench.core.method import PositionMethod
    from posbench.core.registry import register


    @register
    class Raises(PositionMethod):
        name = "raises_in_init"

        def __init__(self, cfg):
            raise RuntimeError("cannot build me")
""")


def bench(*args: str, cwd: Path, env: dict | None = None) -> subprocess.CompletedProcess:
    """``python bench.py ARGS`` from ``cwd`` (outside the checkout), as a user types it."""
    full_env = {k: v for k, v in os.environ.items() if k != registry.METHODS_ENV_PATH}
    full_env.update(PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1", **(env or {}))
    return subprocess.run(
        [sys.executable, str(ROOT / "bench.py"), *args], cwd=cwd, env=full_env, capture_output=True, text=True, timeout=600
    )


@pytest.fixture
def outside(tmp_path):
    """A user's folder: plugins/mine.py, nothing else."""
    (tmp_path / "plugins").mkdir()
    (tmp_path / "plugins" / "mine.py").write_text(MINE)
    return tmp_path


@pytest.mark.subprocess
def test_the_whole_journey_list_check_run_report(outside):
    plugins = str(outside / "plugins")
    listed = bench("list", "--methods-dir", plugins, cwd=outside)
    assert listed.returncode == 0, listed.stderr
    assert re.search(rf"^  mine +{re.escape(str(outside / 'plugins' / 'mine.py'))}$", listed.stdout, re.M)

    checked = bench("check", "mine", "--methods-dir", plugins, cwd=outside)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    lines = [line.split() for line in checked.stdout.splitlines() if line.startswith("  ")]
    assert {(words[0], words[1]) for words in lines} == {
        (f"{check}/{dtype}", "pass") for check in testing.CHECKS for dtype in ("float32", "bfloat16")
    }
    assert checked.stdout.rstrip().endswith(f"{2 * len(testing.CHECKS)} passed, 0 failed, 0 unavailable here")

    # A shipped suite, made tiny (one round: every round starts processes that import torch);
    # mine joins alibi (the suite lists alibi, not mine).
    tiny = [
        "--set",
        "grid.seq_len=[16]",
        "--set",
        "tokens_per_step=32",
        "--set",
        "warmup_steps=0",
        "--set",
        "measure_steps=1",
        "--set",
        "windows=1",
        "--set",
        "rounds=1",
    ]
    run = bench(
        "--suite",
        "efficiency",
        "--profile",
        "cpu",
        "--methods",
        "alibi,mine",
        "--methods-dir",
        plugins,
        "--results",
        "results",
        "--quiet",
        *tiny,
        cwd=outside,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    (run_dir,) = (outside / "results" / "efficiency").iterdir()
    rows = {r["method"]: r for r in registry_rows(run_dir)}
    assert set(rows) == {"alibi", "mine"} and rows["mine"]["status"] == "ok", rows["mine"]["message"]
    table = (run_dir / "table.md").read_text()
    assert "| mine" in table and "| alibi" in table  # one table for both

    report = bench("report", "results", "--out", "report", cwd=outside)
    assert report.returncode == 0, report.stdout + report.stderr
    markdown = (outside / "report" / "report.md").read_text()
    assert any(line.startswith("| mine") for line in markdown.splitlines())


def registry_rows(run_dir: Path) -> list[dict]:

    return list(latest(read_rows(run_dir / "cases.jsonl")).values())


@pytest.mark.subprocess
def test_conformance_test_of_pytest_sees_a_plugin_named_by_the_environment(outside):
    env = dict(os.environ, PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1", **{registry.METHODS_ENV_PATH: str(outside / "plugins")})
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            str(ROOT / "tests" / "core" / "test_conformance.py"),
            "-k",
            "test_conformance and mine and float32",
            "-rA",
        ],
        cwd=outside,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout[-3000:]
    assert f"{len(testing.CHECKS)} passed" in proc.stdout and "[mine-" in proc.stdout


@pytest.mark.subprocess
def test_check_reports_a_plugin_that_raises_as_failed_checks(outside):
    (outside / "plugins" / "raises.py").write_text(RAISES)
    checked = bench("check", "raises_in_init", "--methods-dir", str(outside / "plugins"), cwd=outside)
    assert checked.returncode == 1 and "Traceback" not in checked.stderr
    lines = [line for line in checked.stdout.splitlines() if line.startswith("  ")]
    assert len(lines) == 2 * len(testing.CHECKS)
    assert all(line.split()[1] == "FAIL:" and line.endswith("RuntimeError: cannot build me") for line in lines)


def test_run_all_survives_a_plugin_that_raises_and_says_what_its_values_mean(tmp_path, monkeypatch):
    (tmp_path / "raises.py").write_text(RAISES)
    registry.add_methods_dir(tmp_path)  # tests/conftest.py puts the folders back after the test
    try:
        results = testing.run_all("raises_in_init", dtypes=(testing.torch.float32,))
    finally:
        registry.unregister("raises_in_init")
    assert set(results) == {f"{c}/float32" for c in testing.CHECKS}
    assert set(results.values()) == {"raises_in_init: RuntimeError: cannot build me"}
    assert "None" in testing.run_all.__doc__ and "unavailable: " in testing.run_all.__doc__
    assert testing.run_all("nope", dtypes=(testing.torch.float32,)) == {f"{c}/float32": None for c in testing.CHECKS}


NEEDS_GPU = textwrap.dedent("""
    from posbench.core.method import PositionMethod
    from posbench.core.registry import register


    @register
    class NeedsGpu(PositionMethod):
        name = "needs_gpu"

        @classmethod
        def unavailable(cls, device, dtype):
            return "needs a GPU"
""")


@pytest.mark.subprocess
def test_check_says_unavailable_with_the_reason(outside):
    # ``check`` runs the checks in a child process (posbench.run.isolated): a plugin says it.
    (outside / "plugins" / "needs_gpu.py").write_text(NEEDS_GPU)
    checked = bench("check", "needs_gpu", "--methods-dir", str(outside / "plugins"), cwd=outside)
    assert checked.returncode == 1  # nothing could be checked here
    out = checked.stdout
    assert "  causal/float32             unavailable: needs a GPU" in out
    assert out.rstrip().endswith(f"0 passed, 0 failed, {2 * len(testing.CHECKS)} unavailable here")


@pytest.mark.subprocess
def test_a_plugin_file_that_does_not_parse_blocks_only_what_uses_it(outside):
    (outside / "plugins" / "broken.py").write_text("def oops(:\n")
    listed = bench("list", "--methods-dir", str(outside / "plugins"), cwd=outside)
    assert listed.returncode == 0 and "mine" in listed.stdout and "alibi" in listed.stdout
    warning = f"warning: method file {outside / 'plugins' / 'broken.py'} skipped: SyntaxError: "
    assert [line for line in listed.stderr.splitlines() if line.startswith("warning")] == [
        line for line in listed.stderr.splitlines() if line.startswith(warning)
    ]
    assert listed.stderr.count("\n") == 1
    valid = bench("validate", "efficiency", cwd=outside, env={registry.METHODS_ENV_PATH: str(outside / "plugins")})
    assert valid.returncode == 0 and valid.stdout.startswith("ok: ") and warning in valid.stderr


@pytest.mark.subprocess
def test_typos_get_did_you_mean(outside):
    suite = bench("--suite", "efficency", "--dry-run", cwd=outside)
    assert suite.returncode == 2
    assert suite.stderr.startswith("SuiteError: no such suite 'efficency' (did you mean 'efficiency'?); allowed: ")
    assert "<file>" not in suite.stderr
    method = bench("--suite", "efficiency", "--methods", "rotray", "--dry-run", cwd=outside)
    assert method.returncode == 2
    assert method.stderr.startswith("SuiteError: --methods: unknown method 'rotray' (did you mean 'rotary'?); ")
    check = bench("check", "mne", "--methods-dir", str(outside / "plugins"), cwd=outside)
    assert check.returncode == 2 and "unknown method 'mne' (did you mean 'mine'?)" in check.stderr
