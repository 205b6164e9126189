"""Kernel benchmark: unit tests of posbench.tasks.kernels.timed_points, and the ``alibi-kernels`` benchmark group.

The benchmarks use the pytest-benchmark ``benchmark`` fixture, so the normal run skips them
(pyproject's addopts has --benchmark-skip); ``make kernels-bench`` runs only them. On a CPU they
time the SDPA variants at a small size and skip the Triton and flex rows with the reason.
"""

from __future__ import annotations

import importlib.util

import pytest
import torch

from posbench.tasks.kernels import timed_points as kb

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
        variant, kb.KernelPoint(batch=1, heads=2, seq_len=32, head_dim=32, dtype=torch.float32, device="cpu"), warmup=0, reps=2
    )
    assert row["variant"] == variant and row["predicted_bias_bytes"] == 32 * 32 * 2 * 4
    if row["status"] == "unavailable":
        assert row["reason"] and "\n" not in row["reason"]
        assert variant not in kb.TRITON_VARIANTS or "CUDA GPU" in row["reason"]
        assert row["reason"] == kb.static_reason(variant, "cpu", torch.float32)
        return
    assert row["status"] == "ok" and row["backend"]
    for key in TIMING_KEYS:
        assert row[key] > 0, key
    assert row["fwd_ms_min"] <= row["fwd_ms"] <= row["fwd_ms_max"]
    assert row["peak_mem_bytes"] is None and "CUDA" in row["peak_mem_reason"]


def test_sdpa_rows_run_on_cpu_and_unknown_variant_is_an_error():
    row = kb.run_kernel_point(
        "sdpa_float_bias",
        kb.KernelPoint(batch=1, heads=2, seq_len=16, head_dim=32, dtype=torch.float32, device="cpu"),
        warmup=0,
        reps=1,
    )
    assert row["status"] == "ok", row
    with pytest.raises(ValueError, match="unknown kernel variant 'nope'"):
        kb.run_kernel_point("nope", kb.KernelPoint(batch=1, heads=1, seq_len=8, head_dim=32, dtype=torch.float32, device="cpu"))


@pytest.mark.parametrize("variant", ["alibi_triton", "t5_triton"])
def test_triton_row_runs_under_the_interpreter_when_allowed(variant):
    from posbench.triton_kernels import alibi_attention as ka

    if not ka.INTERPRETED:
        pytest.skip("needs TRITON_INTERPRET=1 (set by conftest)")
    row = kb.run_kernel_point(
        variant,
        kb.KernelPoint(batch=1, heads=2, seq_len=32, head_dim=32, dtype=torch.float32, device="cpu"),
        warmup=0,
        reps=1,
        allow_interpreter=True,
    )
    assert row["status"] == "ok" and row["backend"] == "triton-interpreter"
    assert row["tiles"] == "fwd m32n32w1s1 (interpreter), dkdv m32n32w1s1 (interpreter), dq m32n32w1s1 (interpreter)"


def test_static_reasons_name_what_is_missing():
    reason = kb.static_reason
    assert "CUDA GPU" in reason("t5_triton", "cpu", torch.float32)
    assert reason("flex_t5", "cpu", torch.float32) == "FlexAttention does not support backward on CPU"
    assert reason("sdpa_t5_bias", "cpu", torch.float32) is None
    if importlib.util.find_spec("flash_attn") is None:
        assert reason("flash_alibi", "cpu", torch.float16) == "flash_attn (FlashAttention-2) is not installed"
    if not torch.cuda.is_available():
        assert reason("sdpa_causal", "cuda", torch.float16) == "CUDA is not available"
    with pytest.raises(ValueError, match="unknown kernel variant 'nope'"):
        reason("nope", "cpu", torch.float32)


def test_sdpa_t5_bias_variant_equals_the_fused_t5_kernel():
    """The materialised-T5 baseline computes the same attention (and table gradient) as t5_triton."""
    from posbench.triton_kernels import t5_attention as kt

    if not kt.INTERPRETED:
        pytest.skip("needs TRITON_INTERPRET=1 (set by conftest)")
    torch.manual_seed(0)
    q, k, v = (torch.randn(1, 2, 136, 32) for _ in range(3))
    values = torch.randn(32, 2)  # (buckets, H)
    outs, grads = [], []
    for attend in (lambda t: kb._sdpa_t5_bias(q, t)(q, k, v), lambda t: kt.t5_attention(q, k, v, t)):
        table = values.clone().requires_grad_()
        out = attend(table)
        out.sum().backward()
        outs.append(out.detach())
        grads.append(table.grad)
    assert (outs[0] - outs[1]).abs().max() < 1e-5 and (grads[0] - grads[1]).abs().max() < 1e-4


def _case(method: str, **settings):
    from posbench.core.case import CaseSpec

    base = dict(batch=1, heads=2, dtype="float32", warmup=0, reps=1, allow_interpreter=False)
    return CaseSpec(
        suite="kernels",
        task="kernels",
        method=method,
        params={"seq_len": 16, "head_dim": 32},
        settings={**base, **settings},
        device="cpu",
        profile="cpu",
        run_id="t",
    )


def test_kernels_task_decides_availability_without_running_a_kernel(monkeypatch):
    from posbench.tasks.kernels.run import unavailable

    def no_kernels(*args, **kwargs):
        raise AssertionError("the pre-worker probe ran a kernel")

    monkeypatch.setattr(kb, "prepare_point", no_kernels)
    assert "CUDA GPU" in unavailable(_case("t5_triton"))
    assert unavailable(_case("sdpa_t5_bias")) is None


def test_unavailable_found_in_the_worker_is_an_unavailable_row(monkeypatch):
    """A variant that turns out not to run (found by trying, in the worker) is a row with status
    unavailable and the reason, not an error."""
    from posbench.run import worker

    def refuse(*args, **kwargs):
        raise kb.Unavailable("no SDPA backend runs this point: MATH: nope")

    monkeypatch.setattr(kb, "prepare_point", refuse)
    raw = _case("sdpa_causal").to_json()
    result = worker.run_case(raw, limit_memory=False)
    assert result["status"] == "unavailable", result
    assert result["message"] == "no SDPA backend runs this point: MATH: nope"


# ---------------------------------------------------------------------------------------------
# The benchmark group (skipped unless --benchmark-only / --benchmark-enable)

# Small on a CPU so a run stays quick; a GPU gets a size where the bias matters.
SIZE = (
    dict(batch=4, heads=16, seq_len=2048, head_dim=64) if DEVICE == "cuda" else dict(batch=1, heads=4, seq_len=256, head_dim=32)
)
DTYPE = torch.float16 if DEVICE == "cuda" else torch.float32


@pytest.mark.parametrize("variant", kb.VARIANTS)
def test_alibi_kernels(benchmark, variant):
    benchmark.group = "alibi-kernels"  # the name predates the T5 variants; kept for stored results
    try:
        point = kb.prepare_point(variant, kb.KernelPoint(**SIZE, dtype=DTYPE, device=DEVICE))
    except kb.Unavailable as exc:
        pytest.skip(f"{variant} unavailable on {DEVICE}: {exc}")

    def step():
        point.step()
        point.clear_grads()
        if DEVICE == "cuda":
            torch.cuda.synchronize()  # pytest-benchmark times on the host

    flops = kb.attention_flops(**SIZE)
    benchmark.extra_info.update(
        variant=variant,
        backend=point.backend,
        device=DEVICE,
        dtype=str(DTYPE),
        **SIZE,
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
    times = kb.time_ms(
        lambda: log.append("step"),
        cuda,
        warmup=1,
        reps=2,
        setup=lambda: log.append("setup"),
        flush=lambda: log.append("flush"),
        events=FakeEvent,
    )
    assert log == [
        "setup",
        "step",
        "device-sync",
        "setup",
        "flush",
        "record",
        "step",
        "record",
        "setup",
        "flush",
        "record",
        "step",
        "record",
        "sync",
    ]
    assert times == [2.0, 2.0]  # start, step, end: the flush and setup fall outside the events
    assert "L2 flushed before each rep" in kb.timing_method(cuda) and "no CUDA graphs" in kb.timing_method(cuda)
    row = kb.run_kernel_point(
        "sdpa_causal",
        kb.KernelPoint(batch=1, heads=2, seq_len=16, head_dim=32, dtype=torch.float32, device="cpu"),
        warmup=0,
        reps=1,
    )
    assert row["timing"] == "time.perf_counter per rep (CPU)"


# ---------------------------------------------------------------------------------------------
# Share of the device's dense peak, and the FlexAttention rows (issue 54)


def test_a_known_gpu_gives_each_timing_its_share_of_the_dense_peak(monkeypatch):
    """The CUDA name through a fake at the boundary: H100 SXM bf16 is 989.4 TFLOP/s dense, so
    494.7 TFLOP/s is half of it; an unknown GPU and a CPU get no fraction and say why."""
    monkeypatch.setattr(kb, "device_name", lambda device: "NVIDIA H100 80GB HBM3")
    name, peak, reason = kb.device_peak(torch.device("cuda"), torch.bfloat16)
    assert (name, peak, reason) == ("NVIDIA H100 80GB HBM3", pytest.approx(989.4e12), None)
    row = kb._summary("fwd", [2.0, 1.0, 3.0], flops=494.7e12 * 2e-3, peak=peak)  # median 2 ms
    assert row["fwd_tflops"] == pytest.approx(494.7) and row["fwd_peak_fraction"] == pytest.approx(0.5)
    assert "fwd_peak_fraction" not in kb._summary("fwd", [1.0], flops=1e9, peak=None)

    monkeypatch.setattr(kb, "device_name", lambda device: "NVIDIA Future GPU")
    _, peak, reason = kb.device_peak(torch.device("cuda"), torch.bfloat16)
    assert peak is None and reason == "unknown device 'NVIDIA Future GPU' at bfloat16: no dense peak in posbench/engine/peaks.py"


def test_a_cpu_row_names_its_device_and_why_it_has_no_share_of_peak():
    row = kb.run_kernel_point(
        "sdpa_causal",
        kb.KernelPoint(batch=1, heads=2, seq_len=16, head_dim=32, dtype=torch.float32, device="cpu"),
        warmup=0,
        reps=1,
    )
    assert row["device_name"] == "cpu" and "no dense peak for a cpu device" in row["peak_reason"]
    assert not any(key.endswith("_peak_fraction") for key in row)


@pytest.mark.parametrize("variant", ["flex_t5", "flex_alibi", "flex_no_bias"])
def test_flex_score_mods_equal_the_materialised_biases(variant):
    """The flex rows' score_mods, run by FlexAttention's eager forward on the CPU (no backward
    there), against SDPA with the same bias materialised: T5's bucket is computed from the
    distance inside the score_mod and reads the (buckets, H) table; distances reach the last bucket."""
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention

    torch.manual_seed(3)
    q, k, v = (torch.randn(1, 2, 160, 32) for _ in range(3))
    slopes, table = kb.slopes_tensor(2), torch.randn(32, 2)
    mask = create_block_mask(lambda b, h, i, j: i >= j, None, None, 160, 160, device="cpu")
    out = flex_attention(q, k, v, score_mod=kb.flex_score_mod(variant, slopes, table), block_mask=mask)
    reference = {
        "flex_t5": kb._sdpa_t5_bias(q, table),
        "flex_alibi": kb._sdpa_float_bias(q, slopes),
        "flex_no_bias": lambda q, k, v: torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True),
    }[variant](q, k, v)
    assert (out - reference).abs().max() < 1e-5
