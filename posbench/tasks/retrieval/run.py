"""One retrieval case, per seed: train at L_train on text mixed with the probes (``training_mix``)
or reuse the checkpoint, then score the case's probe at each L_valid (``scoring``)."""

from __future__ import annotations

from pathlib import Path

from posbench.engine import tracking
from posbench.protocols.attention_diagnostics import attention_metrics
from posbench.protocols.seeds import checkpoint_name, combine_accuracy_seeds, seed_list
from posbench.protocols.training import open_corpus
from posbench.report.learn_first import comparable_length, learned
from posbench.report.stats import effective_length, wilson_interval
from posbench.tasks.retrieval.summaries import DEFAULT_RELATIVE_THRESHOLD, relative_effective_length, weighted_average

# torch, numpy, the probes, the model and the scoring are imported inside run(): validating or
# listing suites imports this module, and must not wait for them.


def training_probes(case, s) -> list[str]:
    """The probes the case's model trains on: its own with ``model_per_probe``, else ``train_probes``."""
    return [case.params.probe] if s.model_per_probe else list(s.train_probes)


def shared_checkpoint(case, s) -> Path | None:
    """``<run>/checkpoints/retrieval__<method>__L_train=<L>[__<probe>].pt``: with several training
    probes one model (and file) serves every probe case of the method."""
    if not case.out_dir:
        return None
    probes = training_probes(case, s)
    tail = "" if len(probes) > 1 else f"__{probes[0]}"
    return Path(case.out_dir) / "checkpoints" / f"retrieval__{case.method}__L_train={case.params.L_train}{tail}.pt"


def summarize(
    cells: list[dict], L: int, threshold: float, learned_threshold: float = 0.0, relative: float = DEFAULT_RELATIVE_THRESHOLD
) -> dict:
    """Per-L_valid metrics from cells: acc@L (counts summed over depths), its Wilson interval,
    acc_at_train_len, acc_at_max_len, learned (1/0; None without an accuracy at L_train),
    effective_length and effective_length_rel (at ``relative`` x the accuracy at L_train; both None
    unless learnt) and RULER's weighted averages wavg_long, wavg_short. A length with an oom cell
    has no accuracy."""
    counts: dict[int, list] = {}
    for c in cells:
        entry = counts.setdefault(c["L_valid"], [0, 0, True])
        entry[0] += c["correct"]
        entry[1] += c["total"]
        entry[2] &= c["status"] == "ok"
    metrics, acc = {}, {}
    for Lv, (k, n, ok) in sorted(counts.items()):
        acc[Lv] = k / n if ok and n else None
        lo, hi = wilson_interval(k, n) if ok and n else (None, None)
        metrics.update({f"acc@{Lv}": acc[Lv], f"acc_lo@{Lv}": lo, f"acc_hi@{Lv}": hi})
    metrics["acc_at_train_len"] = acc.get(L)
    metrics["acc_at_max_len"] = acc[max(acc)] if acc else None
    verdict = learned(acc.get(L), learned_threshold)
    metrics["learned"] = None if verdict is None else int(verdict)
    metrics["effective_length"] = comparable_length(verdict, effective_length(acc, threshold))
    metrics["effective_length_rel"] = comparable_length(verdict, relative_effective_length(acc, L, relative))
    metrics["wavg_long"] = weighted_average(acc, "long")
    metrics["wavg_short"] = weighted_average(acc, "short")
    return metrics


def probe_attention(model, probe: str, vocab, L: int, s, device) -> list[dict]:
    """``series["attention"]`` of one model: ``attention_sequences`` examples of the probe (the
    evaluation's first ones, without the last answer token) at each L_valid up to ``attention_max_factor`` x L."""
    import torch

    from posbench.protocols.attention_diagnostics import diagnostics
    from posbench.protocols.probing import probes as P

    sequences = {}
    for Lv in [f * L for f in s.L_valid_factors if f <= s.attention_max_factor]:
        batch = P.generate(P.ProbeRequest(probe, Lv + 1), vocab, s.attention_sequences, 2**31 + s.seed)
        sequences[Lv] = torch.from_numpy(batch.tokens[:, :Lv]).to(device)
    return diagnostics(model, sequences, L)


def run(case) -> dict:
    import torch

    from posbench.engine.saved_model import exclusive
    from posbench.protocols.probing import probes as P
    from posbench.protocols.probing.scoring import eval_length, rule_of
    from posbench.protocols.probing.training_mix import train_probe_model

    s, L, probe = case.settings, case.params.L_train, case.params.probe
    cfg = s.probe_config()
    if probe in P.RULER_PROBES:
        P.ruler.check(probe, cfg)  # one line before any training
    for Lv in [f * L for f in s.L_valid_factors]:
        if Lv < P.min_length(probe, cfg):
            raise ValueError(
                f"retrieval: L_valid {Lv} is too short for probe {probe} (it needs {P.min_length(probe, cfg)} tokens)"
            )
    corpus = open_corpus(s.corpus)
    vocab = P.ProbeVocab(corpus.vocab_size, cfg)
    seeds, base = seed_list(s), shared_checkpoint(case, s)
    per_seed, cells, by_distance, attention = [], [], [], []
    for seed in seeds:
        ckpt = base.with_name(checkpoint_name(base.stem, seed, seeds) + ".pt") if base is not None else None
        # Curves in <run>/cases/<checkpoint name>/ (engine.tracking), beside the other probes' accuracy.
        with tracking.for_case(case, ckpt.stem if ckpt is not None else None) as tracker:
            with exclusive(ckpt):  # a model several probe cases share: one trains it, the others wait and reuse it
                model, metrics = train_probe_model(
                    case, vocab, corpus.split("train"), ckpt, training_probes(case, s), tracker, seed
                )
            eval_dtype = getattr(torch, s.eval_dtype)
            info = model.info(case.device, eval_dtype)
            model = model.to(eval_dtype).eval()
            mine = []
            for factor in s.L_valid_factors:
                c, d = eval_length(model, probe, vocab, factor * L, s, case.device)
                mine += c
                by_distance += [dict(x, seed=seed) for x in d] if len(seeds) > 1 else d
            metrics.update(summarize(mine, L, s.threshold, s.learned_threshold, s.relative_threshold))
            if s.attention_diagnostics:
                found = probe_attention(model, probe, vocab, L, s, case.device)
                metrics.update(attention_metrics(found))
                attention += [dict(e, seed=seed) for e in found] if len(seeds) > 1 else found
            tracker.scalars(
                {f"eval/{probe}/acc@{factor * L}": metrics.get(f"acc@{factor * L}") for factor in s.L_valid_factors},
                max(0, metrics["train_steps"] - 1),
            )
        per_seed.append(metrics)
        cells += [dict(c, seed=seed) for c in mine] if len(seeds) > 1 else mine
    pooled = summarize(cells, L, s.threshold, s.learned_threshold, s.relative_threshold)
    metrics, seed_series = combine_accuracy_seeds(per_seed, pooled, s.learned_threshold)
    if not metrics.get("learned"):  # learn first, over every seed, for the relative length too
        metrics["effective_length_rel"] = None
    rule = rule_of(probe, s)
    metrics["chance"] = P.chance(probe, cfg, rule)
    series = {
        "cells": cells,
        "corpus": corpus.describe(),
        "threshold": s.threshold,
        "learned_threshold": s.learned_threshold,
        "relative_threshold": s.relative_threshold,
        "scoring": rule,
        **seed_series,
    }
    if probe == "mqar":
        series["by_distance"] = by_distance
    if attention:
        series["attention"] = attention
    return {"metrics": metrics, "series": series, "info": info}
