"""What the fused-kernel tests share: a fresh seed per test, and the ids of their shape cases."""
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
