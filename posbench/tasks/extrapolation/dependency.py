"""Loss by dependency distance (the ``by_distance`` setting): on a synthetic-copy corpus every
token's copy distance is known (``Corpus.copy_distances``), so the perplexity of the copied tokens
is reported per distance bucket (1-8, 9-64, ... up to L_train, then each doubling beyond it), and
of the tokens that copy nothing, each beside the true source's perplexity on the same tokens.

Each copy class also gets its **copy gain**: how much of the source's advantage on those tokens the
model realises, ``(loss_out - loss) / (loss_out - bound)``, where ``loss_out`` is the model's own
loss on the copies it cannot see (``OUTSIDE``, same L_valid): 0 is a model that ignores the copy,
1 one that uses it as the source does. The gain on the copies within L_train at L_valid = L_train
is the learn-first gate of the loss-by-distance tables (``LEARNT_GAIN``); the gain on the copies
from beyond L_train answers "does the method use a copy it was never trained to reach?".

The model reads non-overlapping windows of L_valid tokens and every position but each window's
first is scored, as in the non-overlapping evaluation. A copy whose source lies before its window
(d > the position in the window) is out of reach for any model of that window: it is counted apart
("outside the window"), never in a distance bucket. The source's bound is its loss given the whole
stream (``Corpus.oracle_token_loss``), so near a window's start it may sit below what the window allows.
"""

from __future__ import annotations

import math

import numpy as np

from posbench.protocols.distances import buckets, label

NO_COPY = "no copy"
OUTSIDE = "outside the window"
BEYOND = "beyond L_train"
WITHIN = "within L_train"
# A model has learnt to copy when it realises at least half of the source's gain on the copies it
# was trained to reach (within L_train, at L_valid = L_train): below that, what it does with far
# copies says little about position.
LEARNT_GAIN = 0.5
POSITION_BINS = 16  # equal bins of window position for the position-matched reference


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
    d = distance[index]
    within = (d >= 1) & (d <= L_train) & (d <= position)
    beyond = (d > L_train) & (d <= position)
    groups = [(label(lo, hi), cls == label(lo, hi), lo, hi) for lo, hi in ranges]
    groups += [(WITHIN, within, 1, L_train), (BEYOND, beyond, L_train + 1, Lv - 1)]
    groups += [(NO_COPY, cls == NO_COPY, 0, 0), (OUTSIDE, cls == OUTSIDE, None, None)]
    reference = outside_by_position(model_loss, position, (cls == OUTSIDE) & np.isfinite(source_loss), Lv)  # (N,)
    entries = []
    for name, mask, lo, hi in groups:
        mask = mask & np.isfinite(source_loss)  # the stream's first token has no bound
        n = int(mask.sum())
        mean, source = (float(model_loss[mask].mean()), float(source_loss[mask].mean())) if n else (None, None)
        copies = name not in (NO_COPY, OUTSIDE)
        covered = mask & np.isfinite(reference) if copies else np.zeros_like(mask)
        m = int(covered.sum())
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
                # the position-matched gain's means, over the tokens whose position bin holds outside copies
                "matched_tokens": m,
                "matched_loss": float(model_loss[covered].mean()) if m else None,
                "matched_bound": float(source_loss[covered].mean()) if m else None,
                "matched_ref": float(reference[covered].mean()) if m else None,
            }
        )
    return with_gains(entries)


def outside_by_position(loss: np.ndarray, position: np.ndarray, outside: np.ndarray, Lv: int) -> np.ndarray:
    """(N,) the mean loss of the outside-the-window copies in each token's bin of window position
    (``POSITION_BINS`` equal bins of positions 1..Lv-1), NaN where its bin holds none: the
    position-matched reference of the copy gain."""
    bins = np.minimum((position - 1) * POSITION_BINS // max(1, Lv - 1), POSITION_BINS - 1)  # (N,)
    total = np.bincount(bins[outside], weights=loss[outside], minlength=POSITION_BINS)
    count = np.bincount(bins[outside], minlength=POSITION_BINS)
    with np.errstate(invalid="ignore", divide="ignore"):
        mean = np.where(count > 0, total / np.maximum(count, 1), np.nan)  # (POSITION_BINS,)
    return mean[bins]


def with_gains(entries: list[dict]) -> list[dict]:
    """``entries`` (of one or several L_valid) with ``gain`` on every copy class (None where there is
    no reference: no scored copy outside the window, or a bound not below it), and ``gain_matched``
    where the entry carries the position-matched means (entries stored before them get None)."""
    out_loss = {e["L_valid"]: e["loss"] for e in entries if e["bucket"] == OUTSIDE}
    for e in entries:
        copies = e["bucket"] not in (NO_COPY, OUTSIDE)
        e["gain"] = _gain(out_loss.get(e["L_valid"]), e["loss"], e["bound_loss"]) if copies else None
        e["gain_matched"] = _gain(e.get("matched_ref"), e.get("matched_loss"), e.get("matched_bound")) if copies else None
    return entries


def _gain(ref, loss, bound) -> float | None:
    """(ref - loss) / (ref - bound); None without a value or with the bound not below the reference."""
    if None in (ref, loss, bound) or ref - bound <= 0:
        return None
    return (ref - loss) / (ref - bound)


def combine(per_seed: list[list[dict]]) -> list[dict]:
    """One list of entries from each seed's (the same tokens): the mean loss over seeds, its
    perplexity, and ``ppl_by_seed``."""
    out = []
    for entries in zip(*per_seed):
        mean = _mean([e["loss"] for e in entries])
        out.append(
            dict(
                entries[0],
                loss=mean,
                ppl=None if mean is None else math.exp(mean),
                ppl_by_seed=[e["ppl"] for e in entries],
                gain_by_seed=[e.get("gain") for e in entries],
                # the matched means depend on the model too (the bound does not): their mean over seeds
                matched_loss=_mean([e.get("matched_loss") for e in entries]),
                matched_ref=_mean([e.get("matched_ref") for e in entries]),
                gain_matched_by_seed=[e.get("gain_matched") for e in entries],
            )
        )
    return with_gains(out)


def _mean(values: list) -> float | None:
    return None if any(v is None for v in values) else sum(values) / len(values)


def far_metrics(entries: list[dict]) -> dict:
    """``ppl_far@<L_valid>``, ``bound_far@<L_valid>``, ``copy_gain_far@<L_valid>`` and
    ``copy_gain_far_matched@<L_valid>``: the copies from beyond L_train inside the window;
    ``copy_gain_within`` (and ``copy_gain_within_matched``): the gain on the copies within L_train at
    L_valid = L_train, and ``copies_learnt`` (1/0) whether the unmatched one reaches ``LEARNT_GAIN``."""
    out = {}
    for e in entries:
        if e["bucket"] == BEYOND and e["tokens"]:
            out[f"ppl_far@{e['L_valid']}"] = e["ppl"]
            out[f"bound_far@{e['L_valid']}"] = e["bound_ppl"]
            out[f"copy_gain_far@{e['L_valid']}"] = e.get("gain")
            if e.get("gain_matched") is not None:
                out[f"copy_gain_far_matched@{e['L_valid']}"] = e["gain_matched"]
        if e["bucket"] == WITHIN and e["L_valid"] == e["hi"] and e.get("gain") is not None:
            out["copy_gain_within"] = e["gain"]
            out["copies_learnt"] = int(e["gain"] >= LEARNT_GAIN)
        if e["bucket"] == WITHIN and e["L_valid"] == e["hi"] and e.get("gain_matched") is not None:
            out["copy_gain_within_matched"] = e["gain_matched"]
    return out
