"""One extension case: the base model (trained at L_train on text mixed with passkey examples, or
the checkpoint another recipe's case of the run left), then per k of ``finetune_steps`` the recipe
applied to a fresh copy of it, k steps of fine-tuning at L_target and the evaluations
(``posbench.tasks.extension.run`` runs it; ``s`` is that task's Settings).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import torch

from posbench.engine.saved_model import exclusive  # noqa: F401 (the lock its cases share; tests reach it here)
from posbench.engine.train import TrainConfig, train
from posbench.protocols.probing import probes as P
from posbench.protocols.probing.scoring import eval_length
from posbench.protocols.probing.training_mix import TrainingMix, mixed_batches, train_probe_model
from posbench.protocols.seeds import checkpoint_name, combine_metrics, seed_list
from posbench.protocols.train_eval.evaluations import EvalSpec, eval_cell
from posbench.protocols.training import open_corpus
from posbench.tasks.extension.regimes import PLAIN, recipe_model

PROBES = ["passkey"]
FINETUNE_DATA_SEED = 1_000_003  # the fine-tune's batches: a stream apart from the base model's


def base_checkpoint(case, seed: int, seeds: list[int]) -> Path | None:
    """``<run>/checkpoints/extension__<method>__L_train=<L>[@seed<s>].pt``: one base model per method
    and seed serves every recipe and bias dtype of the run."""
    if not case.out_dir:
        return None
    name = checkpoint_name(f"extension__{case.method}__L_train={case.params.L_train}", seed, seeds)
    return Path(case.out_dir) / "checkpoints" / f"{name}.pt"


def warmup_steps(k: int, s) -> int:
    """The fine-tune's linear warm-up: min(finetune_warmup_steps, ceil(k / 10))."""
    return min(s.finetune_warmup_steps, math.ceil(k / 10))


def finetune_batch_size(s) -> int:
    """Rows per fine-tuning step: given, else the base's tokens per step at L_target (at least 1)."""
    return s.finetune_batch_size or max(1, s.batch_size // s.target_factor)


def finetune(model, s, vocab, lm_tokens, cfg: TrainConfig, device):
    """``cfg.steps`` steps of ``posbench.engine.train.train`` at L_target (``cfg.seq_len``) on the same
    mix as the base model: a fresh AdamW, its own warm-up (``warmup_steps``) and cosine decay
    (``finetune_config``); ``model`` trains in place."""
    data = mixed_batches(
        lm_tokens, vocab, TrainingMix(PROBES, cfg.seq_len, cfg.batch_size, s.mix, loss=s.loss), cfg.seed + FINETUNE_DATA_SEED
    )
    return train(model, data, cfg, device)


def finetune_config(s, L_target: int, k: int, seed: int) -> TrainConfig:
    """The k-step fine-tune's ``TrainConfig``: ``finetune_lr``, its own warm-up, then cosine decay."""
    return TrainConfig(
        seq_len=L_target,
        batch_size=finetune_batch_size(s),
        steps=k,
        lr=s.finetune_lr,
        warmup_steps=warmup_steps(k, s),
        precision=s.precision,
        seed=seed,
    )


@dataclass(frozen=True)
class Lengths:
    """Where a model's quality is measured: trained at ``L_train``, evaluated at each of ``lengths``,
    its metrics named with ``suffix`` (``@k<k>`` after k fine-tuning steps, "" for the base)."""

    L_train: int
    lengths: list[int]
    suffix: str


def quality(model, s, vocab, valid, at: Lengths, device) -> dict:
    """``ppl@<mode>@<L_valid><suffix>`` and ``passkey@<L_valid><suffix>`` of ``model`` in the eval dtype
    (the extrapolation task's evaluation and the retrieval task's passkey probe)."""
    L_train, lengths, suffix = at.L_train, at.lengths, at.suffix
    model = model.to(getattr(torch, s.eval_dtype)).eval()
    out = perplexities(model, s, valid, L_train, lengths, device, suffix)
    for Lv in lengths:
        cells, _ = eval_length(model, "passkey", vocab, Lv, s, device)
        total = sum(c["total"] for c in cells)
        fine = all(c["status"] == "ok" for c in cells) and total
        out[f"passkey@{Lv}{suffix}"] = sum(c["correct"] for c in cells) / total if fine else None
    return out


def perplexities(model, s, valid, L_train: int, lengths: list[int], device, suffix: str) -> dict:
    """``ppl@<mode>@<L_valid><suffix>`` of ``model`` (``lm(idx, pos)``), None where not finite."""
    out = {}
    for mode in s.modes:
        for Lv in lengths:
            cell, _curve = eval_cell(model, valid, EvalSpec(mode, Lv, L_train), s, device)
            ok = cell["status"] == "ok" and cell["ppl"] is not None and math.isfinite(cell["ppl"])
            out[f"ppl@{mode}@{Lv}{suffix}"] = cell["ppl"] if ok else None
    return out


def headline(metrics: dict, s, L_target: int, lengths: list[int]) -> dict:
    """The headline metrics (non-overlapping when measured) from the per-k ones."""
    mode = "nonoverlapping" if "nonoverlapping" in s.modes else s.modes[0]
    first, last = s.ks()[0], s.ks()[-1]
    return dict(
        ppl_at_target_k0=metrics[f"ppl@{mode}@{L_target}@k{first}"],
        ppl_at_target=metrics[f"ppl@{mode}@{L_target}@k{last}"],
        ppl_at_max_len=metrics[f"ppl@{mode}@{max(lengths)}@k{last}"],
        passkey_at_target_k0=metrics[f"passkey@{L_target}@k{first}"],
        passkey_at_target=metrics[f"passkey@{L_target}@k{last}"],
    )


def run_one_seed(case, s, corpus, vocab, seed: int, seeds: list[int]) -> dict:
    """The case's result for one seed: the base model (trained or reused, under the lock), its own
    quality at L_train, then per k the recipe's fine-tune and evaluations."""
    p = case.params
    L, L_target = p.L_train, s.target_factor * p.L_train
    lm_tokens, valid = corpus.split("train"), corpus.split("valid")
    ckpt = base_checkpoint(case, seed, seeds)
    with exclusive(ckpt):
        base, metrics = train_probe_model(case, vocab, lm_tokens, ckpt, PROBES, None, seed)
    base_q = quality(recipe_model(base, PLAIN[case.method], L, L_target), s, vocab, valid, Lengths(L, [L], ""), case.device)
    mode = "nonoverlapping" if "nonoverlapping" in s.modes else s.modes[0]
    metrics.update(
        base_ppl_at_train_len=base_q[f"ppl@{mode}@{L}"], base_passkey_at_train_len=base_q[f"passkey@{L}"], L_target=L_target
    )
    lengths = [f * L_target for f in s.L_valid_factors]
    curves = {}
    for k in s.ks():
        model = recipe_model(base, p.recipe, L, L_target, p.bias_dtype)
        if k:
            r = finetune(model, s, vocab, lm_tokens, finetune_config(s, L_target, k, seed), case.device)
            metrics[f"finetune_seconds@k{k}"], metrics[f"finetune_loss@k{k}"] = r.seconds, r.final_loss
            curves[f"k{k}"] = [list(c) for c in r.curve]
        metrics.update(quality(model, s, vocab, valid, Lengths(L, lengths, f"@k{k}"), case.device))
    metrics.update(headline(metrics, s, L_target, lengths))
    info = base.info(case.device, getattr(torch, s.eval_dtype))
    return {"metrics": metrics, "series": {"finetune_loss": curves}, "info": info}


def run_case(case) -> dict:
    """Every seed's result, combined (``posbench.protocols.seeds.combine_metrics``) when several."""
    s = case.settings
    corpus = open_corpus(s.corpus)
    vocab = P.ProbeVocab(corpus.vocab_size, s.probe_config())
    need = P.min_length("passkey", vocab.cfg)
    if case.params.L_train + 1 < need:
        raise ValueError(
            f"extension: L_train {case.params.L_train} is too short for the passkey probe (it needs {need - 1} tokens)"
        )
    seeds = seed_list(s)
    runs = [run_one_seed(case, s, corpus, vocab, seed, seeds) for seed in seeds]
    return combine_seeds(runs, seeds, s, case.params.L_train, corpus.describe())


def combine_seeds(runs: list[dict], seeds: list[int], s, L_train: int, corpus: dict) -> dict:
    """The case's result from each seed's (``combine_metrics`` when several)."""
    series = {
        "corpus": corpus,
        "modes": list(s.modes),
        "finetune_steps": s.ks(),
        "L_valid": [f * s.target_factor * L_train for f in s.L_valid_factors],
    }
    if len(runs) == 1:
        return {"metrics": runs[0]["metrics"], "series": {**series, **runs[0]["series"]}, "info": runs[0]["info"]}
    metrics, by_seed = combine_metrics([r["metrics"] for r in runs])
    series.update(by_seed, seeds=seeds, finetune_loss_by_seed=[r["series"]["finetune_loss"] for r in runs])
    return {"metrics": metrics, "series": series, "info": runs[0]["info"]}
