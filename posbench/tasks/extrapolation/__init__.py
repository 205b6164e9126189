"""Extrapolation: train at L_train, evaluate perplexity at L_valid = L, 2L, 4L, ... (Press et al.
2022, Figure 1 and Tables 2-5), non-overlapping and sliding, optionally with interpolated
positions; the case's checkpoint is reused when present. Details: docs/tasks/extrapolation.md.
"""
from __future__ import annotations

import math
from pathlib import Path
from typing import Literal, Optional

from pydantic import BaseModel, ConfigDict, Field, model_validator

from posbench.core.registry import register_task
from posbench.core.task import Metric, Task, case_model_config
from posbench.engine import tracking
from posbench.report.stats import seed_interval
from posbench.tasks.pretrained import PretrainedSettings
from posbench.tasks.seeds import checkpoint_name, combine_metrics, seed_list
from posbench.tasks.training import BUDGET_METRICS, TrainSettings, budget_metrics, open_corpus

# torch, the corpus and the model are imported inside the functions that run a case: validating a
# suite imports this module for its Settings, and `bench.py validate` must not wait for torch.

METRICS = {
    "ppl_at_train_len": Metric(title="Perplexity at L_train", unit="perplexity", doc="perplexity at L_valid = L_train, non-overlapping",
                          higher_is_better=False, fmt="ppl"),
    "ppl_at_max_len": Metric(title="Perplexity at the longest L_valid", unit="perplexity",
                        doc="perplexity at the longest L_valid, non-overlapping", higher_is_better=False, fmt="ppl"),
    "ppl@*": Metric(title="Perplexity", unit="perplexity", doc="ppl@<mode>@<L_valid>[@interp]: perplexity of one evaluation",
               higher_is_better=False, fmt="ppl"),
    "best_ppl": Metric(title="Best achievable perplexity", unit="perplexity", doc="best achievable perplexity of the corpus "
                  "(synthetic sources, long run), else null", higher_is_better=None, fmt="ppl"),
    "best_ppl_eval": Metric(title="Source perplexity on the evaluated tokens", unit="perplexity",
                       doc="perplexity of the true source on the evaluated tokens (synthetic sources), "
                       "else null; each cell of series.evals has its own, series.best_per_position_loss the curves", higher_is_better=None, fmt="ppl"),
    "final_train_loss": Metric(title="Final training loss", unit="nats/token", doc="training loss at the last step (nats/token)"),
    "train_steps": Metric(title="Training steps", unit="steps", doc="optimizer steps", higher_is_better=None, fmt="int"),
    "train_tokens": Metric(title="Training tokens", unit="tokens", doc="tokens trained on", higher_is_better=None, fmt="count"),
    "train_seconds": Metric(title="Training time", unit="s", doc="wall-clock training time (s)"),
    "peak_mem_train_bytes": Metric(title="Peak training memory", unit="bytes", doc="CUDA max_memory_allocated during training, CPU peak "
                              "resident set of the worker (since training began where /proc/self/clear_refs allows, "
                              "else since the process began); none for a reused checkpoint", higher_is_better=None, fmt="bytes"),
    "train_s_per_token": Metric(title="Training time per token", unit="s", doc="train_seconds / train_tokens: the frontier's cost; none "
                           "for a reused checkpoint", higher_is_better=None),
    "reused_checkpoint": Metric(title="Reused checkpoint", unit="", doc="1 when the model came from the case's checkpoint", higher_is_better=None, fmt="int"),
    "n_params": Metric(title="Parameters", unit="", doc="parameters of the model", higher_is_better=None, fmt="count"),
    "n_seeds": Metric(title="Seeds", unit="", doc="seeds averaged (with `seeds`): every metric m is their mean, m_std the spread, "
                 "m_seed_lo/m_seed_hi its 95% t interval over seeds", higher_is_better=None, fmt="int"),
    "passkey@*": Metric(title="Passkey accuracy", unit="", doc="passkey@<L_valid>[@interp]: share of text passkey probes answered "
                   "exactly (pretrained checkpoints, --model hf:DIR)", higher_is_better=True, fmt="plain"),
    "decode_tpot_ms@*": Metric(title="Decode time per token", unit="ms", doc="decode_tpot_ms@<L_valid>: one greedy decode step with a "
                          "KV cache at context L_valid, batch 1, median over decode_repeats of each repeat's median "
                          "(decode_tokens steps; the frontier's decode cost)", higher_is_better=False, fmt="ms"),
    "decode_tpot_ms_min@*": Metric(title="Decode time per token, fastest repeat", unit="ms", doc="decode_tpot_ms_min@<L_valid>: the "
                              "fastest repeat's median decode step", higher_is_better=None, fmt="ms"),
    "decode_tpot_ms_max@*": Metric(title="Decode time per token, slowest repeat", unit="ms", doc="decode_tpot_ms_max@<L_valid>: the "
                              "slowest repeat's median decode step", higher_is_better=None, fmt="ms"),
    "decode_ttft_ms@*": Metric(title="Prefill time", unit="ms", doc="decode_ttft_ms@<L_valid>: prefill of a (1, L_valid) prompt, median "
                          "over decode_repeats", higher_is_better=False, fmt="ms"),
    **BUDGET_METRICS,
}


class Settings(TrainSettings, PretrainedSettings):
    L_valid_factors: list[int] = Field([1, 2, 4, 8, 16], min_length=1, description="L_valid = factor * L_train")
    L_valid: Optional[list[int]] = Field(None, min_length=1, description="evaluation lengths in tokens, the same for "
                                         "every L_train (the frontier's target lengths); replaces L_valid_factors")
    modes: list[Literal["nonoverlapping", "sliding"]] = Field(["nonoverlapping", "sliding"], min_length=1)
    stride: int = Field(1, ge=1, description="sliding-window stride S (1 is the paper's analysis; capped at L_valid)")
    interpolate: bool = Field(False, description="also evaluate with positions scaled by L_train / L_valid")
    eval_tokens: Optional[int] = Field(None, ge=2, description="use the first N tokens of the valid split")
    eval_batch_size: int = Field(8, ge=1)
    reuse_checkpoint: bool = Field(True, description="evaluate an existing checkpoint of this case instead of retraining")
    decode_tokens: Optional[int] = Field(None, ge=1, description="also time this many greedy decode steps with a KV "
                                         "cache at each L_valid (decode_tpot_ms@<L_valid>: the frontier's decode cost)")
    decode_repeats: int = Field(3, ge=1, description="repeats of the decode cost (a prefill and decode_tokens steps "
                                "each): its median and the fastest and slowest repeat")

    @model_validator(mode="after")
    def _lengths(self):
        if self.L_valid is not None and any(v < 2 for v in self.L_valid):
            raise ValueError(f"L_valid lengths must be at least 2 tokens, got {self.L_valid}")
        return self

    def valid_lengths(self, L: int) -> list[int]:
        """The evaluation lengths at L_train = L: ``L_valid`` when given, else factor x L."""
        return sorted(set(self.L_valid)) if self.L_valid else [f * L for f in self.L_valid_factors]


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

    from posbench.engine.timing import make_device

    cfg = case_model_config(case, method_options, vocab_size=corpus.vocab_size)
    meter = make_device(torch_device_type(case.device))
    meter.reset_peak()  # the training's own peak, apart from an earlier seed's and the evaluations'
    model, r, reused = train_or_load(cfg, s.train_config(L, seed), lambda: batches(corpus.split("train"), L,
                                     s.batch_size, seed=seed), case.device, ckpt, s.reuse_checkpoint, tracker)
    peak = None if reused else meter.peak()["allocated"]
    series = {"train_loss": [list(p) for p in r.curve], "corpus": corpus.describe()}
    metrics = dict(final_train_loss=r.final_loss, train_steps=r.steps, train_tokens=r.tokens, train_seconds=r.seconds,
                   reused_checkpoint=int(reused), n_params=model.num_parameters(), best_ppl=corpus.best_ppl,
                   peak_mem_train_bytes=peak, train_s_per_token=None if reused or not r.tokens else r.seconds / r.tokens,
                   **budget_metrics(r))
    return model, metrics, series


def torch_device_type(device) -> str:
    """``cpu`` or ``cuda`` of a case's device string (``cuda:1`` -> ``cuda``)."""
    return str(device).split(":")[0]


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
    if s.pretrained:  # --model hf:DIR: a checkpoint from disk, nothing trained
        from posbench.tasks.extrapolation.pretrained import run_pretrained

        return run_pretrained(case, eval_cell)
    corpus = open_corpus(s.corpus)
    seeds = seed_list(s)
    runs = []
    for seed in seeds:
        name = checkpoint_name(case.id, seed, seeds)  # one checkpoint per seed
        # Curves in <run>/cases/<name>/ (engine.tracking): TensorBoard when installed.
        with tracking.for_case(case, name) as tracker:
            runs.append(run_one_seed(case, s, corpus, L, seed, checkpoint_path(case, name), tracker))
    result = combine_seeds(runs, seeds)
    if s.decode_tokens:  # the decode cost depends on the method and length, not the weights: once a case
        from posbench.tasks.decode.frontier import case_decode_cost

        result["metrics"].update(case_decode_cost(case, s, corpus.vocab_size, s.valid_lengths(L)))
    return result


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
            for Lv in s.valid_lengths(L):
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
    metrics["ppl_at_max_len"] = by.get(("nonoverlapping", max(s.valid_lengths(L)), False))
    for key in ("ppl_at_train_len", "ppl_at_max_len"):
        if metrics[key] is not None and not math.isfinite(metrics[key]):
            metrics[key] = None
    return {"metrics": metrics, "series": series, "info": info}


def combine_seeds(runs: list[dict], seeds: list[int]) -> dict:
    """One result from one per seed. A single seed is returned as it is. Several: the metrics of
    ``posbench.tasks.seeds.combine_metrics`` (mean, ``_std``, the 95% t interval over seeds
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
        merged = dict(cell, ppl=mean if n else None, ppl_std=std if n else None, ppl_seed_lo=lo, ppl_seed_hi=hi,
                      ppl_by_seed=ppls, n_seeds=n)
        merged["status"] = "ok" if n == len(ppls) else next(
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


# -- its part of the report ----------------------------------------------------------------------
# The paper's layout: a perplexity table per evaluation mode, methods x L_valid, each followed by
# Figure 1 and the loss by position. Its modules import the report (pandas, matplotlib), so they
# are imported only when a report, a run's summary or a comparison asks.


def report_sections(runs, baseline=None) -> list:
    """The perplexity tables with their charts (no ratios: a perplexity is read against the bound),
    then the frontier (``frontier``) of runs with a compute budget or several seeds."""
    from posbench.tasks.extrapolation.frontier import frontier_sections
    from posbench.tasks.extrapolation.ppl_charts import ppl_sections

    return ppl_sections(runs) + frontier_sections(runs)


def summary_tables(runs) -> list:
    """The perplexity tables, then the frontier's verdict tables, printed at the end of a run."""
    from posbench.tasks.extrapolation.frontier import frontier_tables
    from posbench.tasks.extrapolation.ppl_tables import extrapolation_tables

    return extrapolation_tables(runs) + frontier_tables(runs)


def compare_values(row) -> dict:
    """A perplexity per evaluation cell (``ppl@<mode>@<L_valid>...``), OOM cells included."""
    from posbench.tasks.extrapolation.ppl_tables import eval_values

    return eval_values(row)


TASK = register_task(Task(Settings, Params, METRICS, run, REPORT_ORDER=20,  # after efficiency, before kernels
            report_sections=report_sections, summary_tables=summary_tables, compare_values=compare_values, name="extrapolation"))
