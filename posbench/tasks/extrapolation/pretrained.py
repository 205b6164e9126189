"""The extrapolation task on a pretrained Hugging Face checkpoint (``--model hf:DIR``): perplexity
at every L_valid, non-overlapping and sliding, on the same windows as a posbench model, and the
text passkey probe at each L_valid; nothing is trained. Guide: docs/hf-checkpoints.md.
"""
from __future__ import annotations

import math

from posbench.tasks.pretrained import open_pretrained, pretrained_tokens

SCALED_INTERPOLATE = ("a scaled rotary recipe rescales positions itself; interpolate: true applies to rotary and "
                      "alibi")


def run_pretrained(case, eval_cell) -> dict:
    """The task's result for one checkpoint under the case's method. ``eval_cell``: the task's
    (mode, L_valid) evaluation (``posbench.tasks.extrapolation.eval_cell``)."""
    from posbench.engine.evaluate import positions
    from posbench.hf.passkey import passkey_accuracy

    s, L = case.settings, case.params.L_train
    lm, ckpt = open_pretrained(case, L)
    tokens, corpus = pretrained_tokens(s, ckpt)
    scaled = ckpt.family == "rope" and lm.recipe.m.scaling != "none"
    metrics = {"n_params": lm.num_parameters(), "best_ppl": None, "best_ppl_eval": None}
    evals, curves = [], {}
    probes: dict = {} if ckpt.tokenizer is not None else {"message": "no probe: the checkpoint has no tokenizer"}
    for interpolate in ([False, True] if s.interpolate else [False]):
        tag = "@interp" if interpolate else ""
        for mode in s.modes:
            for Lv in s.valid_lengths(L):
                if interpolate and scaled:
                    evals.append({"mode": mode, "L_valid": Lv, "stride": None, "interpolate": True, "ppl": None,
                                  "loss": None, "tokens": 0, "status": "unavailable", "message": SCALED_INTERPOLATE})
                    continue
                cell, curve = eval_cell(lm, tokens, L, Lv, mode, s, case.device, interpolate)
                evals.append(cell)
                if curve is not None:
                    curves[f"{mode}@{Lv}{tag}"] = curve
                    metrics[f"ppl@{mode}@{Lv}{tag}"] = cell["ppl"]
        if s.passkey_trials and ckpt.tokenizer is not None and not (interpolate and scaled):
            for Lv in s.valid_lengths(L):
                pos = positions(Lv, L if interpolate else None, case.device)  # (Lv,) or None
                r = passkey_accuracy(lm, ckpt.tokenizer, Lv, s.passkey_trials, s.seed, case.device,
                                     s.eval_batch_size, pos)
                probes[f"{Lv}{tag}"] = r
                metrics[f"passkey@{Lv}{tag}"] = r["accuracy"]
    by = {(e["mode"], e["L_valid"], e["interpolate"]): e["ppl"] for e in evals}
    for key, Lv in (("ppl_at_train_len", L), ("ppl_at_max_len", max(s.valid_lengths(L)))):
        value = by.get(("nonoverlapping", Lv, False))
        metrics[key] = value if value is not None and math.isfinite(value) else None
    checks = getattr(lm.recipe, "checks", None)
    series = {"evals": evals, "per_position_loss": curves, "corpus": corpus, "checkpoint": ckpt.describe(),
              "passkey": probes, "rope_checks": {str(k): v for k, v in checks.items()} if checks is not None else None}
    info = {"model": f"hf:{ckpt.model_type}", "attn_backend": "transformers",
            "compute_dtype": s.eval_dtype, "bias_dtype": getattr(lm.recipe, "bias_dtype", "")}
    return {"metrics": metrics, "series": series, "info": info}
