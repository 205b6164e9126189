"""Fused attention kernels (Triton), and what the methods that run them share.

Importing this package imports torch but not triton: the kernels' modules import it.
"""

from __future__ import annotations

import os

import torch

from posbench.core.method import PositionMethod


def interpreter_on() -> bool:
    """Whether Triton kernels run under the interpreter (numpy on CPU tensors)."""
    return os.environ.get("TRITON_INTERPRET", "") == "1"


class FusedKernelMethod(PositionMethod):
    """Base of the methods whose ``attend`` is one fused Triton kernel (alibi_triton, t5_triton)."""

    grouped_kv = True  # the kernels read key/value head h // (H / Hkv) in place: no expanded copy

    def _pos_scale(self, k_pos: torch.Tensor) -> float:
        """Spacing of the positions: 1 for integers, else read from their ends (one host sync)."""
        if not k_pos.is_floating_point() or k_pos.numel() < 2:
            return 1.0
        return float((k_pos[-1] - k_pos[0]).item()) / (k_pos.numel() - 1)

    def prepare(self, q_pos, k_pos, dtype) -> float:
        return self._pos_scale(k_pos)  # the kernel's position spacing, shared by every layer

    @classmethod
    def unavailable(cls, device, dtype):
        try:
            import triton  # noqa: F401
        except ImportError:
            return "needs a CUDA GPU and triton"
        device_type = torch.device(device).type
        if interpreter_on():
            if device_type != "cpu":
                return "TRITON_INTERPRET=1 runs Triton kernels on CPU tensors only"
            if dtype == torch.bfloat16:
                return "bfloat16 is not supported by the Triton interpreter"
            return None
        if device_type != "cuda" or not torch.cuda.is_available():
            return "needs a CUDA GPU and triton"
        return None
