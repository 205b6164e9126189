"""Extrapolation: train at L_train, evaluate perplexity at L_valid = L, 2L, 4L, ... (Press et al.
2022, Figure 1 and Tables 2-5), non-overlapping and sliding, optionally with interpolated
positions; the case's checkpoint is reused when present. Details: docs/tasks/extrapolation.md.
"""
from __future__ import annotations

import math
from pathlib import Path
from typing import Literal, Optional

from pydantic import BaseModel, ConfigDict, Field, model_validator

from posbench.core.task import Metric, Task, case_model_config
from posbench.engine import tracking
from posbench.tasks.training import BUDGET_METRICS, TrainSettings, budget_metrics, open_corpus

# torch, the corpus and the model are imported inside the functions that run a case: validating a
# suite imports this module for its Settings, and `bench.py validate` must not wait for torch.

M = Metric
METRICS = {
    "ppl_at_train_len": M("Perplexity at L_train", "perplexity", "perplexity at L_valid = L_train, non-overlapping",
                          False, "ppl"),
    "ppl_at_max_len": M("Perplexity at the longest L_valid", "perplexity",
                        "perplexity at the longest L_valid, non-overlapping", False, "ppl"),
    "ppl@*": M("Perplexity", "perplexity", "ppl@<mode>@<L_valid>[@interp]: perplexity of one evaluation",
               False, "ppl"),
    "best_ppl": M("Best achievable perplexity", "perplexity", "best achievable perplexity of the corpus "
                  "(synthetic sources, long run), else null", None, "ppl"),
    "best_ppl_eval": M("Source perplexity on the evaluated tokens", "perplexity",
                       "perplexity of the true source on the evaluated tokens (synthetic sources), "
                       "else null; each cell of series.evals has its own, series.best_per_position_loss the curves", None, "ppl"),
    "final_train_loss": M("Final training loss", "nats/token", "training loss at the last step (nats/token)"),
    "train_steps": M("Training steps", "steps", "optimizer steps", None, "int"),
    "train_tokens": M("Training tokens", "tokens", "tokens trained on", None, "count"),
    "train_seconds": M("Training time", "s", "wall-clock training time (s)"),
    "reused_checkpoint": M("Reused checkpoint", "", "1 when the model came from the case's checkpoint", None, "int"),
    "n_params": M("Parameters", "", "parameters of the model", None, "count"),
    "n_seeds": M("Seeds", "", "seeds averaged (with `seeds`): every metric m is their mean, m_std the spread",
                 None, "int"),
    **BUDGET_METRICS,
}


class Settings(TrainSettings):
    L_valid_factors: list[int] = Field([1, 2, 4, 8, 16], min_length=1, description="L_valid = factor * L_train")
    modes: list[Literal["nonoverlapping", "sliding"]] = Field(["nonoverlapping", "sliding"], min_length=1)
    stride: int = Field(1, ge=1, description="sliding-window stride S (1 is the paper's analysis; capped at L_valid)")
    interpolate: bool = Field(False, description="also evaluate with positions scaled by L_train / L_valid")
    eval_tokens: Optional[int] = Field(None, ge=2, description="use the first N tokens of the valid split")
    eval_batch_size: int = Field(8, ge=1)
    reuse_checkpoint: bool = Field(True, description="evaluate an existing checkpoint of this case instead of retraining")
    seeds: Optional[list[int]] = Field(
        None, min_length=1, description="train and evaluate once per seed (weights and batch order); metrics are "
        "the mean, with <metric>_std (sample std) and n_seeds; replaces `seed`")

    @model_validator(mode="after")
    def _distinct_seeds(self):
        if self.seeds is not None and len(set(self.seeds)) != len(self.seeds):
            raise ValueError(f"seeds must be distinct, got {self.seeds}")
        return self


class Params(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    L_train: int = Field(ge=2, description="training length")


def checkpoint_path(case, name: str | None = None) -> Path | None:
    """Where this case's trained model is kept: ``<run folder>/checkpoints/<case id>.pt``."""
    if not case.out_dir:
        return None
    return Path(case.out_dir) / "checkpoints" / ((name or case.id).replace("/", "__") + ".pt")


def trained_model(case, s: Settings, corpus, L: int, ckpt: Path | None, method_options: dict, seed: int,
                  tracker=None):
    """Train at L with ``seed`` (or load the checkpoint an earlier run of this case left);
    (model, metrics, series). ``tracker``: where the training curves go (``engine.tracking``)."""
    from posbench.data.corpus import batches
    from posbench.engine.train import trained_model as train_or_load

    cfg = case_model_config(case, method_options, vocab_size=corpus.vocab_size)
    model, r, reused = train_or_load(cfg, s.train_config(L, seed), lambda: batches(corpus.split("train"), L,
                                     s.batch_size, seed=seed), case.device, ckpt, s.reuse_checkpoint, tracker)
    series = {"train_loss": [list(p) for p in r.curve], "corpus": corpus.describe()}
    metrics = dict(final_train_loss=r.final_loss, train_steps=r.steps, train_tokens=r.tokens, train_seconds=r.seconds,
                   reused_checkpoint=int(reused), n_params=model.num_parameters(), best_ppl=corpus.best_ppl,
                   **budget_metrics(r))
    return model, metrics, series


def eval_cell(model, tokens, L: int, Lv: int, mode: str, s: Settings, device, interpolate: bool = False,
              tracker=None, step: int = 0):
    """One (mode, L_valid) evaluation as a cell dict, and its per-position curve (None on OOM);
    its perplexity also goes to ``tracker`` at ``step`` when given."""
    import torch

    from posbench.engine.evaluate import evaluate

    stride = min(s.stride, Lv) if mode == "sliding" else None
    cell = {"mode": mode, "L_valid": Lv, "stride": stride, "interpolate": interpolate,
            "ppl": None, "loss": None, "tokens": 0, "status": "ok", "message": ""}
    try:
        r = evaluate(model, tokens, Lv, mode=mode, stride=stride, batch_size=s.eval_batch_size,
                     interpolate_from=L if interpolate else None, max_tokens=s.eval_tokens, device=device,
                     tracker=tracker, step=step)
    except (MemoryError, torch.cuda.OutOfMemoryError) as exc:
        text = str(exc).splitlines()
        cell.update(status="oom", message=f"{type(exc).__name__}: {text[0] if text else ''}")
        if torch.device(device).type == "cuda":
            torch.cuda.empty_cache()
        return cell, None
    cell.update(ppl=r.ppl, loss=r.loss, tokens=r.n_tokens_scored)
    return cell, [float(x) for x in r.per_position_loss]


def source_bound(oracle, Lv: int, mode: str, s: Settings) -> tuple[float, list[float]] | None:
    """The true source's perplexity and per-position loss on exactly the tokens ``eval_cell`` scores
    at (mode, Lv), or None without a known source. ``oracle``: ``Corpus.oracle_token_loss`` of the
    evaluated tokens."""
    if oracle is None:
        return None
    from posbench.engine.evaluate import evaluate_source

    stride = min(s.stride, Lv) if mode == "sliding" else None
    b = evaluate_source(oracle, Lv, mode=mode, stride=stride, max_tokens=s.eval_tokens)
    return b.ppl, [float(x) for x in b.per_position_loss]


def run(case) -> dict:
    s, L = case.settings, case.params.L_train
    corpus = open_corpus(s.corpus)
    seeds = s.seeds or [s.seed]
    runs = []
    for seed in seeds:
        # One checkpoint per seed; a single seed keeps the case id as its name (older run folders).
        name = case.id if len(seeds) == 1 else f"{case.id}@seed{seed}"
        # Curves in <run>/cases/<name>/ (engine.tracking): TensorBoard when installed.
        with tracking.for_case(case, name) as tracker:
            runs.append(run_one_seed(case, s, corpus, L, seed, checkpoint_path(case, name), tracker))
    return combine_seeds(runs, seeds)


def run_one_seed(case, s: Settings, corpus, L: int, seed: int, ckpt: Path | None, tracker=None) -> dict:
    """Train (or reload) and evaluate one model: the task's result for one seed; its curves go to
    ``tracker`` (evaluations at the last training step)."""
    import numpy as np
    import torch

    model, metrics, series = trained_model(case, s, corpus, L, ckpt, s.method_options.get(case.method, {}), seed,
                                           tracker)
    from posbench.tasks.extrapolation.bucket_coverage import untrained_buckets

    series["untrained_buckets"] = untrained_buckets(model.method, L)  # None: the method buckets no distance
    valid = corpus.split("valid")
    oracle = corpus.oracle_token_loss(valid[: s.eval_tokens])  # (N,) or None
    metrics["best_ppl_eval"] = None if oracle is None else math.exp(float(np.nanmean(oracle)))
    eval_dtype = getattr(torch, s.eval_dtype)
    info = model.info(case.device, eval_dtype)
    model = model.to(eval_dtype)
    evals, curves, best_curves = [], {}, {}
    for interpolate in ([False, True] if s.interpolate else [False]):
        for mode in s.modes:
            for factor in s.L_valid_factors:
                Lv = factor * L
                cell, curve = eval_cell(model, valid, L, Lv, mode, s, case.device, interpolate, tracker,
                                        max(0, metrics["train_steps"] - 1))
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
    if oracle is not None:
        series["best_per_position_loss"] = best_curves
    by = {(e["mode"], e["L_valid"], e["interpolate"]): e["ppl"] for e in evals}
    metrics["ppl_at_train_len"] = by.get(("nonoverlapping", L, False))
    metrics["ppl_at_max_len"] = by.get(("nonoverlapping", max(s.L_valid_factors) * L, False))
    for key in ("ppl_at_train_len", "ppl_at_max_len"):
        if metrics[key] is not None and not math.isfinite(metrics[key]):
            metrics[key] = None
    return {"metrics": metrics, "series": series, "info": info}


def combine_seeds(runs: list[dict], seeds: list[int]) -> dict:
    """One result from one per seed. A single seed is returned as it is. Several: every numeric
    metric becomes the mean over the seeds that have it, with ``<metric>_std`` (sample standard
    deviation, ddof 1), ``n_seeds`` and ``series["<metric>_by_seed"]`` (None where a seed has no
    value); the evaluation cells carry ``ppl_std``; per-position curves are averaged; each seed's
    training curve is kept under ``series["train_loss_by_seed"]``."""
    if len(runs) == 1:
        return runs[0]
    metrics: dict = {"n_seeds": len(runs)}
    series: dict = {"seeds": list(seeds)}
    for key in runs[0]["metrics"]:
        values = [r["metrics"].get(key) for r in runs]
        numbers = [float(v) for v in values if isinstance(v, (int, float)) and math.isfinite(v)]
        if not numbers:
            metrics[key] = None
            continue
        metrics[key] = sum(numbers) / len(numbers)
        metrics[f"{key}_std"] = _std(numbers)
        series[f"{key}_by_seed"] = values
    first = runs[0]["series"]
    series["corpus"] = first.get("corpus")
    series["train_loss_by_seed"] = [r["series"]["train_loss"] for r in runs]
    series["train_loss"] = first["train_loss"]
    cells = []
    for i, cell in enumerate(first["evals"]):
        ppls = [r["series"]["evals"][i]["ppl"] for r in runs]
        ok = [p for p in ppls if p is not None and math.isfinite(p)]
        merged = dict(cell, ppl=sum(ok) / len(ok) if ok else None, ppl_std=_std(ok) if ok else None,
                      ppl_by_seed=ppls, n_seeds=len(ok))
        merged["status"] = "ok" if len(ok) == len(ppls) else next(
            r["series"]["evals"][i]["status"] for r in runs if r["series"]["evals"][i]["status"] != "ok")
        cells.append(merged)
    series["evals"] = cells
    curves = {}
    for key in first["per_position_loss"]:
        per = [r["series"]["per_position_loss"].get(key) for r in runs]
        if all(c is not None for c in per):
            curves[key] = [sum(vals) / len(vals) for vals in zip(*per)]
    series["per_position_loss"] = curves
    series["untrained_buckets"] = first.get("untrained_buckets")  # the same L_train for every seed
    if "best_per_position_loss" in first:  # the source's curves: the same tokens for every seed
        series["best_per_position_loss"] = first["best_per_position_loss"]
    return {"metrics": metrics, "series": series, "info": runs[0]["info"]}


def _std(values: list[float]) -> float:
    """Sample standard deviation (ddof 1); 0.0 for a single value."""
    if len(values) < 2:
        return 0.0
    mean = sum(values) / len(values)
    return math.sqrt(sum((v - mean) ** 2 for v in values) / (len(values) - 1))


# -- its part of the report ----------------------------------------------------------------------
# The paper's layout: a perplexity table per evaluation mode, methods x L_valid, each followed by
# Figure 1 and the loss by position. Its modules import the report (pandas, matplotlib), so they
# are imported only when a report, a run's summary or a comparison asks.


def report_sections(runs, baseline=None) -> list:
    """The perplexity tables with their charts (no ratios: a perplexity is read against the bound)."""
    from posbench.tasks.extrapolation.ppl_charts import ppl_sections

    return ppl_sections(runs)


def summary_tables(runs) -> list:
    """The perplexity tables, printed at the end of a run."""
    from posbench.tasks.extrapolation.ppl_tables import extrapolation_tables

    return extrapolation_tables(runs)


def compare_values(row) -> dict:
    """A perplexity per evaluation cell (``ppl@<mode>@<L_valid>...``), OOM cells included."""
    from posbench.tasks.extrapolation.ppl_tables import eval_values

    return eval_values(row)


TASK = Task(Settings, Params, METRICS, run, REPORT_ORDER=20,  # after efficiency, before kernels
            report_sections=report_sections, summary_tables=summary_tables, compare_values=compare_values)
