"""What the fused kernels take, and one-line errors for what they cannot: the head dims and dtypes,
q, k, v shapes (grouped-query attention included), the per-key bias, the device and dtype this
build of the kernels runs (compiled for CUDA, or interpreted on CPU tensors).

``INTERPRETED`` is read when this module is imported, as ``triton.jit`` decides at decoration time
whether to compile or interpret: set ``TRITON_INTERPRET=1`` before importing any kernel module.
"""

from __future__ import annotations

import torch
import triton

# True when the kernels were built by the interpreter (TRITON_INTERPRET=1 at import).
INTERPRETED = bool(triton.knobs.runtime.interpret)

HEAD_DIMS = (32, 64, 128)
DTYPES = (torch.float16, torch.bfloat16, torch.float32)


def check_key_bias(name: str, q, k, key_bias) -> None:
    """One-line errors for a per-key bias the kernels cannot take: (B, H, Tk), float, q's device."""
    if not isinstance(key_bias, torch.Tensor):
        raise TypeError(f"{name}: key_bias must be a torch.Tensor, got {type(key_bias).__name__}")
    want = (q.shape[0], q.shape[1], k.shape[2])
    if tuple(key_bias.shape) != want:
        raise ValueError(f"{name}: key_bias must have shape {want} (batch, query heads, keys), got {tuple(key_bias.shape)}")
    if not key_bias.is_floating_point():
        raise TypeError(f"{name}: key_bias must be a float tensor, got {key_bias.dtype}")
    if key_bias.device != q.device:
        raise ValueError(f"{name}: key_bias must be on q's device {q.device}, got {key_bias.device}")


def check_device(name: str, q: torch.Tensor) -> None:
    """One-line errors for a device or dtype this build of the kernels cannot run."""
    if q.device.type == "cuda" and INTERPRETED:
        raise RuntimeError(f"{name}: CUDA tensors given but TRITON_INTERPRET=1 was set when the kernels were built")
    if q.device.type == "cpu" and not INTERPRETED:
        raise RuntimeError(f"{name}: CPU tensors need TRITON_INTERPRET=1 set before import; use a CUDA device")
    if q.device.type not in ("cpu", "cuda"):
        raise RuntimeError(f"{name}: device {q.device} not supported; use a CUDA device")
    if INTERPRETED and q.dtype == torch.bfloat16:
        raise TypeError(f"{name}: bfloat16 is not supported by the Triton interpreter")


def check_qkv(name: str, q, k, v) -> None:
    """One-line errors for q, k, v the kernels cannot take."""
    for label, t in (("q", q), ("k", k), ("v", v)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name}: {label} must be a torch.Tensor, got {type(t).__name__}")
        if t.dim() != 4:
            raise ValueError(f"{name}: {label} must be (B, H, T, head_dim), got shape {tuple(t.shape)}")
    if q.dtype not in DTYPES:
        raise TypeError(f"{name}: dtype {q.dtype} not supported; use float16, bfloat16 or float32")
    if k.dtype != q.dtype or v.dtype != q.dtype:
        raise TypeError(f"{name}: q, k, v must share one dtype, got {q.dtype}, {k.dtype}, {v.dtype}")
    b, h, tq, d = q.shape
    if d not in HEAD_DIMS:
        raise ValueError(f"{name}: head_dim {d} not supported; use one of {', '.join(map(str, HEAD_DIMS))}")
    if k.shape != v.shape or k.shape[0] != b or k.shape[1] < 1 or h % k.shape[1] or k.shape[3] != d:
        raise ValueError(
            f"{name}: k and v must be (B, Hkv, Tk, head_dim) = ({b}, Hkv, Tk, {d}) with Hkv dividing H = {h}, "
            f"got k {tuple(k.shape)} and v {tuple(v.shape)}"
        )
    tk = k.shape[2]
    if tq < 1 or tq > tk:
        raise ValueError(f"{name}: need 1 <= query length <= key length, got Tq={tq}, Tk={tk}")
