"""The GPU workflow's decisions, run as the script the workflow runs (.github/scripts/gpu_baseline.py):
no baseline yet, a baseline of the same GPU model compared and carried forward, one of another GPU
model refused, accept_baseline replacing it (an accepted slowdown stops failing later runs), a run
with failed cases never made the baseline, which stored artifact is the baseline, the venv folder outside the workspace keyed by TORCH_SPEC and
pyproject.toml, and the run folder's GPU model."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from posbench.report.compare import compare_runs
from posbench.tasks import find as find_task
from tests.helpers.report_rows import CPU_ENV, GPU_ENV, efficiency_rows, write_run

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / ".github" / "scripts" / "gpu_baseline.py"
H100_ENV = {**GPU_ENV, "nvml": {"name": "NVIDIA H100 80GB HBM3", "driver": "550.54"}}
A100 = "NVIDIA A100-SXM4-80GB"

pytestmark = pytest.mark.subprocess


def script(tmp_path: Path, *args: str, env: dict | None = None) -> tuple[subprocess.CompletedProcess, dict, str]:
    """Run the script as a workflow step does: (the process, its $GITHUB_OUTPUT, its summary)."""
    out, summary = tmp_path / "github_output", tmp_path / "step_summary"
    for f in (out, summary):
        f.write_text("")
    environ = {**os.environ, "GITHUB_OUTPUT": str(out), "GITHUB_STEP_SUMMARY": str(summary), **(env or {})}
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), *args], capture_output=True, text=True, env=environ, timeout=60, cwd=tmp_path
    )
    outputs = dict(line.split("=", 1) for line in out.read_text().splitlines())
    return proc, outputs, summary.read_text()


def gpu_run(root: Path, env=GPU_ENV, scale: float = 1.0, run_id: str = "run-a", failed: bool = False) -> Path:
    """A GPU efficiency run: every case ok or unavailable (a run fit to be a baseline), or with
    ``failed`` the fixture as it is, t5_bias out of memory at 1024 (bench.py exits 3 on it)."""
    rows = efficiency_rows(run_id=run_id, device="cuda:0", scale=scale)
    return write_run(root, rows if failed else [r for r in rows if r["status"] != "oom"], env)


def decide(tmp_path, new: Path, baseline: Path, stage: Path, accept: str = "false", run_id: str = "101"):
    return script(
        tmp_path,
        "decide",
        "--new",
        str(new),
        "--baseline",
        str(baseline),
        "--accept",
        accept,
        "--stage",
        str(stage),
        "--run-id",
        run_id,
        "--commit",
        "0123456789abcdef",
        "--actor",
        "octocat",
    )


def test_no_baseline_yet_makes_this_run_the_baseline(tmp_path):
    run = gpu_run(tmp_path / "new")
    proc, out, summary = decide(tmp_path, run, tmp_path / "baseline", tmp_path / "stage")
    assert proc.returncode == 0, proc.stderr
    assert out["mode"] == "first" and out["compare"] == "false" and out["staged"] == "true"
    assert proc.stdout.strip() == (
        "No baseline for efficiency on NVIDIA A100-SXM4-80GB yet (none stored, or it "
        "expired): run 101 (commit 0123456789) becomes it."
    )
    assert summary.strip() == proc.stdout.strip()
    record = json.loads((tmp_path / "stage" / "baseline.json").read_text())
    assert record["gpu_model"] == A100 and record["suite"] == "efficiency" and record["run_id"] == "101"
    staged = tmp_path / "stage" / "results" / "efficiency" / "run-a"
    assert (staged / "cases.jsonl").read_bytes() == (run / "cases.jsonl").read_bytes()


def test_a_baseline_of_the_same_gpu_model_is_compared_and_carried_forward(tmp_path):
    decide(tmp_path, gpu_run(tmp_path / "first"), tmp_path / "none", tmp_path / "baseline")
    proc, out, summary = decide(
        tmp_path, gpu_run(tmp_path / "second", run_id="run-b"), tmp_path / "baseline", tmp_path / "stage", run_id="102"
    )
    assert proc.returncode == 0, proc.stderr
    assert out["mode"] == "compare" and out["compare"] == "true" and out["fail_on_regression"] == "true"
    assert out["base"] == str(tmp_path / "baseline" / "results")
    assert "Baseline for efficiency on NVIDIA A100-SXM4-80GB: run 101" in summary and "accept_baseline" in summary
    # re-published unchanged: the same record and rows, so the baseline never moves by itself
    for rel in ("baseline.json", "results/efficiency/run-a/cases.jsonl"):
        assert (tmp_path / "stage" / rel).read_bytes() == (tmp_path / "baseline" / rel).read_bytes()
    assert not (tmp_path / "stage" / "results" / "efficiency" / "run-b").exists()
    # a downloaded baseline without its record is bad input, not "no baseline yet"
    (tmp_path / "baseline" / "baseline.json").unlink()
    proc, out, _ = decide(tmp_path, gpu_run(tmp_path / "third", run_id="run-c"), tmp_path / "baseline", tmp_path / "s3")
    assert proc.returncode == 2 and out == {} and "baseline.json: missing" in proc.stderr


def test_a_baseline_of_another_gpu_model_is_refused_unless_accepted(tmp_path):
    decide(tmp_path, gpu_run(tmp_path / "a100"), tmp_path / "none", tmp_path / "baseline")
    h100 = gpu_run(tmp_path / "h100", H100_ENV)
    proc, out, _ = decide(tmp_path, h100, tmp_path / "baseline", tmp_path / "stage")
    assert proc.returncode == 2 and proc.stdout == "" and out == {}
    assert proc.stderr == (
        "gpu_baseline.py decide: the baseline ran on NVIDIA A100-SXM4-80GB, this run on NVIDIA H100 "
        "80GB HBM3: the GPU models differ; a baseline is per suite and GPU model (accept_baseline "
        "replaces it)\n"
    )
    assert not (tmp_path / "stage").exists()
    proc, out, _ = decide(tmp_path, h100, tmp_path / "baseline", tmp_path / "stage", accept="true")
    assert proc.returncode == 0 and out["mode"] == "accept" and out["compare"] == "false"  # nothing comparable
    assert json.loads((tmp_path / "stage" / "baseline.json").read_text())["gpu_model"] == "NVIDIA H100 80GB HBM3"


def test_an_accepted_slowdown_stops_failing_later_runs(tmp_path):
    decide(tmp_path, gpu_run(tmp_path / "week1"), tmp_path / "none", tmp_path / "b1")
    slower = gpu_run(tmp_path / "week2", scale=0.8, run_id="run-b")  # a torch upgrade cost 20%
    proc, out, _ = decide(tmp_path, slower, tmp_path / "b1", tmp_path / "b2-rejected")
    assert out["fail_on_regression"] == "true" and compare_runs(out["base"], slower, find_task=find_task).exit_code == 1  # fails
    # someone accepts it: compared for the record, not judged, and it becomes the baseline
    proc, out, summary = decide(tmp_path, slower, tmp_path / "b1", tmp_path / "b2", accept="true", run_id="202")
    assert proc.returncode == 0, proc.stderr
    assert out["mode"] == "accept" and out["compare"] == "true" and out["fail_on_regression"] == "false"
    assert summary.startswith("Accepted by octocat: run 202 (commit 0123456789) is the new baseline for efficiency")
    assert "shown, not judged" in summary
    record = json.loads((tmp_path / "b2" / "baseline.json").read_text())
    assert record["run_id"] == "202" and record["how"] == "accepted by octocat (accept_baseline)"
    # the next week's run, as slow as the accepted one, passes against it
    week3 = gpu_run(tmp_path / "week3", scale=0.8, run_id="run-c")
    proc, out, _ = decide(tmp_path, week3, tmp_path / "b2", tmp_path / "b3", run_id="303")
    assert out["mode"] == "compare" and compare_runs(out["base"], week3, find_task=find_task).exit_code == 0


def _artifact(id_, name, created, run_id, expired=False):
    return {
        "id": id_,
        "name": name,
        "expired": expired,
        "created_at": created,
        "workflow_run": {"id": run_id, "head_sha": f"sha{run_id}"},
    }


def test_the_baseline_is_the_newest_unexpired_artifact_of_its_exact_name(tmp_path):
    name = "baseline-efficiency-NVIDIA-H100-80GB-HBM3"
    listing = [
        _artifact(1, name, "2026-01-05T03:00:00Z", 11),
        _artifact(2, name, "2026-01-12T03:00:00Z", 12),
        _artifact(3, name, "2026-01-19T03:00:00Z", 13, expired=True),
        _artifact(4, "baseline-efficiency-NVIDIA-A100-SXM4-80GB", "2026-01-26T03:00:00Z", 14),
        _artifact(5, "baseline-decode-NVIDIA-H100-80GB-HBM3", "2026-01-26T03:00:00Z", 15),
    ]
    # as `gh api --paginate --jq '.artifacts[]'` writes it: one object per line
    (tmp_path / "lines.jsonl").write_text("".join(json.dumps(a) + "\n" for a in listing))
    proc, out, _ = script(tmp_path, "pick", "--listing", str(tmp_path / "lines.jsonl"), "--name", name)
    assert proc.returncode == 0, proc.stderr
    assert out == {
        "name": name,
        "artifact_id": "2",
        "run_id": "12",
        "created_at": "2026-01-12T03:00:00Z",
        "commit": "sha12",
        "found": "true",
    }
    # an API page as it comes, pretty-printed
    (tmp_path / "page.json").write_text(json.dumps({"total_count": 5, "artifacts": listing}, indent=2))
    assert script(tmp_path, "pick", "--listing", str(tmp_path / "page.json"), "--name", name)[1]["run_id"] == "12"
    proc, out, _ = script(tmp_path, "pick", "--listing", str(tmp_path / "lines.jsonl"), "--name", "baseline-efficiency-NVIDIA-L4")
    assert proc.returncode == 0 and out == {"found": "false", "name": "baseline-efficiency-NVIDIA-L4"}
    assert proc.stdout.strip() == "no baseline named baseline-efficiency-NVIDIA-L4 (none yet, or expired)"
    (tmp_path / "bad.json").write_text('{"artifacts": [\n')
    proc, _, _ = script(tmp_path, "pick", "--listing", str(tmp_path / "bad.json"), "--name", name)
    assert proc.returncode == 2 and proc.stderr.startswith("gpu_baseline.py pick: artifact listing: not JSON at line")


def test_locate_names_the_run_and_its_gpu_model(tmp_path):
    run = gpu_run(tmp_path / "artifact" / "bench-efficiency-x", H100_ENV)
    proc, out, _ = script(tmp_path, "locate", str(tmp_path / "artifact"))
    assert proc.returncode == 0, proc.stderr
    assert out == {
        "run_dir": str(run),
        "suite": "efficiency",
        "gpu_model": "NVIDIA H100 80GB HBM3",
        "gpu_slug": "NVIDIA-H100-80GB-HBM3",
    }
    write_run(tmp_path / "cpu", efficiency_rows(), CPU_ENV)
    proc, out, _ = script(tmp_path, "locate", str(tmp_path / "cpu"))
    assert proc.returncode == 2 and out == {}
    assert "env.json names no GPU model" in proc.stderr and len(proc.stderr.splitlines()) == 1
    proc, _, _ = script(tmp_path, "locate", str(tmp_path / "missing"))
    assert proc.returncode == 2 and proc.stderr.strip().endswith("missing: no such folder")


def _make_default_spec() -> str:
    plan = subprocess.run(
        ["make", "-n", "-C", str(ROOT), "install", "VENV=/nonexistent/venv"],
        capture_output=True,
        text=True,
        check=True,
        env={k: v for k, v in os.environ.items() if k != "TORCH_SPEC"},
    ).stdout
    return re.search(r'pip install -q "([^"]+)"', plan).group(1)


@pytest.mark.skipif(shutil.which("make") is None, reason="needs make")
def test_the_venv_lives_outside_the_workspace_keyed_by_torch_spec_and_pyproject(tmp_path):
    root, pyproject = tmp_path / "tool-cache", tmp_path / "pyproject.toml"
    pyproject.write_text('[project]\nname = "x"\ndependencies = ["torch"]\n')
    env = {"TORCH_SPEC": ""}

    def venv(*extra, **kw):
        proc, out, _ = script(
            tmp_path,
            "venv-dir",
            "--root",
            str(root),
            "--workspace",
            "/work/ws",
            "--pyproject",
            str(pyproject),
            *extra,
            env={**env, **kw},
        )
        assert proc.returncode == 0, proc.stderr
        return out

    first = venv()
    assert first["torch_spec"] == _make_default_spec()  # what `make install` would install
    assert Path(first["dir"]).parent == root and re.fullmatch(r"venv-[0-9a-f]{16}", Path(first["dir"]).name)
    assert venv()["dir"] == first["dir"] and first["reused"] == "false"
    Path(first["dir"]).mkdir()
    assert venv()["reused"] == "true"
    assert venv(TORCH_SPEC="torch==2.14.1")["dir"] != first["dir"]  # another torch: another venv
    assert venv("--workspace", "/work/other")["dir"] != first["dir"]  # another runner's checkout
    pyproject.write_text(pyproject.read_text() + "# a comment\n")
    assert venv()["dir"] != first["dir"]  # changed dependencies: another venv
    # venvs unused for 30 days go; the one in use, and folders that are not ours, stay
    old, mine = root / "venv-0123456789abcdef", root / "notes"
    for folder in (old, mine):
        folder.mkdir()
        os.utime(folder, (time.time() - 40 * 86400,) * 2)
    os.utime(first["dir"], (time.time() - 40 * 86400,) * 2)
    pyproject.write_text(pyproject.read_text().replace("# a comment\n", ""))
    out = venv()
    assert out["dir"] == first["dir"] and out["pruned"] == "venv-0123456789abcdef"
    assert not old.exists() and mine.exists() and Path(first["dir"]).exists()
    proc, out, _ = script(tmp_path, "venv-dir", "--root", str(root), env={"TORCH_SPEC": "torch==2.13.0'; rm -rf ~"})
    assert proc.returncode == 2 and out == {}
    assert proc.stderr.startswith(
        'gpu_baseline.py venv-dir: TORCH_SPEC "torch==2.13.0\'; rm -rf ~" is not a torch requirement; allowed:'
    )


def test_a_run_with_failed_cases_never_becomes_the_first_baseline(tmp_path):
    run = gpu_run(tmp_path / "new", failed=True)
    for accept in ("false", "true"):  # accept_baseline does not help either
        stage = tmp_path / f"stage-{accept}"
        proc, out, summary = decide(tmp_path, run, tmp_path / "none", stage, accept=accept)
        assert proc.returncode == 0, proc.stderr
        assert out["mode"] == "refused" and out["staged"] == "false" and out["compare"] == "false"
        assert out["failed_cases"] == "1"
        assert not stage.exists()  # nothing to publish: the publish step is skipped
        assert (
            proc.stdout.strip()
            == summary.strip()
            == (
                "Not made the baseline: run 101 (commit 0123456789) has 1 failed case(s) (1 oom). No baseline for "
                "efficiency on NVIDIA A100-SXM4-80GB is published until a run without failed cases. This job fails; "
                "fix the cases (or re-run them with bench.py --retry-failed) and run the workflow again."
            )
        )


@pytest.mark.parametrize("status", ["error", "timeout", "diverged"])
def test_every_failed_status_is_refused_and_unavailable_is_not(tmp_path, status):
    rows = [r for r in efficiency_rows(device="cuda:0") if r["status"] != "oom"]
    rows[1].update(status=status, message="boom", metrics={})
    proc, out, _ = decide(tmp_path, write_run(tmp_path / "new", rows, GPU_ENV), tmp_path / "none", tmp_path / "s")
    assert out["mode"] == "refused" and out["failed_cases"] == "1" and f"(1 {status})" in proc.stdout
    # alibi_triton unavailable on every length: a verdict about the machine, not a failure
    assert sum(r["status"] == "unavailable" for r in rows) == 3
    proc, out, _ = decide(tmp_path, gpu_run(tmp_path / "ok"), tmp_path / "none", tmp_path / "s2")
    assert out["mode"] == "first" and out["failed_cases"] == "0"


def test_a_failed_run_keeps_the_old_baseline_and_is_still_compared(tmp_path):
    decide(tmp_path, gpu_run(tmp_path / "first"), tmp_path / "none", tmp_path / "baseline")
    broken = gpu_run(tmp_path / "second", run_id="run-b", failed=True)
    proc, out, summary = decide(tmp_path, broken, tmp_path / "baseline", tmp_path / "stage", run_id="102")
    assert out["mode"] == "compare" and out["failed_cases"] == "1" and out["fail_on_regression"] == "true"
    assert summary.strip().endswith("This run 102 (commit 0123456789) has 1 failed case(s) (1 oom): this job fails.")
    # accept_baseline on it: refused; the old baseline is re-published unchanged and judged against
    proc, out, summary = decide(tmp_path, broken, tmp_path / "baseline", tmp_path / "stage2", accept="true", run_id="103")
    assert proc.returncode == 0, proc.stderr
    assert out["mode"] == "refused" and out["staged"] == "true" and out["compare"] == "true"
    assert out["fail_on_regression"] == "true" and out["failed_cases"] == "1"
    assert "The baseline for efficiency on NVIDIA A100-SXM4-80GB stays run 101." in summary
    for rel in ("baseline.json", "results/efficiency/run-a/cases.jsonl"):
        assert (tmp_path / "stage2" / rel).read_bytes() == (tmp_path / "baseline" / rel).read_bytes()
    assert not (tmp_path / "stage2" / "results" / "efficiency" / "run-b").exists()


def test_the_staged_baseline_holds_no_checkpoints(tmp_path):
    run = gpu_run(tmp_path / "new")
    (run / "checkpoints").mkdir()
    (run / "checkpoints" / "extrapolation__alibi.pt").write_bytes(b"\0" * 1024)
    proc, out, _ = decide(tmp_path, run, tmp_path / "none", tmp_path / "stage")
    assert out["mode"] == "first", proc.stderr
    staged = tmp_path / "stage" / "results" / "efficiency" / "run-a"
    assert (staged / "cases.jsonl").is_file() and not (staged / "checkpoints").exists()
