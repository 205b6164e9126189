"""Which relative-distance buckets of T5's bias a model trained at a short L_train never saw, so a
table's caption can say so (``caption_note``). Why it matters: docs/tasks/extrapolation.md.
"""

from __future__ import annotations


def untrained_buckets(method, L_train: int) -> dict | None:
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
    if not (isinstance(untrained, list) and untrained and all(_whole(b) for b in untrained) and _whole(n) and _whole(first)):
        return ""
    return (
        f"{method}: {len(untrained)} of its {n} distance buckets (every distance >= {first}) were never "
        f"trained at L_train = {L_train}: beyond L_train far keys read bias values no training touched (their "
        f"initial draw, std 0.02). Measured, they are not why it degrades on the extrapolation suite's "
        f"cpu profile: trained with every bucket reached (max_distance 32) it degraded as much "
        f"(docs/tasks/extrapolation.md). The paper trains at L_train >= 512, where every bucket is trained."
    )


def _whole(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 1 << 40
