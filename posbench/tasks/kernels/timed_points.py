"""The kernels task's variants: ``run_kernel_point`` times forward, backward and forward+backward
of one attention variant at one ``KernelPoint`` (batch, heads, seq_len, head_dim, dtype, device), with
TFLOP/s and peak memory; ``static_reason`` decides availability without running a kernel.
The variants, FLOP counts and timing: docs/tasks/kernels.md.
"""

from __future__ import annotations

import importlib.util
import inspect
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from posbench.core.alibi_math import alibi_bias, slopes_tensor
from posbench.core.method import causal_mask
from posbench.engine.peaks import dense_peak
from posbench.tasks.kernels.kernel_names import TRITON_VARIANTS, VARIANTS

T5_BUCKETS, T5_MAX_DISTANCE = 32, 128

AttentionFn = Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]


class Unavailable(Exception):
    """A variant that cannot run at this point; the message is the reason."""


def attention_flops(batch: int, heads: int, seq_len: int, head_dim: int, causal: bool = True) -> dict[str, float]:
    """FLOPs of one attention call: two matmuls of 2*L*L*d each per (batch, head)."""
    fwd = 4.0 * batch * heads * seq_len**2 * head_dim
    if causal:
        fwd /= 2  # half the score matrix is masked (and skipped by the fused kernels)
    bwd = 2.5 * fwd  # five matmuls instead of two
    return {"fwd": fwd, "bwd": bwd, "fwdbwd": fwd + bwd}


def predicted_bias_bytes(batch: int, heads: int, seq_len: int, dtype: torch.dtype) -> int:
    """Bytes of a materialised (B, H, L, L) bias in ``dtype``: what the fused kernel never stores."""
    return batch * heads * seq_len * seq_len * torch.empty((), dtype=dtype).element_size()


def static_reason(variant: str, device, dtype: torch.dtype, allow_interpreter: bool = False) -> str | None:
    """Why ``variant`` cannot run on ``device`` in ``dtype``, decided without running a kernel."""
    if variant not in VARIANTS:
        raise ValueError(f"unknown kernel variant {variant!r}; known: {', '.join(VARIANTS)}")
    device = torch.device(device)
    if device.type == "cuda" and not torch.cuda.is_available():
        return "CUDA is not available"
    if variant in TRITON_VARIANTS:
        if importlib.util.find_spec("triton") is None:
            return "triton is not installed; the fused kernels need a CUDA GPU and triton"
        from posbench.triton_kernels.checks import INTERPRETED

        if device.type == "cpu":
            if not allow_interpreter:
                return "Triton kernels need a CUDA GPU (the CPU interpreter is too slow to benchmark)"
            if not INTERPRETED:
                return "Triton on CPU needs TRITON_INTERPRET=1 set before import"
        elif device.type != "cuda" or INTERPRETED:
            return f"Triton kernels need a CUDA GPU without TRITON_INTERPRET, got {device}"
        if INTERPRETED and dtype == torch.bfloat16:
            return "bfloat16 is not supported by the Triton interpreter"
    if variant.startswith("flex_"):
        if importlib.util.find_spec("torch.nn.attention.flex_attention") is None:
            return "flex_attention is not in this torch"
        if device.type == "cpu":
            return "FlexAttention does not support backward on CPU"
    if variant == "flash_alibi":
        if importlib.util.find_spec("flash_attn") is None:
            return "flash_attn (FlashAttention-2) is not installed"
        if device.type != "cuda":
            return "FlashAttention-2 needs a CUDA GPU"
        if dtype not in (torch.float16, torch.bfloat16):
            return f"FlashAttention-2 takes float16 or bfloat16, not {str(dtype).removeprefix('torch.')}"
    return None


# ---------------------------------------------------------------------------------------------
# Variants: each returns (forward function of q, k, v, backend name) or raises Unavailable.


def _t5_bucket_function():
    """``relative_position_bucket`` of the registered ``t5_bias`` method: one definition."""
    from posbench.core import registry

    return inspect.getmodule(registry.get("t5_bias")).relative_position_bucket


def triton_tiles(variant: str, q) -> str:
    """The tiles the fused kernels launch ``variant`` with at q's shape, and where they came from
    (the table timed on this GPU, the offline choice, the interpreter's)."""
    from posbench.triton_kernels import tile_configs
    from posbench.triton_kernels.checks import INTERPRETED

    arch = None if INTERPRETED else tile_configs.device_arch(q.device)
    bias = {"alibi_triton": "alibi", "t5_triton": "t5", "triton_no_bias": "none"}[variant]
    return tile_configs.tiles_used(arch, q.dtype, q.shape[-1], bias)


def _triton(variant: str, q, slopes, table) -> tuple[AttentionFn, str]:
    from posbench.triton_kernels.checks import INTERPRETED

    backend = "triton-interpreter" if INTERPRETED else "triton"
    if variant == "t5_triton":
        from posbench.triton_kernels.t5_attention import t5_attention

        return (lambda q, k, v: t5_attention(q, k, v, table)), backend
    from posbench.triton_kernels.alibi_attention import alibi_attention

    use_bias = variant == "alibi_triton"
    return (lambda q, k, v: alibi_attention(q, k, v, slopes, use_bias=use_bias)), backend


def _sdpa_backend(fn: AttentionFn, q, k, v, extra=()) -> tuple[AttentionFn, str]:
    """Wrap ``fn`` in the first SDPA backend (flash, efficient, math) that runs fwd and bwd."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    errors = []
    for backend in (SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH):

        def pinned(q, k, v, backend=backend):
            with sdpa_kernel([backend]):
                return fn(q, k, v)

        try:
            pinned(q, k, v).sum().backward()
        except RuntimeError as exc:
            errors.append(f"{backend.name}: {str(exc).splitlines()[0]}")
            continue
        finally:
            for t in (q, k, v, *extra):
                t.grad = None
        return pinned, backend.name.lower()
    raise Unavailable("no SDPA backend runs this point: " + "; ".join(errors))


def _sdpa_float_bias(q, slopes) -> AttentionFn:
    def fn(q, k, v):
        b, h, tq, _ = q.shape
        tk = k.shape[-2]
        pos = torch.arange(tk, device=q.device)
        bias = alibi_bias(slopes, pos[tk - tq :], pos)  # (H, Tq, Tk) float32
        bias = bias.masked_fill(~causal_mask(tq, tk, q.device), float("-inf"))
        bias = bias.to(q.dtype).expand(b, h, tq, tk).contiguous()  # (B, H, Tq, Tk), materialised
        return F.scaled_dot_product_attention(q, k, v, attn_mask=bias)

    return fn


def _sdpa_t5_bias(q, table) -> AttentionFn:
    bucket = _t5_bucket_function()

    def fn(q, k, v):
        b, h, tq, _ = q.shape
        tk = k.shape[-2]
        pos = torch.arange(tk, device=q.device)
        ids = bucket(pos[tk - tq :, None] - pos[None, :], T5_BUCKETS, T5_MAX_DISTANCE)  # (Tq, Tk)
        bias = table.t()[:, ids]  # (H, Tq, Tk), differentiable in the table
        bias = bias.masked_fill(~causal_mask(tq, tk, q.device), float("-inf"))
        bias = bias.to(q.dtype).expand(b, h, tq, tk).contiguous()  # (B, H, Tq, Tk), materialised
        return F.scaled_dot_product_attention(q, k, v, attn_mask=bias)

    return fn


def flex_score_mod(variant: str, slopes, table):
    """The ``score_mod`` of a flex variant: ALiBi from the slopes (H,); T5's bucket computed from
    the distance inside it (t5_bias's own arithmetic, all elementwise) and one read of the
    (buckets, H) table, which gets a gradient; None for ``flex_no_bias``."""
    if variant == "flex_t5":
        bucket = _t5_bucket_function()

        def score_mod(score, b, h, q_idx, kv_idx):
            return score + table[bucket(q_idx - kv_idx, T5_BUCKETS, T5_MAX_DISTANCE), h].to(torch.float32)

        return score_mod
    if variant == "flex_alibi":

        def score_mod(score, b, h, q_idx, kv_idx):
            return score + slopes[h] * (kv_idx - q_idx).to(torch.float32)

        return score_mod
    return None  # flex_no_bias: FlexAttention's own cost, the floor its biased rows are read against


def _flex(variant: str, q, slopes, table) -> tuple[AttentionFn, str]:
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention

    seq_len = q.shape[-2]
    score_mod = flex_score_mod(variant, slopes, table)

    def causal(b, h, q_idx, kv_idx):
        return q_idx >= kv_idx

    block_mask = create_block_mask(causal, None, None, seq_len, seq_len, device=q.device)
    compiled = torch.compile(flex_attention)
    return (lambda q, k, v: compiled(q, k, v, score_mod=score_mod, block_mask=block_mask)), "flex-compiled"


def _flash_alibi(q, slopes) -> tuple[AttentionFn, str]:
    from flash_attn import flash_attn_func

    def fn(q, k, v):  # flash_attn takes (B, L, H, hd); its ALiBi bias is -slope * |i - j|
        out = flash_attn_func(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), causal=True, alibi_slopes=slopes)
        return out.transpose(1, 2)

    return fn, "flash-attn-2"


def _build(variant: str, q, k, v, slopes, table) -> tuple[AttentionFn, str]:
    if variant in TRITON_VARIANTS:
        return _triton(variant, q, slopes, table)
    if variant == "sdpa_float_bias":
        return _sdpa_backend(_sdpa_float_bias(q, slopes), q, k, v)
    if variant == "sdpa_t5_bias":
        return _sdpa_backend(_sdpa_t5_bias(q, table), q, k, v, extra=(table,))
    if variant == "sdpa_causal":
        return _sdpa_backend(lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True), q, k, v)
    if variant.startswith("flex_"):
        return _flex(variant, q, slopes, table)
    if variant == "flash_alibi":
        return _flash_alibi(q, slopes)
    raise ValueError(f"unknown kernel variant {variant!r}; known: {', '.join(VARIANTS)}")


# ---------------------------------------------------------------------------------------------
# Timing


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


L2_FLUSH_BYTES = 256 << 20  # more than any GPU's L2 (H100: 50 MiB, H200: 60 MiB), so a write evicts it all


def timing_method(device: torch.device) -> str:
    """What ``time_ms`` measures with on ``device``; kernel rows record it (``timing``)."""
    if device.type == "cuda":
        return f"cuda events per rep, L2 flushed before each rep ({L2_FLUSH_BYTES >> 20} MiB write), no CUDA graphs"
    return "time.perf_counter per rep (CPU)"


def time_ms(
    step: Callable[[], None], device: torch.device, warmup: int, reps: int, setup=None, flush=None, events=None
) -> list[float]:
    """Milliseconds of ``step`` per rep after ``warmup`` calls; ``setup`` runs untimed before each.

    CUDA, the way ``triton.testing.do_bench`` times: before each rep, ``setup`` and a write of
    ``L2_FLUSH_BYTES`` (so every rep reads its inputs from memory, as in a model where other
    layers ran in between), then a pair of CUDA events around the step alone; the events are
    read once after the last rep, so the host never waits between reps. No CUDA graph: each rep
    launches its kernels as a training step would. (Own loop rather than ``do_bench``: that
    function counts reps in milliseconds and knows no untimed ``setup``.) CPU: perf_counter.
    ``flush`` and ``events`` replace the L2 write and the event factory (tests, no GPU).
    """
    for _ in range(warmup):
        if setup:
            setup()
        step()
    _sync(device)
    if device.type == "cuda":
        if flush is None:
            cache = torch.empty(L2_FLUSH_BYTES, dtype=torch.int8, device=device)
            flush = cache.zero_
        events = events or (lambda: torch.cuda.Event(enable_timing=True))
        pairs = []
        for _ in range(reps):
            if setup:
                setup()
            flush()
            start, end = events(), events()
            start.record()
            step()
            end.record()
            pairs.append((start, end))
        pairs[-1][1].synchronize()
        return [start.elapsed_time(end) for start, end in pairs]
    times = []
    for _ in range(reps):
        if setup:
            setup()
        t0 = time.perf_counter()
        step()
        times.append((time.perf_counter() - t0) * 1e3)
    return times


def _summary(prefix: str, times: list[float], flops: float, peak: float | None) -> dict[str, float]:
    median = statistics.median(times)
    rate = flops / (median * 1e-3)  # FLOP/s
    row = {
        f"{prefix}_ms": median,
        f"{prefix}_ms_min": min(times),
        f"{prefix}_ms_max": max(times),
        f"{prefix}_tflops": rate / 1e12,
    }
    if peak is not None:
        row[f"{prefix}_peak_fraction"] = rate / peak
    return row


def device_name(device: torch.device) -> str:
    """The name the peak table is keyed by: ``torch.cuda.get_device_name``, else the device type."""
    return torch.cuda.get_device_name(device) if device.type == "cuda" else device.type


def device_peak(device: torch.device, dtype: torch.dtype) -> tuple[str, float | None, str | None]:
    """(device name, its dense peak FLOP/s at ``dtype`` or None, why None). float32 counts as
    TF32 when torch lets float32 matmuls use it."""
    name = device_name(device)
    dtype_name = str(dtype).removeprefix("torch.")
    tf32 = dtype == torch.float32 and torch.backends.cuda.matmul.allow_tf32
    peak = dense_peak(name, dtype_name, tf32=tf32) if device.type == "cuda" else None
    if peak is not None:
        return name, peak, None
    if device.type != "cuda":
        return name, None, f"no dense peak for a {device.type} device: fractions of peak are for known GPUs"
    return name, None, f"unknown device {name!r} at {dtype_name}: no dense peak in posbench/engine/peaks.py"


def _peak_memory(step: Callable[[], None], device: torch.device) -> tuple[int | None, str | None]:
    """Bytes allocated at the peak of one ``step`` above what was allocated before it."""
    if device.type != "cuda":
        return None, f"peak memory is measured on CUDA only (device {device})"
    _sync(device)
    torch.cuda.reset_peak_memory_stats(device)
    before = torch.cuda.memory_allocated(device)
    step()
    _sync(device)
    return torch.cuda.max_memory_allocated(device) - before, None


class PreparedPoint:
    """Inputs and the attention function of one variant at one point, ready to be stepped."""

    def __init__(self, fn: AttentionFn, backend: str, q, k, v, extra=()):
        self.fn, self.backend = fn, backend
        self.q, self.k, self.v = q, k, v  # (B, H, L, hd), requires_grad
        self.extra = tuple(extra)  # other leaves with a gradient (the T5 table)
        self.grad = torch.randn_like(q)
        self._out = None
        self.tiles: str | None = None  # the fused kernels' tiles and their source (triton_tiles)

    def clear_grads(self) -> None:
        for t in (self.q, self.k, self.v, *self.extra):
            t.grad = None

    def forward(self) -> None:
        self._out = self.fn(self.q, self.k, self.v)

    def backward(self) -> None:
        """Backward of the last ``forward``; the graph is kept so it can be timed repeatedly."""
        self._out.backward(self.grad, retain_graph=True)

    def step(self) -> None:
        """One training-style forward + backward."""
        self.fn(self.q, self.k, self.v).backward(self.grad)

    def release(self) -> None:
        self._out = None
        self.clear_grads()


@dataclass(frozen=True)
class KernelPoint:
    """One point of the kernels grid: attention inputs of (batch, heads, seq_len, head_dim) in
    ``dtype`` on ``device``."""

    batch: int
    heads: int
    seq_len: int
    head_dim: int
    dtype: torch.dtype
    device: torch.device | str

    def shape(self) -> dict[str, int]:
        """The four sizes by name, as a row names them."""
        return dict(batch=self.batch, heads=self.heads, seq_len=self.seq_len, head_dim=self.head_dim)


def prepare_point(variant: str, point: KernelPoint, allow_interpreter: bool = False) -> PreparedPoint:
    """Build inputs and the variant's function and run one fwd+bwd; raises Unavailable with a reason."""
    device, dtype, heads = torch.device(point.device), point.dtype, point.heads
    reason = static_reason(variant, device, dtype, allow_interpreter)
    if reason:
        raise Unavailable(reason)

    def tensor():  # (B, H, L, hd)
        return torch.randn(point.batch, heads, point.seq_len, point.head_dim, device=device, dtype=dtype, requires_grad=True)

    q, k, v = tensor(), tensor(), tensor()
    slopes = slopes_tensor(heads, device=device)  # (H,) float32
    # The T5 table as a model holds it: (buckets, H) in the compute dtype, learned (gets a gradient).
    table = (torch.randn(T5_BUCKETS, heads, device=device) * 0.5).to(dtype).requires_grad_()
    fn, backend = _build(variant, q, k, v, slopes, table)
    prepared = PreparedPoint(fn, backend, q, k, v, extra=(table,) if "t5" in variant else ())
    prepared.tiles = triton_tiles(variant, q) if variant in TRITON_VARIANTS else None
    try:
        prepared.step()  # first call outside any timing: compilation, autotuning, late errors
    except (RuntimeError, NotImplementedError) as exc:
        raise Unavailable(f"{backend}: {str(exc).splitlines()[0]}") from exc
    prepared.clear_grads()
    return prepared


def run_kernel_point(
    variant: str, point: KernelPoint, *, warmup: int = 3, reps: int = 10, allow_interpreter: bool = False
) -> dict:
    """Time one variant at one point; a flat dict of metrics, or status "unavailable" and a reason."""
    device, dtype = torch.device(point.device), point.dtype
    row = {
        "variant": variant,
        **point.shape(),
        "dtype": str(dtype).removeprefix("torch."),
        "device": str(device),
        "predicted_bias_bytes": predicted_bias_bytes(point.batch, point.heads, point.seq_len, dtype),
    }
    try:
        prepared = prepare_point(variant, point, allow_interpreter=allow_interpreter)
    except Unavailable as exc:
        return {**row, "status": "unavailable", "reason": str(exc)}
    flops = attention_flops(point.batch, point.heads, point.seq_len, point.head_dim, causal=True)
    name, peak, peak_reason = device_peak(device, dtype)
    row.update(status="ok", backend=prepared.backend, flops_fwd=flops["fwd"], timing=timing_method(device), device_name=name)
    if prepared.tiles:
        row["tiles"] = prepared.tiles
    if peak is not None:
        row["dense_peak_tflops"] = peak / 1e12
    else:
        row["peak_reason"] = peak_reason
    row.update(_summary("fwd", time_ms(prepared.forward, device, warmup, reps, prepared.clear_grads), flops["fwd"], peak))
    prepared.forward()
    row.update(_summary("bwd", time_ms(prepared.backward, device, warmup, reps, prepared.clear_grads), flops["bwd"], peak))
    prepared.release()
    row.update(_summary("fwdbwd", time_ms(prepared.step, device, warmup, reps, prepared.clear_grads), flops["fwdbwd"], peak))
    prepared.clear_grads()
    peak, reason = _peak_memory(prepared.step, device)
    row["peak_mem_bytes"] = peak
    if reason:
        row["peak_mem_reason"] = reason
    return row
