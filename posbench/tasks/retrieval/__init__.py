"""Retrieval: can a method use what is far away? Train at L_train on text mixed with retrieval
probes (``probes``), then score the probes' answers, decoded through the KV cache, at L_valid =
L_train x factor; Wilson intervals, effective length, learn first. Details: docs/tasks/retrieval.md.
"""
from __future__ import annotations

from pathlib import Path
from typing import Literal, Optional, get_args

from pydantic import BaseModel, ConfigDict, Field, model_validator

from posbench.core.registry import register_task
from posbench.core.task import Metric, Task
from posbench.engine import tracking
from posbench.report.learn_first import comparable_length, learned
from posbench.report.stats import effective_length, wilson_interval
from posbench.tasks.seeds import checkpoint_name, combine_accuracy_seeds, seed_list
from posbench.tasks.training import BUDGET_METRICS, CorpusSettings, TrainSettings, open_corpus

# torch, numpy, the probes, the model and the scoring (posbench.tasks.retrieval.train_eval) are imported inside
# the functions: validating or listing suites imports this module, and must not wait for them.

METRICS = {
    "acc_at_train_len": Metric(title="Accuracy at L_train", unit="fraction", doc="fraction of answers exactly right at L_valid = L_train",
                          higher_is_better=True, fmt="plain", shown_in="acc@*"),
    "acc_at_max_len": Metric(title="Accuracy at the longest L_valid", unit="fraction", doc="accuracy at the longest L_valid", higher_is_better=True,
                        fmt="plain", shown_in="acc@*"),
    "effective_length": Metric(title="Effective length", unit="tokens", doc="longest L_valid with accuracy >= threshold at it and "
                          "every shorter L_valid (RULER); none when the task was not learnt at L_train", higher_is_better=True, fmt="int",
                          shown_in="acc@*"),
    "learned": Metric(title="Learnt at L_train", unit="", doc="1 when accuracy at L_train >= learned_threshold (learn first, then "
                 "compare), else 0", higher_is_better=None, fmt="int", appendix=False, shown_in="acc@*"),
    "acc@*": Metric(title="Accuracy", unit="fraction", doc="acc@<L_valid>: fraction of answers exactly right (counts summed over "
               "depths)", higher_is_better=True),
    "acc_lo@*": Metric(title="Accuracy, Wilson 95% lower bound", unit="fraction", doc="acc_lo@<L_valid>", higher_is_better=None),
    "acc_hi@*": Metric(title="Accuracy, Wilson 95% upper bound", unit="fraction", doc="acc_hi@<L_valid>", higher_is_better=None),
    "chance": Metric(title="Chance accuracy", unit="fraction", doc="accuracy of uniform guessing over the answer symbols", higher_is_better=None),
    "final_train_loss": Metric(title="Final training loss", unit="nats/token", doc="training loss at the last step (LM text and probes)"),
    "train_steps": Metric(title="Training steps", unit="steps", doc="optimizer steps", higher_is_better=None, fmt="int"),
    "stopped_at_step": Metric(title="Stopped at step", unit="steps", doc="train to criterion (stop_at_acc): the step where the held-out "
                         "accuracy at L_train reached stop_at_acc and training stopped; none when it trained the "
                         "whole budget", higher_is_better=None, fmt="int"),
    "check_acc": Metric(title="Held-out accuracy at the last check", unit="fraction", doc="teacher-forced exact match of held-out probe "
                   "examples at L_train at the last check of stop_at_acc; none without checks or when the model came from "
                   "a checkpoint", higher_is_better=None),
    "train_tokens": Metric(title="Training tokens", unit="tokens", doc="tokens trained on", higher_is_better=None, fmt="count"),
    "train_seconds": Metric(title="Training time", unit="s", doc="wall-clock training time (s); 0 when the model came from another "
                       "case's checkpoint"),
    "reused_checkpoint": Metric(title="Reused checkpoint", unit="", doc="1 when the model came from a checkpoint", higher_is_better=None, fmt="int"),
    "n_params": Metric(title="Parameters", unit="", doc="parameters of the model", higher_is_better=None, fmt="count"),
    "n_seeds": Metric(title="Seeds", unit="", doc="seeds trained (with `seeds`): every metric m is their mean, m_std the spread, "
                 "m_seed_lo/m_seed_hi its 95% t interval over seeds", higher_is_better=None, fmt="int"),
    "seeds_learnt": Metric(title="Seeds learnt", unit="", doc="with `seeds`: how many seeds learnt the task at L_train (learned is 1 "
                      "only when all did)", higher_is_better=None, fmt="int", appendix=False, shown_in="acc@*"),
    **BUDGET_METRICS,
}


def report_sections(runs, baseline=None) -> list:
    """Its report: the metric tables of ``METRICS``, then
    per probe the accuracy with Wilson intervals, its chart and the passkey heatmaps
    (``posbench.tasks.retrieval.accuracy_charts``, imported here: it needs matplotlib)."""
    from posbench.tasks.retrieval.accuracy_charts import accuracy_sections
    from posbench.tasks.retrieval.frontier import frontier_sections

    return accuracy_sections(runs, baseline) + frontier_sections(runs)


def summary_tables(runs) -> list:
    """The tables printed at the end of a run (its ``table.md``): per probe, accuracy per L_valid
    with its Wilson interval, and the effective length or "not learnt at L_train"."""
    from posbench.tasks.retrieval.accuracy_charts import summary_tables as tables
    from posbench.tasks.retrieval.frontier import frontier_tables

    return tables(runs) + frontier_tables(runs)


ProbeName = Literal["passkey", "mqar", "copy", "reverse"]


class Settings(TrainSettings):
    corpus: CorpusSettings = Field(default_factory=CorpusSettings, description="language-model text of the mix")
    batch_size: int = Field(32, ge=1)
    mix: float = Field(0.5, ge=0.0, le=1.0, description="fraction of training rows that are probe examples")
    train_probes: list[ProbeName] = Field(list(get_args(ProbeName)), min_length=1,
                                          description="probes in the training mix (one model serves them all)")
    model_per_probe: bool = Field(False, description="each probe case trains its own model on its probe alone "
                                  "(train_probes is then not used)")
    n_symbols: int = Field(16, ge=2, description="value alphabet: passkey digits, copy segments, mqar values")
    n_keys: int = Field(16, ge=1, description="mqar: key alphabet, disjoint from the values (Zoology)")
    key_len: int = Field(5, ge=1, description="passkey: symbols in the key")
    n_pairs: int = Field(8, ge=1, description="mqar: key-value pairs")
    n_queries: int = Field(4, ge=1, description="mqar: queries per example")
    segment_len: int = Field(8, ge=1, description="copy/reverse: symbols in the segment")
    filler_len: int = Field(5, ge=1, description="tokens of the repeated filler phrase")
    L_valid_factors: list[int] = Field([1, 2, 4, 8, 16], min_length=1, description="L_valid = factor * L_train")
    depths: list[float] = Field([0.0, 0.25, 0.5, 0.75, 1.0], min_length=1,
                                description="passkey: needle depths of the heatmap (0 = start, 1 = end)")
    eval_samples: int = Field(100, ge=1, description="answers scored per L_valid (passkey: split over depths)")
    eval_batch_size: int = Field(16, ge=1)
    threshold: float = Field(0.5, ge=0.0, le=1.0, description="accuracy an L_valid needs for effective_length")
    learned_threshold: float = Field(0.9, ge=0.0, le=1.0, description="accuracy at L_train a model needs to count "
                                     "as having learnt the task; below it, no effective length is reported")
    loss: Literal["all", "answers", "predictable"] = Field(
        "all", description="training loss of probe rows: every token, the answers only, or every token but the "
        "random draws outside the answers (needle symbols, mqar keys and values); language-model rows keep every token")
    reuse_checkpoint: bool = Field(True, description="evaluate an existing checkpoint instead of retraining")
    stop_at_acc: Optional[float] = Field(
        None, ge=0.0, le=1.0, description="train to criterion: stop once the exact-match accuracy of held-out "
        "probe examples at L_train (teacher-forced, which equals greedy decoding's) reaches this, checked every "
        "check_every steps; the budget stays the cap and sets the lr schedule. None: train the whole budget")
    check_every: int = Field(100, ge=1, description="steps between the held-out checks of stop_at_acc")
    check_samples: int = Field(200, ge=1, description="held-out examples per check (mqar: scored per query)")

    @model_validator(mode="after")
    def _check(self):
        if any(not 0.0 <= d <= 1.0 for d in self.depths):
            raise ValueError(f"depths must lie in [0, 1], got {self.depths}")
        self.probe_config()  # one line on inconsistent probe shapes
        return self

    def probe_config(self):
        """posbench.tasks.retrieval.probes.ProbeConfig of these settings (it checks the shapes agree)."""
        from posbench.core.config import ProbeConfig

        return ProbeConfig(n_symbols=self.n_symbols, key_len=self.key_len, n_pairs=self.n_pairs,
                           n_queries=self.n_queries, segment_len=self.segment_len, filler_len=self.filler_len,
                           n_keys=self.n_keys)


class Params(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    L_train: int = Field(ge=2, description="training length")
    probe: ProbeName = Field(description="retrieval probe evaluated")


def training_probes(case, s: Settings) -> list[str]:
    """The probes the case's model trains on: its own with ``model_per_probe``, else ``train_probes``."""
    return [case.params.probe] if s.model_per_probe else list(s.train_probes)


def checkpoint_path(case, s: Settings) -> Path | None:
    """``<run>/checkpoints/retrieval__<method>__L_train=<L>[__<probe>].pt``: with several training
    probes one model (and file) serves every probe case of the method."""
    if not case.out_dir:
        return None
    probes = training_probes(case, s)
    tail = "" if len(probes) > 1 else f"__{probes[0]}"
    return Path(case.out_dir) / "checkpoints" / f"retrieval__{case.method}__L_train={case.params.L_train}{tail}.pt"


def summarize(cells: list[dict], L: int, threshold: float, learned_threshold: float = 0.0) -> dict:
    """Per-L_valid metrics from cells: acc@L (counts summed over depths), its Wilson interval,
    acc_at_train_len, acc_at_max_len, learned (1/0; None without an accuracy at L_train) and
    effective_length (None unless learnt). A length with an oom cell has no accuracy."""
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
    return metrics


def run(case) -> dict:
    import torch

    from posbench.tasks.retrieval import probes as P
    from posbench.tasks.retrieval.train_eval import eval_length, trained_model

    s, L, probe = case.settings, case.params.L_train, case.params.probe
    cfg = s.probe_config()
    for Lv in [f * L for f in s.L_valid_factors]:
        if Lv < P.min_length(probe, cfg):
            raise ValueError(f"retrieval: L_valid {Lv} is too short for probe {probe} "
                             f"(it needs {P.min_length(probe, cfg)} tokens)")
    corpus = open_corpus(s.corpus)
    vocab = P.ProbeVocab(corpus.vocab_size, cfg)
    seeds, base = seed_list(s), checkpoint_path(case, s)
    per_seed, cells, by_distance = [], [], []
    for seed in seeds:
        ckpt = base.with_name(checkpoint_name(base.stem, seed, seeds) + ".pt") if base is not None else None
        # Curves in <run>/cases/<checkpoint name>/ (engine.tracking), beside the other probes' accuracy.
        with tracking.for_case(case, ckpt.stem if ckpt is not None else None) as tracker:
            model, metrics = trained_model(case, s, vocab, corpus.split("train"), ckpt, training_probes(case, s),
                                           tracker, seed)
            eval_dtype = getattr(torch, s.eval_dtype)
            info = model.info(case.device, eval_dtype)
            model = model.to(eval_dtype).eval()
            mine = []
            for factor in s.L_valid_factors:
                c, d = eval_length(model, probe, vocab, factor * L, s, case.device)
                mine += c
                by_distance += [dict(x, seed=seed) for x in d] if len(seeds) > 1 else d
            metrics.update(summarize(mine, L, s.threshold, s.learned_threshold))
            tracker.scalars({f"eval/{probe}/acc@{factor * L}": metrics.get(f"acc@{factor * L}")
                             for factor in s.L_valid_factors}, max(0, metrics["train_steps"] - 1))
        per_seed.append(metrics)
        cells += [dict(c, seed=seed) for c in mine] if len(seeds) > 1 else mine
    pooled = summarize(cells, L, s.threshold, s.learned_threshold)
    metrics, seed_series = combine_accuracy_seeds(per_seed, pooled, s.learned_threshold)
    metrics["chance"] = P.chance(probe, cfg)
    series = {"cells": cells, "corpus": corpus.describe(), "threshold": s.threshold,
              "learned_threshold": s.learned_threshold, **seed_series}
    if probe == "mqar":
        series["by_distance"] = by_distance
    return {"metrics": metrics, "series": series, "info": info}


TASK = register_task(Task(Settings, Params, METRICS, run, report_sections=report_sections, summary_tables=summary_tables, name="retrieval"))
