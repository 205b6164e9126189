"""Kernel benchmark: unit tests of posbench.kernel_bench, and the ``alibi-kernels`` benchmark group.

The benchmarks use the pytest-benchmark ``benchmark`` fixture, so the normal run skips them
(pyproject's addopts has --benchmark-skip); ``make kernels-bench`` runs only them. On a CPU they
time the SDPA variants at a small size and skip the Triton and flex rows with the reason.
"""
from __future__ import annotations

import pytest
import torch

from posbench import kernel_bench as kb

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
TIMING_KEYS = [f"{p}_{s}" for p in ("fwd", "bwd", "fwdbwd") for s in ("ms", "ms_min", "ms_max", "tflops")]


def test_flop_formula():
    f = kb.attention_flops(2, 3, 100, 64, causal=False)
    assert f["fwd"] == 4 * 2 * 3 * 100**2 * 64
    causal = kb.attention_flops(2, 3, 100, 64)
    assert causal["fwd"] == f["fwd"] / 2
    assert causal["bwd"] == 2.5 * causal["fwd"] and causal["fwdbwd"] == 3.5 * causal["fwd"]
    assert kb.predicted_bias_bytes(2, 3, 100, torch.float16) == 2 * 3 * 100 * 100 * 2


@pytest.mark.parametrize("variant", kb.VARIANTS)
def test_every_variant_gives_metrics_or_a_reason_on_cpu(variant):
    row = kb.run_kernel_point(
        variant, batch=1, heads=2, seq_len=32, head_dim=32, dtype=torch.float32, device="cpu", warmup=0, reps=2
    )
    assert row["variant"] == variant and row["predicted_bias_bytes"] == 32 * 32 * 2 * 4
    if row["status"] == "unavailable":
        assert row["reason"] and "\n" not in row["reason"]
        assert not variant.startswith(("alibi_triton", "triton")) or "CUDA GPU" in row["reason"]
        return
    assert row["status"] == "ok" and row["backend"]
    for key in TIMING_KEYS:
        assert row[key] > 0, key
    assert row["fwd_ms_min"] <= row["fwd_ms"] <= row["fwd_ms_max"]
    assert row["peak_mem_bytes"] is None and "CUDA" in row["peak_mem_reason"]


def test_sdpa_rows_run_on_cpu_and_unknown_variant_is_an_error():
    row = kb.run_kernel_point(
        "sdpa_float_bias", batch=1, heads=2, seq_len=16, head_dim=32, dtype=torch.float32, device="cpu",
        warmup=0, reps=1,
    )
    assert row["status"] == "ok", row
    with pytest.raises(ValueError, match="unknown kernel variant 'nope'"):
        kb.run_kernel_point("nope", batch=1, heads=1, seq_len=8, head_dim=32, dtype=torch.float32, device="cpu")


def test_triton_row_runs_under_the_interpreter_when_allowed():
    from posbench.kernels import alibi_attention as ka

    if not ka.INTERPRETED:
        pytest.skip("needs TRITON_INTERPRET=1 (set by conftest)")
    row = kb.run_kernel_point(
        "alibi_triton", batch=1, heads=2, seq_len=32, head_dim=32, dtype=torch.float32, device="cpu",
        warmup=0, reps=1, allow_interpreter=True,
    )
    assert row["status"] == "ok" and row["backend"] == "triton-interpreter"


# ---------------------------------------------------------------------------------------------
# The benchmark group (skipped unless --benchmark-only / --benchmark-enable)

# Small on a CPU so a run stays quick; a GPU gets a size where the bias matters.
SIZE = dict(batch=4, heads=16, seq_len=2048, head_dim=64) if DEVICE == "cuda" else dict(
    batch=1, heads=4, seq_len=256, head_dim=32
)
DTYPE = torch.float16 if DEVICE == "cuda" else torch.float32


@pytest.mark.parametrize("variant", kb.VARIANTS)
def test_alibi_kernels(benchmark, variant):
    benchmark.group = "alibi-kernels"
    try:
        point = kb.prepare_point(variant, **SIZE, dtype=DTYPE, device=DEVICE)
    except kb.Unavailable as exc:
        pytest.skip(f"{variant} unavailable on {DEVICE}: {exc}")

    def step():
        point.step()
        point.clear_grads()
        if DEVICE == "cuda":
            torch.cuda.synchronize()  # pytest-benchmark times on the host

    flops = kb.attention_flops(**SIZE)
    benchmark.extra_info.update(
        variant=variant, backend=point.backend, device=DEVICE, dtype=str(DTYPE), **SIZE,
        flops_fwdbwd=flops["fwdbwd"],
        predicted_bias_bytes=kb.predicted_bias_bytes(SIZE["batch"], SIZE["heads"], SIZE["seq_len"], DTYPE),
    )
    benchmark.pedantic(step, rounds=5 if DEVICE == "cpu" else 20, warmup_rounds=1)


def test_cuda_timing_flushes_l2_before_each_rep_and_reads_events_once(monkeypatch):
    """The CUDA path with fakes at the boundary (no GPU here): untimed setup, then the L2 flush,
    then events around the step alone; one synchronize after the last rep; the row says how."""
    log = []

    class FakeEvent:
        def __init__(self):
            self.t = None

        def record(self):
            self.t = len(log)
            log.append("record")

        def synchronize(self):
            log.append("sync")

        def elapsed_time(self, end):
            return float(end.t - self.t)  # "ms": the number of log entries between the events

    monkeypatch.setattr(kb, "_sync", lambda device: log.append("device-sync"))
    cuda = torch.device("cuda")  # only its .type is read on this path
    times = kb.time_ms(lambda: log.append("step"), cuda, warmup=1, reps=2, setup=lambda: log.append("setup"),
                       flush=lambda: log.append("flush"), events=FakeEvent)
    assert log == ["setup", "step", "device-sync",
                   "setup", "flush", "record", "step", "record",
                   "setup", "flush", "record", "step", "record", "sync"]
    assert times == [2.0, 2.0]  # start, step, end: the flush and setup fall outside the events
    assert "L2 flushed before each rep" in kb.timing_method(cuda) and "no CUDA graphs" in kb.timing_method(cuda)
    row = kb.run_kernel_point("sdpa_causal", batch=1, heads=2, seq_len=16, head_dim=32, dtype=torch.float32,
                              device="cpu", warmup=0, reps=1)
    assert row["timing"] == "time.perf_counter per rep (CPU)"
