"""``make gpu-check``: on a CUDA machine, everything the CPU cannot check about the kernels, in one go.

Runs each step of ``steps`` in its own process, each under its time limit (compiled kernel tests,
conformance, FlexAttention parity, short kernels and efficiency runs, their report and results
page) and writes ``OUT/gpu-check.md``, ``OUT/docs-results/`` and ``OUT/logs/*.log``; exit status 1
if a step failed. What each step covers: docs/kernels.md.

    python -m posbench.triton_kernels.gpu_check --out results/gpu-check [--dry-run]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

CONFORMANCE = """
import torch
from posbench.core import conformance as testing
bad = 0
for method in ("alibi_triton", "t5_triton", "fox_triton"):
    for key, outcome in testing.run_each(method, device="cuda", dtypes=(torch.bfloat16, torch.float32)):
        print(f"{method} {key}: {outcome or 'ok'}", flush=True)  # a timeout still shows what passed
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


FLEX_CHECK = """
import torch
from posbench.triton_kernels.gpu_check import flex_parity
failed = False
for line in flex_parity("cuda", (torch.bfloat16,), backward=True, shapes=((130, 256),)):
    print(line, flush=True)  # a timeout still shows what passed
    failed |= " FAILED" in line
raise SystemExit(1 if failed else 0)
"""

# Every step's time limit, in seconds: the whole check must fit the 8 minutes of the one device
# call a session is lent (../shared/GPU-CHECKLIST.md); tests/triton_kernels/test_gpu_check.py holds the sum.
# Sized from the first H100 run (docs/kernels.md, "make gpu-check"): an efficiency case of the gpu
# profile takes 18-35 s (model build, compile of the flex score_mod, 2 + 5 steps), a kernels point
# 7-16 s at L 2048, and each compiled FlexAttention call 2-4 s, so the flex step checks one dtype.
# The tuning step comes first so that every later step runs the tiles it chose (issue 54).
BUDGET_S = 480
# The tuner stops starting new points after this many seconds; the step's limit leaves room for
# the point under way and the write (a point: 16 candidates, compile-bound, 10-20 s).
TUNE_BUDGET_S = 70
TUNE_BIASES = "alibi,none,t5,row-learned"  # the kernels the suites time; fp16 and the rest when time allows
# The kernels step: posbench's kernels beside the field's best at one point; the materialised-bias
# SDPA rows (seconds per point at L 2048, known slow) are left to the full kernels suite.
KERNEL_VARIANTS = "triton_no_bias,alibi_triton,t5_triton,sdpa_causal,flex_no_bias,flex_alibi,flex_t5"


EFFICIENCY_METHODS = "nope,t5_bias,t5_triton,alibi,alibi_triton,kerple_log"


def steps(py: str, results: Path, report: Path, page: Path) -> list[tuple[str, list[str], int]]:
    """(name, command, time limit in s) of every step."""
    bench = [py, "bench.py"]
    return [
        ("devices", ["sh", "-c", f"nvidia-smi; {py} -c '{VERSIONS}'"], 10),
        (
            "tune",
            [
                py,
                "-m",
                "posbench.triton_kernels.tune",
                "--budget-s",
                str(TUNE_BUDGET_S),
                "--dtypes",
                "bfloat16",
                "--biases",
                TUNE_BIASES,
            ],
            100,
        ),
        (
            "kernel-tests",
            [
                py,
                "-m",
                "pytest",
                "-q",
                "-x",
                "-p",
                "no:cacheprovider",
                "-m",
                "not slow",
                "tests/triton_kernels/test_alibi_attention.py",
                "tests/triton_kernels/test_t5_attention.py",
                "tests/triton_kernels/test_kernels.py",
                "tests/triton_kernels/test_distance_rows.py",
            ],
            60,
        ),
        ("conformance", [py, "-c", CONFORMANCE], 40),
        ("flex", [py, "-c", FLEX_CHECK], 30),
        (
            "kernels",
            bench
            + [
                "run",
                "--suite",
                "kernels",
                "--profile",
                "gpu",
                "--device",
                "cuda",
                "--fresh",
                "--results",
                str(results),
                "--methods",
                KERNEL_VARIANTS,
                "--set",
                "grid.seq_len=[2048]",
                "--set",
                "grid.head_dim=[64]",
                "--set",
                "reps=10",
                "--set",
                "timeout_s=30",
                "--quiet",
            ],
            80,
        ),
        # nope (the floor), the learned and the fixed bias each through FlexAttention and through
        # its fused Triton kernel, and one method that only FlexAttention serves, at one length
        (
            "efficiency",
            bench
            + [
                "run",
                "--suite",
                "efficiency",
                "--profile",
                "gpu",
                "--device",
                "cuda",
                "--fresh",
                "--results",
                str(results),
                "--methods",
                EFFICIENCY_METHODS,
                "--set",
                "grid.seq_len=[1024]",
                "--set",
                "warmup_steps=2",
                "--set",
                "measure_steps=5",
                "--set",
                "windows=1",
                "--set",
                "timeout_s=40",
                "--quiet",
            ],
            130,
        ),
        ("report", bench + ["report", str(results), "--out", str(report)], 15),
        ("results-page", [py, "-m", "posbench.cli.docs_results", "--out", str(page), str(results)], 15),
    ]


def flex_parity(device: str, dtypes=("float32",), backward: bool = False, shapes=((256, 256), (130, 256))) -> Iterator[str]:
    """Every bias method's attention through ``FlexRoute`` against the masked-bias reference at
    each (Tq, Tk) of ``shapes``: the output, and with ``backward`` the gradients of q, k, v and
    of the method's parameters. Yields one line per method, dtype, shape and check, as each is done."""
    import torch

    from posbench.attention import routes
    from posbench.attention.bias import BiasMethod
    from posbench.core import registry
    from posbench.core.method import ModelConfig

    tol = {torch.float32: 2e-5, torch.bfloat16: 3e-2, torch.float16: 3e-3}
    for name, cls in sorted(registry.discover().items()):
        if not issubclass(cls, BiasMethod):
            continue
        for dtype in (getattr(torch, d) if isinstance(d, str) else d for d in dtypes):
            torch.manual_seed(0)
            method = cls(ModelConfig(d_model=64, n_heads=4, method=name)).to(device)
            for tq, tk in shapes:
                q_pos, k_pos = torch.arange(tk - tq, tk, device=device), torch.arange(tk, device=device)
                q, k, v = (torch.randn(2, 4, t, 16, device=device, dtype=dtype, requires_grad=backward) for t in (tq, tk, tk))
                form = method.bias_form(dtype)
                with torch.set_grad_enabled(backward):
                    out = routes.FlexRoute(method, form, q_pos, k_pos, dtype).attend(q, k, v)
                    ref = routes.attend(q, k, v, method.masked_bias(q_pos, k_pos, dtype))
                err = (out.float() - ref.float()).abs().max().item()
                what = [("out", err)]
                if backward:
                    inputs = [q, k, v, *(p for p in method.parameters() if p.requires_grad)]
                    grad = torch.randn_like(out)
                    got = torch.autograd.grad(out, inputs, grad, allow_unused=True)
                    want = torch.autograd.grad(ref, inputs, grad, allow_unused=True)
                    what += [
                        (f"grad{i}", (a.float() - b.float()).abs().max().item())
                        for i, (a, b) in enumerate(zip(got, want))
                        if a is not None and b is not None
                    ]
                for check, e in what:
                    ok = e <= tol[dtype] * (1 + 10 * (check != "out"))
                    yield (
                        f"{name} {str(dtype).removeprefix('torch.')} Tq={tq} Tk={tk} {check}: {e:.2e}{'' if ok else ' FAILED'}"
                    )


def run(out: Path, py: str, only: set[str] | None = None) -> int:
    logs = out / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    env = {
        **os.environ,
        "TRITON_INTERPRET": "0",
        "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
    }
    lines = ["# gpu-check", "", "| step | status | seconds | log |", "|---|---|---|---|"]
    failed = 0
    for name, cmd, limit in steps(py, out / "results", out / "report", out / "docs-results"):
        if only is not None and name not in only:
            continue
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
    # the tuner's notes and where it wrote the table (posbench/triton_kernels/tuned/sm<NN>.json: commit it)
    lines += ["", "## Tiles timed on this GPU", "", "```", *_log_lines(logs / "tune.log")[-30:], "```"]
    tests = _log_lines(logs / "kernel-tests.log")
    lines += ["", "## kernel tests (compiled)", "", *(tests[-1:] or ["(no output)"])]
    lines += ["", "## Conformance of the fused kernels' methods", "", "```", *_log_lines(logs / "conformance.log")[-60:], "```"]
    lines += [
        "",
        "## FlexAttention against the masked bias (forward and backward)",
        "",
        "```",
        *_log_lines(logs / "flex.log")[-80:],
        "```",
    ]
    (out / "gpu-check.md").write_text("\n".join(lines) + "\n")
    print(f"report: {out / 'gpu-check.md'}")
    return 1 if failed else 0


def _log_lines(log: Path) -> list[str]:
    return log.read_text().strip().splitlines() if log.exists() else ["(step not run)"]


def plan(out: Path, py: str) -> list[str]:
    """The dry run: every step with its time limit and command, then ``total: N s``."""
    rows = steps(py, out / "results", out / "report", out / "docs-results")
    lines = [f"{name:<13} {limit:>4} s  {' '.join(' '.join(cmd).split())[:150]}" for name, cmd, limit in rows]
    return lines + [f"total: {sum(limit for _, _, limit in rows)} s (budget {BUDGET_S} s)"]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description="kernel checks that need a CUDA GPU")
    parser.add_argument("--out", type=Path, default=ROOT / "results" / "gpu-check")
    parser.add_argument("--python", default=sys.executable)
    parser.add_argument("--dry-run", action="store_true", help="print the steps and their time limits; run nothing")
    parser.add_argument("--steps", help="a comma list of the steps to run (a re-run of what failed); default all")
    args = parser.parse_args(argv)
    names = [name for name, _, _ in steps(args.python, args.out, args.out, args.out)]
    only = set(args.steps.split(",")) if args.steps else None
    if only is not None and not only <= set(names):
        parser.error(f"unknown step(s) {sorted(only - set(names))}; allowed: {', '.join(names)}")
    if args.dry_run:
        print(*plan(args.out, args.python), sep="\n")
        return 0
    import torch

    if not torch.cuda.is_available():
        print("gpu-check needs a CUDA GPU (torch.cuda.is_available() is False)", file=sys.stderr)
        return 2
    return run(args.out, args.python, only)


if __name__ == "__main__":
    sys.exit(main())
