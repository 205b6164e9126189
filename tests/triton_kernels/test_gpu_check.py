"""``make gpu-check`` (posbench/triton_kernels/gpu_check.py): its plan fits the eight minutes of one device
call, its dry run works on any machine, and its FlexAttention check holds every bias method to the
masked reference (forward here; forward and backward on CUDA)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from posbench.attention.bias import BiasMethod
from posbench.core import registry
from posbench.triton_kernels import gpu_check

ROOT = Path(__file__).resolve().parents[2]


def test_the_dry_run_prints_every_step_with_its_limit_and_a_total_within_eight_minutes(capsys, tmp_path):
    assert gpu_check.main(["--dry-run", "--out", str(tmp_path)]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    names = [name for name, _, _ in gpu_check.steps("python", tmp_path, tmp_path, tmp_path)]
    assert [line.split()[0] for line in lines[:-1]] == names
    assert {"kernel-tests", "conformance", "flex", "kernels", "efficiency", "report", "results-page"} <= set(names)
    total = int(lines[-1].split()[1])
    assert lines[-1].startswith("total: ") and total == sum(
        limit for _, _, limit in gpu_check.steps("p", tmp_path, tmp_path, tmp_path)
    )
    assert total <= 480 and gpu_check.BUDGET_S == 480
    assert not any(tmp_path.iterdir())  # a dry run writes nothing


def test_the_efficiency_step_runs_the_floor_each_bias_through_flex_and_triton_and_a_flex_only_method(tmp_path):
    (cmd,) = [c for name, c, _ in gpu_check.steps("python", tmp_path, tmp_path, tmp_path) if name == "efficiency"]
    methods = cmd[cmd.index("--methods") + 1].split(",")
    assert {"nope", "t5_bias", "t5_triton", "alibi", "alibi_triton", "kerple_log"} <= set(methods)
    assert methods[0] == "nope"  # the floor the ratios read against
    assert "grid.seq_len=[1024]" in cmd and "--allow-failures" not in cmd  # a failed case fails the step


def test_steps_runs_only_the_named_steps_and_an_unknown_name_is_one_line(tmp_path, monkeypatch, capsys):
    ran = []
    monkeypatch.setattr(gpu_check.subprocess, "run", lambda cmd, **kw: ran.append(cmd) or subprocess.CompletedProcess(cmd, 0))
    assert gpu_check.run(tmp_path, "python", {"conformance", "report"}) == 0
    assert [cmd[2] for cmd in ran] == [gpu_check.CONFORMANCE, "report"]
    page = (tmp_path / "gpu-check.md").read_text()
    assert "| conformance | ok |" in page and "| kernel-tests |" not in page and "(step not run)" in page
    with pytest.raises(SystemExit):
        gpu_check.main(["--steps", "conformance,nope", "--out", str(tmp_path)])
    assert "unknown step(s) ['nope']; allowed: devices, tune, kernel-tests" in capsys.readouterr().err


@pytest.mark.subprocess
def test_make_gpu_check_dry_1_prints_the_plan(tmp_path):
    out = subprocess.run(
        ["make", "-s", "gpu-check", "DRY=1", f"GPU_CHECK_PYTHON={sys.executable}", f"GPU_CHECK_OUT={tmp_path}"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().splitlines()[-1] == "total: 480 s (budget 480 s)"


def test_without_cuda_the_check_says_so_in_one_line(capsys, tmp_path):
    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA: the real check would run")
    assert gpu_check.main(["--out", str(tmp_path)]) == 2
    assert capsys.readouterr().err.strip() == "gpu-check needs a CUDA GPU (torch.cuda.is_available() is False)"


def test_the_flex_check_covers_every_bias_method_and_passes_forward_on_this_cpu():
    lines = list(gpu_check.flex_parity("cpu", ("float32",), backward=False))
    bias = sorted(n for n, c in registry.discover().items() if issubclass(c, BiasMethod))
    assert sorted({line.split()[0] for line in lines}) == bias and len(lines) == 2 * len(bias)
    assert not [line for line in lines if "FAILED" in line], lines


def test_the_tune_step_runs_first_within_its_limit_and_the_kernels_step_times_the_field(tmp_path):
    """Issue 54: the tuner writes the table every later step reads, stopping new points with time
    to spare in its limit; the kernels step times posbench's kernels beside SDPA and FlexAttention."""
    from posbench.tasks.kernels.kernel_names import VARIANTS
    from posbench.triton_kernels import tune

    rows = {name: (cmd, limit) for name, cmd, limit in gpu_check.steps("python", tmp_path, tmp_path, tmp_path)}
    assert list(rows)[:2] == ["devices", "tune"]
    cmd, limit = rows["tune"]
    assert cmd[cmd.index("--budget-s") + 1] == str(gpu_check.TUNE_BUDGET_S) and gpu_check.TUNE_BUDGET_S + 25 <= limit
    assert set(cmd[cmd.index("--biases") + 1].split(",")) <= set(tune.BIASES) and "--out" not in cmd  # the package's table
    cmd, _ = rows["kernels"]
    variants = set(cmd[cmd.index("--methods") + 1].split(","))
    assert {"sdpa_causal", "flex_no_bias", "flex_alibi", "flex_t5", "alibi_triton", "t5_triton", "triton_no_bias"} == variants
    assert variants <= set(VARIANTS)


def test_the_page_quotes_the_tuners_output(tmp_path, monkeypatch):
    def fake(cmd, stdout=None, **kw):
        stdout.write("42 configs -> posbench/triton_kernels/tuned/sm90.json\n")
        return subprocess.CompletedProcess(cmd, 0)

    monkeypatch.setattr(gpu_check.subprocess, "run", fake)
    assert gpu_check.run(tmp_path, "python", {"tune"}) == 0
    page = (tmp_path / "gpu-check.md").read_text()
    assert "## Tiles timed on this GPU\n\n```\n42 configs -> posbench/triton_kernels/tuned/sm90.json\n```" in page
