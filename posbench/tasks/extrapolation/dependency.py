"""Loss by dependency distance (the ``by_distance`` setting): on a synthetic-copy corpus every
token's copy distance is known (``Corpus.copy_distances``), so the perplexity of the copied tokens
is reported per distance bucket (1-8, 9-64, ... up to L_train, then each doubling beyond it), and
of the tokens that copy nothing, each beside the true source's perplexity on the same tokens.

The model reads non-overlapping windows of L_valid tokens and every position but each window's
first is scored, as in the non-overlapping evaluation. A copy whose source lies before its window
(d > the position in the window) is out of reach for any model of that window: it is counted apart
("outside the window"), never in a distance bucket. The source's bound is its loss given the whole
stream (``Corpus.oracle_token_loss``), so near a window's start it may sit below what the window allows.
"""

from __future__ import annotations

import math

import numpy as np

from posbench.tasks.distances import buckets, label

NO_COPY = "no copy"
OUTSIDE = "outside the window"
BEYOND = "beyond L_train"


def classify(distance: np.ndarray, position: np.ndarray, ranges: list[tuple[int, int]]) -> np.ndarray:
    """(N,) object array of class labels: a bucket's label, ``NO_COPY`` (d = 0) or ``OUTSIDE`` (d > position)."""
    out = np.full(distance.shape, OUTSIDE, dtype=object)
    out[distance == 0] = NO_COPY
    for lo, hi in ranges:
        out[(distance >= lo) & (distance <= hi) & (distance <= position)] = label(lo, hi)
    return out


def window_losses(model, tokens: np.ndarray, Lv: int, n_windows: int, batch_size: int, device) -> np.ndarray:
    """(n_windows, Lv - 1) float64 cross-entropy of positions 1..Lv-1 of each non-overlapping window
    of ``tokens``, each window read alone from its first token."""
    import torch

    out = []
    with torch.no_grad():
        for w in range(0, n_windows, batch_size):
            k = min(batch_size, n_windows - w)
            x = torch.from_numpy(np.asarray(tokens[w * Lv : (w + k) * Lv], dtype=np.int64).reshape(k, Lv)).to(device)
            logits = model(x[:, :-1]).float()  # (k, Lv - 1, V)
            loss = torch.nn.functional.cross_entropy(logits.transpose(1, 2), x[:, 1:], reduction="none")  # (k, Lv - 1)
            out.append(loss.double().cpu().numpy())
    return np.concatenate(out) if out else np.zeros((0, Lv - 1))


def summarize(loss: np.ndarray, bound: np.ndarray, distance: np.ndarray, Lv: int, L_train: int, longest: int) -> list[dict]:
    """Entries of ``series["by_distance"]`` at one L_valid: per class (each bucket, beyond L_train
    pooled, no copy, outside the window) the scored tokens, the model's mean loss and perplexity and
    the source's. ``loss`` (W, Lv - 1) from ``window_losses``; ``bound``/``distance`` (N,) over the stream."""
    W = loss.shape[0]
    index = (np.arange(W)[:, None] * Lv + np.arange(1, Lv)[None, :]).ravel()  # stream index of each scored token
    position = np.tile(np.arange(1, Lv), W)
    ranges = buckets(L_train, longest)
    cls = classify(distance[index], position, ranges)
    model_loss, source_loss = loss.ravel(), bound[index]
    beyond = (distance[index] > L_train) & (distance[index] <= position)
    groups = [(label(lo, hi), cls == label(lo, hi), lo, hi) for lo, hi in ranges]
    groups += [(BEYOND, beyond, L_train + 1, Lv - 1), (NO_COPY, cls == NO_COPY, 0, 0), (OUTSIDE, cls == OUTSIDE, None, None)]
    entries = []
    for name, mask, lo, hi in groups:
        mask = mask & np.isfinite(source_loss)  # the stream's first token has no bound
        n = int(mask.sum())
        mean, source = (float(model_loss[mask].mean()), float(source_loss[mask].mean())) if n else (None, None)
        entries.append(
            {
                "L_valid": Lv,
                "bucket": name,
                "lo": lo,
                "hi": hi,
                "tokens": n,
                "loss": mean,
                "ppl": None if mean is None else math.exp(mean),
                "bound_loss": source,
                "bound_ppl": None if source is None else math.exp(source),
            }
        )
    return entries


def combine(per_seed: list[list[dict]]) -> list[dict]:
    """One list of entries from each seed's (the same tokens): the mean loss over seeds, its
    perplexity, and ``ppl_by_seed``."""
    out = []
    for entries in zip(*per_seed):
        losses = [e["loss"] for e in entries]
        mean = None if any(v is None for v in losses) else sum(losses) / len(losses)
        out.append(
            dict(
                entries[0],
                loss=mean,
                ppl=None if mean is None else math.exp(mean),
                ppl_by_seed=[e["ppl"] for e in entries],
            )
        )
    return out


def far_metrics(entries: list[dict]) -> dict:
    """``ppl_far@<L_valid>`` and ``bound_far@<L_valid>``: the copies from beyond L_train inside the window."""
    out = {}
    for e in entries:
        if e["bucket"] == BEYOND and e["tokens"]:
            out[f"ppl_far@{e['L_valid']}"] = e["ppl"]
            out[f"bound_far@{e['L_valid']}"] = e["bound_ppl"]
    return out
