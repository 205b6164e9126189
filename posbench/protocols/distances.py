"""Distance buckets shared by the loss by dependency distance (extrapolation) and the attention
diagnostics (extrapolation, retrieval): 1-8, 9-64, ... by factors of 8 up to L_train, then each
doubling beyond it, so "beyond L_train" always starts a bucket."""

from __future__ import annotations


def buckets(L_train: int, longest: int) -> list[tuple[int, int]]:
    """Inclusive distance ranges: 1-8, 9-64, ... (powers of 8 below L_train), up to L_train, then
    (L_train, 2 L_train], ... doubling up to ``longest``."""
    edges, e = [], 8
    while e < L_train:
        edges.append(e)
        e *= 8
    edges.append(L_train)
    while edges[-1] < longest - 1:  # the longest in-window distance is L_valid - 1
        edges.append(2 * edges[-1])
    return [(1 if i == 0 else edges[i - 1] + 1, hi) for i, hi in enumerate(edges)]


def label(lo: int, hi: int) -> str:
    return f"{lo}-{hi}"
