"""One lengthgen case: per training seed, a model trained on lengths 1..L_train (``answers``) and
the exact match of its answers at each test length n, pooled into the case's metrics."""

from __future__ import annotations

from posbench.protocols.seeds import combine_accuracy_seeds, seed_list
from posbench.report.learn_first import learned
from posbench.report.stats import accuracy_metrics, pooled_counts

# torch, the model and training (posbench.tasks.lengthgen.answers) are imported inside run():
# validating or listing suites imports this module, and must not wait for them.


def beyond(counts: dict, L: int) -> tuple[int, int, bool]:
    """(correct, total, usable) pooled over every length n > L of ``pooled_counts``; usable when
    there is such a length, every one of its cells is ok and it holds outcomes."""
    over = [counts[n] for n in counts if n > L]
    k, total = sum(b[0] for b in over), sum(b[1] for b in over)
    return k, total, bool(over) and total > 0 and all(b[2] for b in over)


def summarize(cells: list[dict], L: int, threshold: float) -> dict:
    """Per-length metrics from cells (counts pooled over cells of one length): acc@n with its
    Wilson interval, acc_at_train_len, acc_beyond (pooled over n > L), acc_at_max_len and the
    learnt flag. A length with a failed cell has no accuracy."""
    counts = pooled_counts(cells, "n")
    metrics, acc = accuracy_metrics(counts)
    k, total, ok = beyond(counts, L)
    metrics["acc_beyond"] = k / total if ok else None
    metrics["acc_at_train_len"] = acc.get(L)
    metrics["acc_at_max_len"] = acc[max(acc)] if acc else None
    over = [c for c in cells if c["n"] > L and c["status"] == "ok" and c.get("token_total")]
    hits, total = sum(c["token_correct"] for c in over), sum(c["token_total"] for c in over)
    metrics["token_acc_beyond"] = hits / total if total and len(over) == sum(c["n"] > L for c in cells) else None
    verdict = learned(acc.get(L), threshold)
    metrics["learned"] = None if verdict is None else int(verdict)
    return metrics


def run(case) -> dict:
    import torch

    from posbench.data import algorithmic as A
    from posbench.tasks.lengthgen.answers import eval_length, train_model

    s, L = case.settings, case.params.L_train
    task = A.get(case.params.task)
    seeds = seed_list(s)
    per_seed, cells = [], []
    for seed in seeds:  # one model per training seed; every seed scores the same examples
        model, metrics = train_model(case, s, task, seed)
        eval_dtype = getattr(torch, s.eval_dtype)
        info = model.info(case.device, eval_dtype)
        model = model.to(eval_dtype).eval()
        mine = [eval_length(model, task, n, s, case.device) for n in s.test_lengths(L)]
        metrics.update(summarize(mine, L, s.learned_threshold))
        per_seed.append(metrics)
        cells += [dict(c, seed=seed) for c in mine] if len(seeds) > 1 else mine
    metrics, seed_series = combine_accuracy_seeds(per_seed, summarize(cells, L, s.learned_threshold), s.learned_threshold)
    metrics["chance_at_train_len"] = task.chance(L)
    series = {
        "cells": cells,
        "learned_threshold": s.learned_threshold,
        "source": task.source,
        "format": "BOS input SEP answer; loss on the answer; exact match of the whole answer",
        **seed_series,
    }
    return {"metrics": metrics, "series": series, "info": info}
