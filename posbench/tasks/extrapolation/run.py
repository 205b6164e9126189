"""One extrapolation case: train at L_train (or reuse the case's checkpoint), once per seed, then
evaluate perplexity at every L_valid, non-overlapping and sliding, optionally with interpolated
positions; or, with ``--model hf:DIR``, evaluate a pretrained checkpoint (``evaluate_pretrained``). How
a case runs: docs/tasks/extrapolation.md.
"""

from __future__ import annotations

import math
from pathlib import Path

from posbench.engine import tracking
from posbench.protocols.pretrained_eval import open_pretrained, pretrained_tokens
from posbench.protocols.seeds import checkpoint_name, combine_metrics, seed_list
from posbench.protocols.train_eval.evaluations import EvalSpec, eval_cell, source_bound
from posbench.protocols.train_eval.model import checkpoint_path, train_case_model
from posbench.protocols.training import open_corpus
from posbench.report.stats import seed_interval

# torch, the corpus and the model are imported inside the functions that run a case: validating a
# suite imports this module (through the task's declaration), and `bench.py validate` must not wait for torch.

SCALED_INTERPOLATE = "a scaled rotary recipe rescales positions itself; interpolate: true applies to rotary and alibi"


def run(case) -> dict:
    s, L = case.settings, case.params.L_train
    if s.pretrained:  # --model hf:DIR: a checkpoint from disk, nothing trained
        return evaluate_pretrained(case)
    corpus = open_corpus(s.corpus)
    if s.by_distance and corpus.kind != "synthetic-copy":  # said before anything trains
        raise ValueError(f"extrapolation: by_distance needs a synthetic-copy corpus (copy distances known), not {corpus.kind}")
    seeds = seed_list(s)
    runs = []
    for seed in seeds:
        name = checkpoint_name(case.id, seed, seeds)  # one checkpoint per seed
        # Curves in <run>/cases/<name>/ (engine.tracking): TensorBoard when installed.
        with tracking.for_case(case, name) as tracker:
            runs.append(run_one_seed(case, s, corpus, L, seed, checkpoint_path(case, name), tracker))
    result = combine_seeds(runs, seeds)
    if s.decode_tokens:  # the decode cost depends on the method and length, not the weights: once a case
        from posbench.protocols.decode_cost import case_decode_cost

        result["metrics"].update(case_decode_cost(case, s, corpus.vocab_size, s.valid_lengths(L)))
    return result


def run_one_seed(case, s, corpus, L: int, seed: int, ckpt: Path | None, tracker=None) -> dict:
    """Train (or reload) and evaluate one model: the task's result for one seed; its curves go to
    ``tracker`` (evaluations at the last training step)."""
    import numpy as np
    import torch

    model, metrics, series = train_case_model(case, corpus, ckpt, s.method_options.get(case.method, {}), seed, tracker)
    from posbench.tasks.extrapolation.bucket_coverage import untrained_buckets

    series["untrained_buckets"] = untrained_buckets(model.method, L)  # None: the method buckets no distance
    valid = corpus.split("valid")
    oracle = corpus.oracle_token_loss(valid[: s.eval_tokens])  # (N,) or None
    metrics["best_ppl_eval"] = None if oracle is None else math.exp(float(np.nanmean(oracle)))
    eval_dtype = getattr(torch, s.eval_dtype)
    info = model.info(case.device, eval_dtype)
    model = model.to(eval_dtype)
    evals, curves, best_curves = [], {}, {}
    for interpolate in [False, True] if s.interpolate else [False]:
        for mode in s.modes:
            for Lv in s.valid_lengths(L):
                cell, curve = eval_cell(
                    model, valid, EvalSpec(mode, Lv, L, interpolate), s, case.device, tracker, max(0, metrics["train_steps"] - 1)
                )
                evals.append(cell)
                key = f"{mode}@{Lv}" + ("@interp" if interpolate else "")
                bound = source_bound(oracle, Lv, mode, s)
                if bound is not None:
                    cell["best_ppl_eval"], best_curves[key] = bound
                if curve is not None:
                    curves[key] = curve
                    metrics[f"ppl@{key}"] = cell["ppl"]
    series["evals"] = evals
    series["per_position_loss"] = curves
    from posbench.protocols.attention_diagnostics import attention_metrics
    from posbench.tasks.extrapolation.dependency import far_metrics

    if s.by_distance:
        series["by_distance"] = loss_by_distance(model, corpus, valid, oracle, L, s, case.device)
        metrics.update(far_metrics(series["by_distance"]))
    if s.attention_diagnostics:
        series["attention"] = attention_diagnostics(model, valid, L, s, case.device)
        metrics.update(attention_metrics(series["attention"]))
    if oracle is not None:
        series["best_per_position_loss"] = best_curves
    by = {(e["mode"], e["L_valid"], e["interpolate"]): e["ppl"] for e in evals}
    metrics["ppl_at_train_len"] = by.get(("nonoverlapping", L, False))
    metrics["ppl_at_max_len"] = by.get(("nonoverlapping", max(s.valid_lengths(L)), False))
    for key in ("ppl_at_train_len", "ppl_at_max_len"):
        if metrics[key] is not None and not math.isfinite(metrics[key]):
            metrics[key] = None
    return {"metrics": metrics, "series": series, "info": info}


def loss_by_distance(model, corpus, valid, oracle, L: int, s, device) -> list[dict]:
    """``series["by_distance"]``: perplexity per copy-distance bucket at every L_valid (``dependency``)."""
    import numpy as np

    from posbench.tasks.extrapolation.dependency import summarize, window_losses

    distance = corpus.copy_distances("valid")  # (N,): a synthetic-copy corpus, checked in run()
    n = len(valid) if s.eval_tokens is None else min(s.eval_tokens, len(valid))
    bound = np.full(len(valid), np.nan)
    bound[: len(oracle)] = oracle
    entries = []
    for Lv in s.valid_lengths(L):
        loss = window_losses(model, valid, Lv, n // Lv, s.eval_batch_size, device)
        entries += summarize(loss, bound, distance, Lv, L, max(s.valid_lengths(L)))
    return entries


def attention_diagnostics(model, valid, L: int, s, device) -> list[dict]:
    """``series["attention"]``: per L_valid (up to ``attention_max_factor`` x L_train) and layer, the
    attention diagnostics of the first ``attention_sequences`` windows (``engine.attention_probe``)."""
    import numpy as np
    import torch

    from posbench.protocols.attention_diagnostics import diagnostics

    sequences = {}
    for Lv in [v for v in s.valid_lengths(L) if v <= s.attention_max_factor * L]:
        n = min(s.attention_sequences, len(valid) // Lv)
        sequences[Lv] = torch.from_numpy(np.asarray(valid[: n * Lv], dtype=np.int64).reshape(n, Lv)).to(device)
    return diagnostics(model, sequences, L)


def combine_seeds(runs: list[dict], seeds: list[int]) -> dict:
    """One result from one per seed. A single seed is returned as it is. Several: the metrics of
    ``posbench.protocols.seeds.combine_metrics`` (mean, ``_std``, the 95% t interval over seeds
    ``_seed_lo``/``_seed_hi``, ``n_seeds``, ``series["<metric>_by_seed"]``); the evaluation cells
    carry ``ppl_std``, ``ppl_seed_lo``/``ppl_seed_hi`` and ``ppl_by_seed``; per-position curves are
    averaged; each seed's training curve is kept under ``series["train_loss_by_seed"]``."""
    if len(runs) == 1:
        return runs[0]
    metrics, by_seed = combine_metrics([r["metrics"] for r in runs])
    series: dict = {"seeds": list(seeds), **by_seed}
    first = runs[0]["series"]
    series["corpus"] = first.get("corpus")
    series["train_loss_by_seed"] = [r["series"]["train_loss"] for r in runs]
    series["train_loss"] = first["train_loss"]
    cells = []
    for i, cell in enumerate(first["evals"]):
        ppls = [r["series"]["evals"][i]["ppl"] for r in runs]
        mean, std, n, lo, hi = seed_interval(ppls)
        merged = dict(
            cell, ppl=mean if n else None, ppl_std=std if n else None, ppl_seed_lo=lo, ppl_seed_hi=hi, ppl_by_seed=ppls, n_seeds=n
        )
        merged["status"] = (
            "ok"
            if n == len(ppls)
            else next(r["series"]["evals"][i]["status"] for r in runs if r["series"]["evals"][i]["status"] != "ok")
        )
        cells.append(merged)
    series["evals"] = cells
    curves = {}
    for key in first["per_position_loss"]:
        per = [r["series"]["per_position_loss"].get(key) for r in runs]
        if all(c is not None for c in per):
            curves[key] = [sum(vals) / len(vals) for vals in zip(*per)]
    series["per_position_loss"] = curves
    series["untrained_buckets"] = first.get("untrained_buckets")  # the same L_train for every seed
    from posbench.tasks.extrapolation.dependency import combine as combine_distance
    from posbench.tasks.extrapolation.dependency import far_metrics

    if "attention" in first:  # each seed's diagnostics, tagged; the metrics are their mean (combine_metrics)
        series["attention"] = [dict(e, seed=seed) for r, seed in zip(runs, seeds) for e in r["series"]["attention"]]
    if "by_distance" in first:  # the same tokens for every seed: the mean loss per bucket
        series["by_distance"] = combine_distance([r["series"]["by_distance"] for r in runs])
        metrics.update(far_metrics(series["by_distance"]))
    if "best_per_position_loss" in first:  # the source's curves: the same tokens for every seed
        series["best_per_position_loss"] = first["best_per_position_loss"]
    return {"metrics": metrics, "series": series, "info": runs[0]["info"]}


def evaluate_pretrained(case) -> dict:
    """The task's result for one pretrained Hugging Face checkpoint (``--model hf:DIR``) under the
    case's method: perplexity at every L_valid, non-overlapping and sliding, on the same windows as
    a posbench model, and the text passkey probe at each L_valid; nothing is trained. Guide:
    docs/hf-checkpoints.md."""
    from posbench.engine.evaluate import positions
    from posbench.hf.passkey import Probes, passkey_accuracy

    s, L = case.settings, case.params.L_train
    lm, ckpt = open_pretrained(case, L)
    tokens, corpus = pretrained_tokens(s, ckpt)
    scaled = ckpt.family == "rope" and lm.recipe.m.scaling != "none"
    metrics = {"n_params": lm.num_parameters(), "best_ppl": None, "best_ppl_eval": None}
    evals, curves = [], {}
    probes: dict = {} if ckpt.tokenizer is not None else {"message": "no probe: the checkpoint has no tokenizer"}
    for interpolate in [False, True] if s.interpolate else [False]:
        tag = "@interp" if interpolate else ""
        for mode in s.modes:
            for Lv in s.valid_lengths(L):
                if interpolate and scaled:
                    evals.append(
                        {
                            "mode": mode,
                            "L_valid": Lv,
                            "stride": None,
                            "interpolate": True,
                            "ppl": None,
                            "loss": None,
                            "tokens": 0,
                            "status": "unavailable",
                            "message": SCALED_INTERPOLATE,
                        }
                    )
                    continue
                cell, curve = eval_cell(lm, tokens, EvalSpec(mode, Lv, L, interpolate), s, case.device)
                evals.append(cell)
                if curve is not None:
                    curves[f"{mode}@{Lv}{tag}"] = curve
                    metrics[f"ppl@{mode}@{Lv}{tag}"] = cell["ppl"]
        if s.passkey_trials and ckpt.tokenizer is not None and not (interpolate and scaled):
            for Lv in s.valid_lengths(L):
                pos = positions(Lv, L if interpolate else None, case.device)  # (Lv,) or None
                r = passkey_accuracy(
                    lm, Probes(ckpt.tokenizer, Lv, s.passkey_trials, s.seed), case.device, s.eval_batch_size, pos
                )
                probes[f"{Lv}{tag}"] = r
                metrics[f"passkey@{Lv}{tag}"] = r["accuracy"]
    by = {(e["mode"], e["L_valid"], e["interpolate"]): e["ppl"] for e in evals}
    for key, Lv in (("ppl_at_train_len", L), ("ppl_at_max_len", max(s.valid_lengths(L)))):
        value = by.get(("nonoverlapping", Lv, False))
        metrics[key] = value if value is not None and math.isfinite(value) else None
    checks = getattr(lm.recipe, "checks", None)
    series = {
        "evals": evals,
        "per_position_loss": curves,
        "corpus": corpus,
        "checkpoint": ckpt.describe(),
        "passkey": probes,
        "rope_checks": {str(k): v for k, v in checks.items()} if checks is not None else None,
    }
    info = {
        "model": f"hf:{ckpt.model_type}",
        "attn_backend": "transformers",
        "compute_dtype": s.eval_dtype,
        "bias_dtype": getattr(lm.recipe, "bias_dtype", ""),
    }
    return {"metrics": metrics, "series": series, "info": info}
