"""The extension task on a Hugging Face checkpoint (``--model hf:DIR``): each recipe applied through
``posbench.hf``, k = 0 evaluated as loaded, k > 0 fine-tuned in float32 through the training engine
where memory allows. Details: docs/tasks/extension.md.
"""

from __future__ import annotations

import gc
import types

import torch

from posbench.core.outcome import Unavailable
from posbench.hf.folder_check import LENGTH_KEYS
from posbench.protocols.seeds import seed_list
from posbench.tasks.extension.finetune import (
    FINETUNE_DATA_SEED,
    Lengths,
    combine_seeds,
    finetune_batch_size,
    finetune_config,
    headline,
    perplexities,
)
from posbench.tasks.extension.regimes import PLAIN, SCALED_METHOD, checkpoint_misfit

BYTES_PER_PARAM = 16  # float32 weights, gradients and AdamW's two moments
BIG_MODEL = 10_000_000  # parameters from which a finished model's memory is collected at once


def trained_length(config, s) -> tuple[int, str]:
    """(L_train, where it came from): ``pretrained_L_train`` when set, else the config's length."""
    if s.pretrained_L_train is not None:
        return s.pretrained_L_train, "setting pretrained_L_train"
    for key in LENGTH_KEYS:
        value = getattr(config, key, None)
        if isinstance(value, int) and value >= 2:
            return value, f"config.json {key}"
    raise ValueError(
        f"{s.pretrained}: config.json names no training length ({' or '.join(LENGTH_KEYS)}); allowed: "
        "set pretrained_L_train=N, the length the checkpoint was trained at (BLOOM: 2048)"
    )


def available_memory(device) -> tuple[int | None, str]:
    """(bytes free for the fine-tune, where the number came from); None where nothing says."""
    device = torch.device(device)
    if device.type == "cuda":
        free, _total = torch.cuda.mem_get_info(device)
        return int(free), f"free on {device} (torch.cuda.mem_get_info)"
    try:
        import psutil
    except ImportError:
        psutil = None
    if psutil is not None:
        return int(psutil.virtual_memory().available), "available RAM (psutil)"
    try:
        with open("/proc/meminfo", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024, "available RAM (/proc/meminfo MemAvailable)"
    except OSError:
        pass
    return None, "unknown"


def check_memory(n_params: int, s, device) -> int:
    """The fine-tune's estimate in bytes; ``Unavailable`` when it exceeds the memory there is."""
    need = n_params * BYTES_PER_PARAM
    if s.finetune_memory_bytes is not None:
        have, where = s.finetune_memory_bytes, "setting finetune_memory_bytes"
    else:
        have, where = available_memory(device)
    if have is not None and need > have:
        raise Unavailable(
            f"fine-tuning needs about {need / 2**30:.3g} GiB ({n_params:,} parameters x "
            f"{BYTES_PER_PARAM} bytes: float32 weights, gradients, AdamW moments; activations on top) "
            f"and {where} is {have / 2**30:.3g} GiB; allowed: finetune_steps [0] (zero-shot), a "
            "smaller checkpoint or more memory"
        )
    return need


def recipe_lm(ckpt, recipe: str, L_train: int, L_target: int, bias_dtype: str = "float32"):
    """The checkpoint under ``recipe`` as posbench's evaluation calls it (``PretrainedLM``); the
    scaled rotary recipes with the static factor L_target / L_train, as on posbench's own models."""
    from posbench.hf.lm import PretrainedLM

    if ckpt.family == "rope" and recipe == "drope":
        from posbench.hf.rope import DropeRecipe

        return PretrainedLM(ckpt, DropeRecipe(ckpt.model))
    if ckpt.family == "rope":
        from posbench.hf.rope import RopeRecipe

        method, options = SCALED_METHOD.get(recipe, "rotary"), {}
        if recipe in SCALED_METHOD:
            options = {"factor": L_target / L_train}
        return PretrainedLM(ckpt, RopeRecipe(ckpt.model, method, options, L_train))
    from posbench.hf.alibi import AlibiRecipe

    scale = L_train / L_target if recipe == "interpolate" else 1.0
    return PretrainedLM(ckpt, AlibiRecipe(ckpt.model, ckpt.model_type, "alibi", {"bias_dtype": bias_dtype}, scale))


class Trainable(torch.nn.Module):
    """The checkpoint under its recipe as ``posbench.engine.train.train`` drives a model."""

    def __init__(self, lm):
        super().__init__()
        self.model = lm.model  # the parameters the optimizer sees
        self.lm = lm
        # engine.train counts flops of registry methods only; a checkpoint's name is none
        self.cfg = types.SimpleNamespace(method=f"hf:{lm.ckpt.model_type}")

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        return self.lm(idx)  # (B, T, V)


def finetune_checkpoint(lm, s, train_tokens, L_target: int, k: int, seed: int, device):
    """k steps of ``posbench.engine.train.train`` at L_target on the corpus's train split: a fresh
    AdamW, the trained path's warm-up and cosine decay; the checkpoint's weights train in place."""
    from posbench.data.corpus import batches
    from posbench.engine.train import train

    cfg = finetune_config(s, L_target, k, seed)
    return train(Trainable(lm), batches(train_tokens, L_target, cfg.batch_size, seed=seed + FINETUNE_DATA_SEED), cfg, device)


def checkpoint_quality(lm, s, valid, at: Lengths, device, seed: int) -> tuple[dict, dict]:
    """(``ppl@<mode>@<L_valid><suffix>`` and ``passkey@<L_valid><suffix>``, the probes' details) of
    the checkpoint: perplexity on posbench's windows, the text passkey probe."""
    L_train, lengths, suffix = at.L_train, at.lengths, at.suffix
    from posbench.hf.passkey import Probes, passkey_accuracy

    lm.eval()
    out = perplexities(lm, s, valid, L_train, lengths, device, suffix)
    probes = {}
    for Lv in lengths:
        if lm.ckpt.tokenizer is None or not s.passkey_trials:
            out[f"passkey@{Lv}{suffix}"] = None
            continue
        r = passkey_accuracy(lm, Probes(lm.ckpt.tokenizer, Lv, s.passkey_trials, seed), device, s.eval_batch_size)
        out[f"passkey@{Lv}{suffix}"], probes[f"{Lv}{suffix}"] = r["accuracy"], r
    return out, probes


def family_of(s) -> tuple[str, str]:
    """(model_type, family) of the checkpoint, read from its config.json alone."""
    from posbench.hf.checkpoint import FAMILIES, folder_of, model_type_of

    model_type = model_type_of(folder_of(s.pretrained))
    return model_type, FAMILIES[model_type]


def load(s, dtype, device):
    from posbench.hf.checkpoint import load as load_checkpoint

    return load_checkpoint(s.pretrained, dtype, device)


def release(device, n_params: int) -> None:
    """Free a finished model's memory before the next is loaded (the recipes' hooks make cycles)."""
    if n_params >= BIG_MODEL:  # a full collection costs about 0.4 s once transformers is imported
        gc.collect()
    if torch.device(device).type == "cuda":
        torch.cuda.empty_cache()


def run_one_seed(case, s, seed: int, L: int, data: tuple) -> dict:
    """Per k: the checkpoint loaded afresh, the recipe applied, k fine-tuning steps (float32), then
    the evaluations in ``eval_dtype``."""
    p, device, eval_dtype = case.params, case.device, getattr(torch, s.eval_dtype)
    train_tokens, valid = data
    L_target = s.target_factor * L
    lengths = [f * L_target for f in s.L_valid_factors]
    metrics, curves, probes, checks = {}, {}, {}, {}
    for k in s.ks():
        lm = recipe_lm(load(s, torch.float32 if k else eval_dtype, device), p.recipe, L, L_target, p.bias_dtype)
        if k:
            r = finetune_checkpoint(lm, s, train_tokens, L_target, k, seed, device)
            metrics[f"finetune_seconds@k{k}"], metrics[f"finetune_loss@k{k}"] = r.seconds, r.final_loss
            curves[f"k{k}"] = [list(c) for c in r.curve]
            lm.model.to(eval_dtype)
            lm.recipe.refresh()  # the bias hooks and rotary frequencies for the evaluation dtype
        q, probes[f"k{k}"] = checkpoint_quality(lm, s, valid, Lengths(L, lengths, f"@k{k}"), device, seed)
        metrics.update(q)
        checks[f"k{k}"] = {str(n): c for n, c in getattr(lm.recipe, "checks", {}).items()}
        n_params = lm.num_parameters()
        del lm
        release(device, n_params)
    metrics.update(headline(metrics, s, L_target, lengths))
    return {"metrics": metrics, "series": {"finetune_loss": curves, "passkey": probes, "rope_checks": checks}}


def run_pretrained(case) -> dict:
    """The case's result on the checkpoint: ``Unavailable`` when the recipe's method does not fit its
    family or the fine-tune would not fit memory; else every seed's result, combined."""
    s, p = case.settings, case.params
    model_type, family = family_of(s)
    misfit = checkpoint_misfit(case.method, p.recipe, s.pretrained)
    if misfit:
        raise Unavailable(misfit)
    from posbench.protocols.pretrained_eval import pretrained_tokens

    ckpt = load(s, getattr(torch, s.eval_dtype), case.device)
    L, source = trained_length(ckpt.model.config, s)
    n_params = sum(t.numel() for t in ckpt.model.parameters())
    # checked before any evaluation, with the eval copy loaded (freed before a fine-tune): a cautious check
    need = check_memory(n_params, s, case.device) if any(s.ks()) else None
    valid, corpus = pretrained_tokens(s, ckpt)
    # the fine-tunes read at most the tokens their steps consume
    most = max(s.ks()) * finetune_batch_size(s) * s.target_factor * L + s.target_factor * L + 1
    train_tokens = pretrained_tokens(s, ckpt, "train", most)[0] if any(s.ks()) else None
    describe = ckpt.describe()
    base = recipe_lm(ckpt, PLAIN[case.method], L, s.target_factor * L)
    base_q, _ = checkpoint_quality(base, s, valid, Lengths(L, [L], ""), case.device, s.seed)
    del ckpt, base
    release(case.device, n_params)
    mode = "nonoverlapping" if "nonoverlapping" in s.modes else s.modes[0]
    shared = {
        "base_ppl_at_train_len": base_q[f"ppl@{mode}@{L}"],
        "base_passkey_at_train_len": base_q[f"passkey@{L}"],
        "L_target": s.target_factor * L,
        "L_train": L,
        "n_params": n_params,
        "finetune_memory_needed_bytes": need,
    }
    seeds = seed_list(s)
    runs = []
    for seed in seeds:
        r = run_one_seed(case, s, seed, L, (train_tokens, valid))
        r["metrics"].update(shared)
        r["info"] = {
            "model": f"hf:{model_type}",
            "attn_backend": "transformers",
            "compute_dtype": s.eval_dtype,
            "bias_dtype": p.bias_dtype if family == "alibi" else "",
        }
        runs.append(r)
    out = combine_seeds(runs, seeds, s, L, corpus)
    out["series"].update(checkpoint=describe, L_train_source=source)
    return out
