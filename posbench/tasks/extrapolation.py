"""Extrapolation: train at L_train, evaluate perplexity at L_valid = L, 2L, 4L, ... (train short,
test long; Press et al. 2022, Figure 1 and Tables 2-5).

One case = one method at one ``L_train``:
1. Train a fresh model on the corpus's ``train`` split (``posbench.train``), or reuse the case's
   checkpoint when an earlier run of the same case left one (``reuse_checkpoint``), so evaluation
   can be re-run without retraining. The checkpoint lives beside the results.
2. Evaluate on the ``valid`` split at every L_valid, in every mode: ``nonoverlapping`` (the
   paper's default), ``sliding`` (stride ``stride``), and with ``interpolate: true`` the same
   again with positions scaled by L_train / L_valid (Chen et al. 2023 for rotary; for ALiBi the
   bias scaling of SambaNova's "ALiBi Deep Dive"). One L_valid that runs out of memory becomes an
   ``oom`` cell; the other cells still run.
"""
from __future__ import annotations

import math
from pathlib import Path
from typing import Literal, Optional

import torch
from pydantic import BaseModel, ConfigDict, Field, model_validator

from .. import registry
from ..data import load_corpus
from ..evaluate import evaluate
from ..model import PRESETS, TransformerLM, model_config
from ..train import TrainConfig, load_checkpoint, train
from . import Diverged, TaskSettings

METRICS = {
    "ppl_at_train_len": "perplexity at L_valid = L_train, non-overlapping",
    "ppl_at_max_len": "perplexity at the longest L_valid, non-overlapping",
    "best_ppl": "best achievable perplexity of the corpus (synthetic Markov source), else null",
    "final_train_loss": "training loss at the last step (nats/token)",
    "train_steps": "optimizer steps",
    "train_tokens": "tokens trained on",
    "train_seconds": "wall-clock training time (s)",
    "n_params": "parameters of the model",
}


class CorpusSettings(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    kind: Literal["synthetic", "wikitext", "wikitext-103", "wikitext-2", "text"] = "synthetic"
    path: Optional[str] = Field(None, description="data folder or file; default $POSBENCH_DATA_DIR (--data sets it)")
    level: Literal["word", "byte"] = "byte"
    splits: Optional[dict[str, str]] = Field(None, description="corpus split -> file split, e.g. {train: test}")
    size: Optional[int] = Field(None, ge=1, description="cap on tokens per split (synthetic: training tokens)")
    seed: int = 0


class Settings(TaskSettings):
    model: Literal[tuple(PRESETS)] = Field(description="model preset")  # type: ignore[valid-type]
    model_overrides: dict[str, int] = Field(default_factory=dict)
    method_options: dict[str, dict] = Field(default_factory=dict, description="per method: constructor options")
    corpus: CorpusSettings = Field(default_factory=CorpusSettings)
    steps: Optional[int] = Field(None, ge=1, description="training budget in optimizer steps ...")
    tokens: Optional[int] = Field(None, ge=1, description="... or in tokens")
    batch_size: int = Field(16, ge=1)
    lr: float = Field(1e-3, gt=0)
    warmup_steps: int = Field(50, ge=0)
    precision: Literal["auto", "float32", "bfloat16", "float16"] = "auto"
    eval_dtype: Literal["float32", "bfloat16", "float16"] = "float32"
    L_valid_factors: list[int] = Field([1, 2, 4, 8, 16], min_length=1, description="L_valid = factor * L_train")
    modes: list[Literal["nonoverlapping", "sliding"]] = Field(["nonoverlapping", "sliding"], min_length=1)
    stride: int = Field(1, ge=1, description="sliding-window stride S (1 is the paper's analysis; capped at L_valid)")
    interpolate: bool = Field(False, description="also evaluate with positions scaled by L_train / L_valid")
    eval_tokens: Optional[int] = Field(None, ge=2, description="use the first N tokens of the valid split")
    eval_batch_size: int = Field(8, ge=1)
    reuse_checkpoint: bool = Field(True, description="evaluate an existing checkpoint of this case instead of retraining")

    @model_validator(mode="after")
    def _one_budget(self):
        if (self.steps is None) == (self.tokens is None):
            raise ValueError("give exactly one training budget: steps or tokens")
        return self


class Params(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    L_train: int = Field(ge=2, description="training length")


def checkpoint_path(case) -> Path | None:
    if not getattr(case, "out_dir", ""):
        return None
    return Path(case.out_dir) / "checkpoints" / (case.id.replace("/", "__") + ".pt")


def run(case) -> dict:
    s, L = case.settings, case.params.L_train
    if s.threads:
        torch.set_num_threads(s.threads)
    for folder in case.methods_dirs:
        registry.add_methods_dir(folder)
    device = torch.device(case.device)
    c = s.corpus
    corpus = load_corpus(c.kind, path=c.path, level=c.level, seed=c.seed, splits=c.splits, size=c.size)
    overrides = {"vocab_size": corpus.vocab_size, **s.model_overrides}
    cfg = model_config(s.model, case.method, method_options=s.method_options.get(case.method, {}), **overrides)
    ckpt = checkpoint_path(case)
    metrics: dict = {"best_ppl": corpus.best_ppl}
    series: dict = {}
    if ckpt is not None and ckpt.exists() and s.reuse_checkpoint:
        model, blob = load_checkpoint(ckpt, device)
        result = blob["result"]
        series["train_loss"] = [list(p) for p in result["curve"]]
        metrics.update(final_train_loss=result["final_loss"], train_steps=result["steps"],
                       train_tokens=result["tokens"], train_seconds=result["seconds"], reused_checkpoint=1)
    else:
        torch.manual_seed(s.seed)
        model = TransformerLM(cfg)
        tcfg = TrainConfig(seq_len=L, batch_size=s.batch_size, steps=s.steps, tokens=s.tokens, lr=s.lr,
                           warmup_steps=s.warmup_steps, precision=s.precision, seed=s.seed)
        from ..data import batches

        try:
            result = train(model, batches(corpus.split("train"), L, s.batch_size, seed=s.seed), tcfg, device, ckpt)
        except RuntimeError as exc:
            if type(exc).__name__ == "Diverged":
                raise Diverged(str(exc)) from exc
            raise
        series["train_loss"] = [list(p) for p in result.curve]
        metrics.update(final_train_loss=result.final_loss, train_steps=result.steps,
                       train_tokens=result.tokens, train_seconds=result.seconds, reused_checkpoint=0)
    metrics["n_params"] = model.num_parameters()

    valid = corpus.split("valid")
    dtype = getattr(torch, s.eval_dtype)
    model = model.to(dtype)
    evals, curves = [], {}
    for interpolate in ([False, True] if s.interpolate else [False]):
        for mode in s.modes:
            for factor in s.L_valid_factors:
                Lv = factor * L
                stride = min(s.stride, Lv) if mode == "sliding" else None
                cell = {"mode": mode, "L_valid": Lv, "stride": stride, "interpolate": interpolate,
                        "ppl": None, "loss": None, "tokens": 0, "status": "ok", "message": ""}
                try:
                    r = evaluate(model, valid, Lv, mode=mode, stride=stride, batch_size=s.eval_batch_size,
                                 interpolate_from=L if interpolate else None, max_tokens=s.eval_tokens,
                                 device=device)
                    cell.update(ppl=r.ppl, loss=r.loss, tokens=r.n_tokens_scored)
                    key = f"{mode}@{Lv}" + ("@interp" if interpolate else "")
                    curves[key] = [float(x) for x in r.per_position_loss]
                    metrics[f"ppl@{key}"] = r.ppl
                except (MemoryError, torch.cuda.OutOfMemoryError) as exc:
                    cell.update(status="oom", message=f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}")
                    if device.type == "cuda":
                        torch.cuda.empty_cache()
                evals.append(cell)
    series["evals"] = evals
    series["per_position_loss"] = curves
    by = {(e["mode"], e["L_valid"], e["interpolate"]): e["ppl"] for e in evals}
    metrics["ppl_at_train_len"] = by.get(("nonoverlapping", L, False))
    metrics["ppl_at_max_len"] = by.get(("nonoverlapping", max(s.L_valid_factors) * L, False))
    for key in ("ppl_at_train_len", "ppl_at_max_len"):
        if metrics[key] is not None and not math.isfinite(metrics[key]):
            metrics[key] = None
    return {"metrics": metrics, "series": series}
