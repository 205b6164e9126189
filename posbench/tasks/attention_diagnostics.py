"""The ``attention_diagnostics`` setting of the extrapolation and retrieval tasks: a few sequences
per L_valid go through one probed forward (``posbench.engine.attention_probe``), and the rows keep,
per L_valid, layer and head, the entropy, its ratio to log of the keys, the first token's mass and
the mass by distance (``series["attention"]``), with their means as metrics. Off by default: a
timed or trained forward is never probed. Guide: docs/long-context-measures.md.
"""

from __future__ import annotations


def diagnostics(model, sequences: dict, L: int) -> list[dict]:
    """``series["attention"]`` of ``sequences`` {L_valid: (n, L_valid) int64 tensor}: per L_valid and
    layer, the statistics per head, distances bucketed as the loss by distance (1-8, ..., L_train, doublings)."""
    from posbench.engine.attention_probe import diagnose
    from posbench.tasks.distances import buckets

    return [dict(entry, L_valid=Lv) for Lv, x in sequences.items() for entry in diagnose(model, x, buckets(L, Lv))]


def attention_metrics(entries: list[dict]) -> dict:
    """``attn_entropy_ratio@<L_valid>`` and ``attn_first_mass@<L_valid>``: the diagnostics averaged
    over layers and heads (and the seeds' entries, when they are tagged)."""
    out, per = {}, {}
    for e in entries:
        one = per.setdefault(e["L_valid"], {"ratio": [], "first": []})
        one["ratio"] += e["entropy_ratio"]
        one["first"] += e["first_mass"]
    for Lv, one in per.items():
        out[f"attn_entropy_ratio@{Lv}"] = sum(one["ratio"]) / len(one["ratio"])
        out[f"attn_first_mass@{Lv}"] = sum(one["first"]) / len(one["first"])
    return out


def attention_declarations(Metric) -> dict:
    """The two metrics' declarations (``Metric``: posbench.core.task.Metric), the same in every task."""
    return {
        "attn_entropy_ratio@*": Metric(
            title="Attention entropy / log(keys)",
            unit="",
            doc="attn_entropy_ratio@<L_valid> (attention_diagnostics): mean attention entropy over the log of each "
            "query's key count (1: uniform attention), averaged over layers and heads; series.attention per head",
            higher_is_better=None,
        ),
        "attn_first_mass@*": Metric(
            title="Attention mass on the first token",
            unit="fraction",
            doc="attn_first_mass@<L_valid>: mean attention probability on position 0, over layers, heads and queries",
            higher_is_better=None,
            shown_in="attn_entropy_ratio@*",
        ),
    }
