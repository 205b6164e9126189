"""What the fused-kernel tests share: a fresh seed per test, the ids of their shape cases, and the
rules of when a fused-kernel method is unavailable."""

from __future__ import annotations

import os

import torch


def fresh_seed() -> int:
    """Seed torch with fresh random bits and return them, for the failure message (to replay it)."""
    seed = int.from_bytes(os.urandom(4), "little")
    torch.manual_seed(seed)
    return seed


def case_id(case) -> str:
    """(B, H, Tq, Tk, head_dim, dtype) -> "B1H3-q17k17-d32-float16"."""
    b, h, tq, tk, d, dtype = case
    return f"B{b}H{h}-q{tq}k{tk}-d{d}-{str(dtype).removeprefix('torch.')}"


def assert_fused_unavailable_rules(cls, monkeypatch) -> None:
    """A fused-kernel method runs on CPU tensors under TRITON_INTERPRET=1 (not in bfloat16), else
    needs CUDA and triton: each refusal one line."""
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    assert cls.unavailable("cpu", torch.float32) is None
    assert cls.unavailable("cpu", torch.bfloat16) == "bfloat16 is not supported by the Triton interpreter"
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    assert cls.unavailable("cpu", torch.float32) == "needs a CUDA GPU and triton"
    monkeypatch.setitem(__import__("sys").modules, "triton", None)  # import triton -> ImportError
    assert cls.unavailable("cuda", torch.float16) == "needs a CUDA GPU and triton"
