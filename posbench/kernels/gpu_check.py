"""``make gpu-check``: on a CUDA machine, everything the CPU cannot check about the kernels, in one go.

Runs each step of ``steps`` in its own process (compiled kernel tests, conformance, short kernels
and efficiency runs, their report) and writes ``OUT/gpu-check.md`` and ``OUT/logs/*.log``; exit
status 1 if a step failed. What each step covers: docs/kernels.md.

    python -m posbench.kernels.gpu_check --out results/gpu-check
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

CONFORMANCE = """
import torch
from posbench.core import conformance as testing
bad = 0
for method in ("alibi_triton", "t5_triton"):
    for key, outcome in testing.run_all(method, device="cuda", dtypes=(torch.float32, torch.bfloat16)).items():
        print(f"{method} {key}: {outcome or 'ok'}")
        bad += bool(outcome) and not outcome.startswith("unavailable")
raise SystemExit(1 if bad else 0)
"""

VERSIONS = """
import importlib.util, torch, triton
print("torch", torch.__version__, "cuda", torch.version.cuda, "triton", triton.__version__)
print("device", torch.cuda.get_device_name(0), "capability", torch.cuda.get_device_capability(0))
spec = importlib.util.find_spec("flash_attn")
print("flash_attn", __import__("flash_attn").__version__ if spec else "not installed")
"""


def steps(py: str, results: Path, report: Path) -> list[tuple[str, list[str], int]]:
    """(name, command, time limit in s) of every step."""
    bench = [py, "bench.py"]
    return [
        ("devices", ["sh", "-c", f"nvidia-smi; {py} -c '{VERSIONS}'"], 60),
        ("kernel-tests", [py, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", "-m", "not slow", "tests/kernels/test_alibi_triton.py",
                          "tests/kernels/test_t5_triton.py", "tests/tasks/test_kernel_benchmark.py"], 150),
        ("conformance", [py, "-c", CONFORMANCE], 90),
        ("kernels", bench + ["run", "--suite", "kernels", "--profile", "gpu", "--device", "cuda", "--fresh",
                             "--results", str(results), "--set", "grid.seq_len=[2048, 8192]",
                             "--set", "grid.head_dim=[64]", "--set", "reps=10", "--set", "timeout_s=120", "--quiet"], 240),
        ("efficiency", bench + ["run", "--suite", "efficiency", "--profile", "gpu", "--device", "cuda", "--fresh",
                                "--results", str(results), "--methods", "sinusoidal,t5_bias,t5_triton,alibi,alibi_triton",
                                "--set", "grid.seq_len=[1024]", "--set", "warmup_steps=2", "--set", "measure_steps=5",
                                "--set", "windows=1", "--set", "timeout_s=120", "--quiet"], 180),
        ("report", bench + ["report", str(results), "--out", str(report)], 60),
    ]


def run(out: Path, py: str) -> int:
    logs = out / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "TRITON_INTERPRET": "0", "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    lines = ["# gpu-check", "", "| step | status | seconds | log |", "|---|---|---|---|"]
    failed = 0
    for name, cmd, limit in steps(py, out / "results", out / "report"):
        t0 = time.perf_counter()
        log = logs / f"{name}.log"
        with open(log, "w") as fh:
            try:
                code = subprocess.run(cmd, cwd=ROOT, env=env, stdout=fh, stderr=subprocess.STDOUT, timeout=limit).returncode
                status = "ok" if code == 0 else f"failed (exit {code})"
            except subprocess.TimeoutExpired:
                code, status = 1, f"timeout after {limit} s"
        failed += code != 0
        lines.append(f"| {name} | {status} | {time.perf_counter() - t0:.0f} | logs/{name}.log |")
        print(lines[-1], flush=True)
    for table in sorted((out / "results").glob("*/*/table.md")):
        lines += ["", f"## {table.parent.parent.name} ({table.parent.name})", "", table.read_text()]
    tests = (logs / "kernel-tests.log").read_text().strip().splitlines()
    lines += ["", "## kernel tests (compiled)", "", *(tests[-1:] or ["(no output)"])]
    (out / "gpu-check.md").write_text("\n".join(lines) + "\n")
    print(f"report: {out / 'gpu-check.md'}")
    return 1 if failed else 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description="kernel checks that need a CUDA GPU")
    parser.add_argument("--out", type=Path, default=ROOT / "results" / "gpu-check")
    parser.add_argument("--python", default=sys.executable)
    args = parser.parse_args(argv)
    import torch

    if not torch.cuda.is_available():
        print("gpu-check needs a CUDA GPU (torch.cuda.is_available() is False)", file=sys.stderr)
        return 2
    return run(args.out, args.python)


if __name__ == "__main__":
    sys.exit(main())
