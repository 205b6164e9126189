"""Which relative-distance buckets a model never trained: T5's bias at a short L_train.

T5's bias (``t5_bias``, ``t5_triton``: 32 buckets, max distance 128) reads one learned scalar per
head and bucket. Training at L_train sees distances 0 .. L_train - 1 only, so at L_train 64 the
buckets of distances >= 67 (27-31, the clamp bucket 31 included) keep their initial values (std
0.02, about 0), whatever the trained buckets learnt for the distances they cover. The paper (Press et al. 2022) trains at
L_train >= 512, where every bucket is trained. A row records what its method left untrained,
so its table's caption can say so (``caption_note``) instead of blaming T5 for our set-up.
"""
from __future__ import annotations

from typing import Optional


def untrained_buckets(method, L_train: int) -> Optional[dict]:
    """``{"untrained": [bucket ids], "num_buckets": n, "first_distance": d}`` for a method that
    buckets distances (one with ``buckets(q_pos, k_pos)`` and ``num_buckets``): the buckets no
    distance below ``L_train`` reaches, and the shortest distance that reads one (None when every
    bucket is trained). None for every other method."""
    if not (callable(getattr(method, "buckets", None)) and isinstance(getattr(method, "num_buckets", None), int)):
        return None
    import torch

    n = method.num_buckets
    pos = torch.arange(L_train)
    ids = method.buckets(pos[-1:], pos)  # (1, L_train): distances L_train-1 .. 0, every one training sees
    seen = set(ids.flatten().tolist())
    untrained = [b for b in range(n) if b not in seen]
    first = None
    if untrained:
        top = 64 * L_train
        distance = torch.arange(top + 1)  # (top + 1,)
        ids = method.buckets(torch.tensor([top]), top - distance)[0]  # one query at top: keys at distance d
        first = next((d for d, b in enumerate(ids.tolist()) if b not in seen), None)
    return {"untrained": untrained, "num_buckets": n, "first_distance": first}


def caption_note(method: str, L_train, stored) -> str:
    """One sentence for a perplexity table's caption, or "" when the row's method trained every
    bucket (or stored nothing of the kind, or something malformed)."""
    if not isinstance(stored, dict):
        return ""
    untrained, n, first = stored.get("untrained"), stored.get("num_buckets"), stored.get("first_distance")
    if not (isinstance(untrained, list) and untrained and all(_whole(b) for b in untrained) and _whole(n)
            and _whole(first)):
        return ""
    return (f"{method}: {len(untrained)} of its {n} distance buckets (every distance >= {first}) were never "
            f"trained at L_train = {L_train}: beyond L_train far keys read bias values no training touched (their "
            f"initial draw, std 0.02). A limit of this set-up, not of the method: the paper trains at "
            f"L_train >= 512, where every bucket is trained.")


def _whole(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 1 << 40
