"""Retrieval accuracy from stored rows alone, what the report's tables and charts read: the rows'
well-formed outcome counts, pooled over depths, seeds and runs, with their Wilson intervals, the
effective length and learn first (docs/tasks/retrieval.md)."""

from __future__ import annotations

from posbench.report.learn_first import learned, learned_over_seeds
from posbench.report.stats import effective_length, seed_interval, wilson_interval
from posbench.tasks.retrieval.summaries import DEFAULT_RELATIVE_THRESHOLD, relative_effective_length, weighted_average

MAX_COUNT = 1 << 53  # samples in one cell: beyond this a count is no count anyone ran
DEFAULT_LEARNED_THRESHOLD = 0.9  # the task's Settings default: rows written before the rule carry none


def learned_threshold(rows) -> float:
    """The ``learned_threshold`` the rows were run with (the highest, if they differ)."""
    found = [r["series"].get("learned_threshold") for r in rows if isinstance(r.get("series"), dict)]
    found = [t for t in found if _fraction(t)]
    return max(found) if found else DEFAULT_LEARNED_THRESHOLD


def relative_threshold(rows) -> float:
    """The ``relative_threshold`` the rows were run with (the highest, if they differ)."""
    found = [r["series"].get("relative_threshold") for r in rows if isinstance(r.get("series"), dict)]
    found = [t for t in found if _fraction(t) and t > 0]
    return max(found) if found else DEFAULT_RELATIVE_THRESHOLD


def scoring_rules(rows) -> list[str]:
    """The scoring rules the rows' answers were counted with (``series["scoring"]``; rows written
    before the rules existed, and the probes that are always scored so, count ``exact``), in order."""
    found = [r["series"].get("scoring") if isinstance(r.get("series"), dict) else None for r in rows]
    return list(dict.fromkeys(rule if isinstance(rule, str) else "exact" for rule in found))


def ruler_summaries(acc: dict, L: int, factor: float) -> dict:
    """RULER's summaries of one curve {L_valid: accuracy}: wavg_long, wavg_short, effective_length_rel."""
    return {
        "wavg_long": weighted_average(acc, "long"),
        "wavg_short": weighted_average(acc, "short"),
        "effective_length_rel": relative_effective_length(acc, L, factor),
    }


def whole(value, low: int = 0) -> bool:
    """Whether ``value`` is a whole number in [low, MAX_COUNT] (a bool is none)."""
    return isinstance(value, int) and not isinstance(value, bool) and low <= value <= MAX_COUNT


def cells(row) -> list[dict]:
    """The well-formed entries of a stored row's ``series["cells"]``: ``L_valid`` a positive whole
    number, ``depth`` a number in [0, 1] or null (probes without a needle), ``0 <= correct <= total``
    whole numbers, ``status`` a string. A stored file may hold anything; an entry of another shape
    is left out."""
    series = row.get("series") if isinstance(row.get("series"), dict) else {}
    stored = series.get("cells")
    return [
        c
        for c in (stored if isinstance(stored, list) else [])
        if isinstance(c, dict)
        and whole(c.get("L_valid"), 1)
        and whole(c.get("total"))
        and whole(c.get("correct"))
        and c["correct"] <= c["total"]
        and isinstance(c.get("status", "ok"), str)
        and (c.get("depth") is None or _fraction(c["depth"]))
    ]


def _fraction(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and 0 <= value <= 1


def ok_rows(rows, probe=None):
    """The ok retrieval rows (of ``probe`` when given) whose params name a probe and an L_train."""
    for r in rows:
        if r.get("status", "ok") != "ok" or r.get("task", "retrieval") != "retrieval":
            continue
        params = r.get("params") if isinstance(r.get("params"), dict) else {}
        if not isinstance(params.get("probe"), str) or not whole(params.get("L_train"), 1):
            continue  # the report's reader skipped such a row already (posbench.store.bounds.check_params)
        if probe is not None and r["params"]["probe"] != probe:
            continue
        yield r


def accuracy_table(rows: list[dict], threshold: float = 0.5) -> list[dict]:
    """One entry per (method, probe, L_train, L_valid): counts summed over depths (and over rows,
    so merged seeds or runs pool their samples), accuracy, Wilson 95% interval, whether that
    (method, probe, L_train) learnt the task (``learned``: its pooled accuracy at L_train against
    the rows' ``learned_threshold``) and its effective length at ``threshold``. Cells of several
    training seeds (their ``seed``) also give, per entry, ``n_seeds``, the per-seed accuracies'
    95% t interval (``seed_lo``, ``seed_hi``) and ``seeds_learnt``; ``learned`` is then
    ``learned_over_seeds`` (every seed learnt)."""
    counts: dict[tuple, list] = {}
    per_seed: dict[tuple, dict] = {}  # (method, probe, L, Lv) -> {seed: [correct, total, ok]}
    for r in ok_rows(rows):
        key = (r["method"], r["params"]["probe"], r["params"]["L_train"])
        for c in cells(r):
            entry = counts.setdefault(key + (c["L_valid"],), [0, 0, True])
            entry[0] += c["correct"]
            entry[1] += c["total"]
            entry[2] &= c.get("status", "ok") == "ok"
            if isinstance(c.get("seed"), int):
                one = per_seed.setdefault(key + (c["L_valid"],), {}).setdefault(c["seed"], [0, 0, True])
                one[0] += c["correct"]
                one[1] += c["total"]
                one[2] &= c.get("status", "ok") == "ok"
    table = []
    for (method, probe, L, Lv), (k, n, ok) in sorted(counts.items()):
        acc = k / n if ok and n else None
        lo, hi = wilson_interval(k, n) if ok and n else (None, None)
        seeds = {seed: (a / b if ok_ and b else None) for seed, (a, b, ok_) in per_seed.get((method, probe, L, Lv), {}).items()}
        _, _, n_seeds, seed_lo, seed_hi = seed_interval(list(seeds.values())) if len(seeds) > 1 else (0, 0, 0, None, None)
        table.append(
            {
                "method": method,
                "probe": probe,
                "L_train": L,
                "L_valid": Lv,
                "correct": k,
                "total": n,
                "acc": acc,
                "lo": lo,
                "hi": hi,
                "by_seed": seeds if len(seeds) > 1 else {},
                "n_seeds": n_seeds,
                "seed_lo": seed_lo,
                "seed_hi": seed_hi,
            }
        )
    eff: dict[tuple, dict] = {}
    for t in table:
        eff.setdefault((t["method"], t["probe"], t["L_train"]), {})[t["L_valid"]] = t["acc"]
    bar = learned_threshold(list(ok_rows(rows)))
    at_train = {(t["method"], t["probe"], t["L_train"]): t["by_seed"] for t in table if t["L_valid"] == t["L_train"]}
    factor = relative_threshold(list(ok_rows(rows)))
    curves_by_seed: dict[tuple, dict] = {}  # (method, probe, L) -> {seed: {L_valid: accuracy}}
    for t in table:
        for seed, a in t["by_seed"].items():
            curves_by_seed.setdefault((t["method"], t["probe"], t["L_train"]), {}).setdefault(seed, {})[t["L_valid"]] = a
    for t in table:
        key = (t["method"], t["probe"], t["L_train"])
        acc = eff[key]
        t.update(ruler_summaries(acc, t["L_train"], factor), relative_threshold=factor)
        per_seed = [
            dict(ruler_summaries(c, t["L_train"], factor), effective_length=effective_length(c, threshold))
            for c in curves_by_seed.get(key, {}).values()
        ]
        for name in ("wavg_long", "wavg_short", "effective_length_rel", "effective_length"):  # 95% t interval over seeds
            t[f"{name}_seeds"] = seed_interval([p[name] for p in per_seed])[3:] if len(per_seed) > 1 else (None, None)
        t["effective_length"] = effective_length(acc, threshold)
        t["learned"] = learned(acc.get(t["L_train"]), bar)
        seeds = at_train.get((t["method"], t["probe"], t["L_train"])) or {}
        if seeds:  # learn first, per seed
            verdicts = [learned(a, bar) for a in seeds.values()]
            t["learned"] = learned_over_seeds(verdicts)
            t["seeds_learnt"] = (sum(v is True for v in verdicts), len(verdicts))
        t["learned_threshold"] = bar
    return table


def hops_table(rows: list[dict], probe: str) -> list[dict]:
    """vartrack's axis: one entry per (method, L_train, hops, L_valid) of the cells that carry a
    ``hops`` (a whole number >= 1), counts pooled over rows and seeds, with accuracy and its
    Wilson 95% interval (None where a cell failed)."""
    counts: dict[tuple, list] = {}
    for r in ok_rows(rows, probe):
        for c in cells(r):
            if whole(c.get("hops"), 1):
                entry = counts.setdefault((r["method"], r["params"]["L_train"], c["hops"], c["L_valid"]), [0, 0, True])
                entry[0] += c["correct"]
                entry[1] += c["total"]
                entry[2] &= c.get("status", "ok") == "ok"
    out = []
    for (method, L, hops, Lv), (k, n, ok) in sorted(counts.items()):
        lo, hi = wilson_interval(k, n) if ok and n else (None, None)
        acc = k / n if ok and n else None
        out.append({"method": method, "L_train": L, "hops": hops, "L_valid": Lv, "acc": acc, "lo": lo, "hi": hi})
    return out


def heatmap_table(rows: list[dict], method: str, L_train: int | None = None):
    """(depths, lengths, acc) of passkey for one method: acc (n_depths, n_lengths) float array,
    NaN where no sample ran. Counts of several rows (seeds, runs) are pooled."""
    import numpy as np

    counts: dict[tuple, list] = {}
    for r in ok_rows(rows, "passkey"):
        if r["method"] != method or (L_train is not None and r["params"]["L_train"] != L_train):
            continue
        for c in cells(r):
            if c.get("status", "ok") == "ok" and c["total"] and c.get("depth") is not None:
                entry = counts.setdefault((c["depth"], c["L_valid"]), [0, 0])
                entry[0] += c["correct"]
                entry[1] += c["total"]
    depths = sorted({d for d, _ in counts})
    lengths = sorted({Lv for _, Lv in counts})
    acc = np.full((len(depths), len(lengths)), np.nan)
    for (d, Lv), (k, n) in counts.items():
        acc[depths.index(d), lengths.index(Lv)] = k / n
    return depths, lengths, acc
