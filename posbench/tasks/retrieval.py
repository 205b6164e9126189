"""Retrieval: can a method *use* what is far away? Train at L_train on language-model text mixed
with retrieval probes (``posbench.probes``), then test the probes at L_valid = L_train x factor.

One case = one method, one ``L_train`` and one ``probe`` (passkey, mqar, copy, reverse):
1. Train a fresh model (``posbench.train``) on batches whose rows are, with probability ``mix``,
   a probe example (probes of ``train_probes``: by default all four, so one model per method
   serves every probe case and is trained once; its checkpoint is shared) and otherwise a window
   of the corpus (the synthetic Markov source by default, or ``--data``). The mix, budget and
   probe shapes are settings, the same for every method.
2. At every L_valid: prefill the prompt through the KV cache (``model.new_cache()``) and greedily
   decode each answer, so any method that passes the conformance kit (decoding equals the full
   forward) is scored by the same path. An answer counts when every decoded token is right
   (passkey, copy, reverse: one outcome per example; mqar: one per query, as in Zoology).
   Passkey runs a depth x length grid: the needle-in-a-haystack heatmap.

Rows carry outcome counts (``series.cells``: correct, total per L_valid and depth), so reports
recompute Wilson intervals (``posbench.stats``) after merging; ``effective_length`` is the longest
L_valid whose accuracy stays >= ``threshold`` (RULER).
"""
from __future__ import annotations

import math
from collections import defaultdict
from pathlib import Path
from typing import Literal, Optional

import numpy as np
import torch
from pydantic import BaseModel, ConfigDict, Field, model_validator

from .. import probes as P
from .. import registry
from ..model import PRESETS, KVCache, TransformerLM, model_config
from ..stats import effective_length, wilson_interval
from ..train import TrainConfig, load_checkpoint, train
from . import TaskSettings
from .extrapolation import CorpusSettings, open_corpus

METRICS = {
    "acc_at_train_len": "accuracy at L_valid = L_train (fraction of answers exactly right)",
    "acc_at_max_len": "accuracy at the longest L_valid",
    "effective_length": "longest L_valid with accuracy >= threshold at it and every shorter L_valid (tokens)",
    "chance": "accuracy of uniform guessing over the answer symbols",
    "final_train_loss": "training loss at the last step (nats/token, LM text and probes)",
    "train_steps": "optimizer steps",
    "train_tokens": "tokens trained on",
    "train_seconds": "wall-clock training time (s); 0 when the model came from another case's checkpoint",
    "n_params": "parameters of the model",
}

ProbeName = Literal["passkey", "mqar", "copy", "reverse"]


class Settings(TaskSettings):
    model: Literal[tuple(PRESETS)] = Field(description="model preset")  # type: ignore[valid-type]
    model_overrides: dict[str, int] = Field(default_factory=dict)
    method_options: dict[str, dict] = Field(default_factory=dict, description="per method: constructor options")
    corpus: CorpusSettings = Field(default_factory=CorpusSettings, description="language-model text of the mix")
    steps: Optional[int] = Field(None, ge=1, description="training budget in optimizer steps ...")
    tokens: Optional[int] = Field(None, ge=1, description="... or in tokens")
    batch_size: int = Field(32, ge=1)
    lr: float = Field(1e-3, gt=0)
    warmup_steps: int = Field(50, ge=0)
    precision: Literal["auto", "float32", "bfloat16", "float16"] = "auto"
    eval_dtype: Literal["float32", "bfloat16", "float16"] = "float32"
    mix: float = Field(0.5, ge=0.0, le=1.0, description="fraction of training rows that are probe examples")
    train_probes: list[ProbeName] = Field(list(P.PROBES), min_length=1,
                                          description="probes in the training mix (one model serves them all)")
    n_symbols: int = Field(16, ge=2, description="alphabet of keys, values and segments")
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
    reuse_checkpoint: bool = Field(True, description="evaluate an existing checkpoint instead of retraining")

    @model_validator(mode="after")
    def _check(self):
        if (self.steps is None) == (self.tokens is None):
            raise ValueError("give exactly one training budget: steps or tokens")
        if any(not 0.0 <= d <= 1.0 for d in self.depths):
            raise ValueError(f"depths must lie in [0, 1], got {self.depths}")
        self.probe_config()  # one line on inconsistent probe shapes
        return self

    def probe_config(self) -> P.ProbeConfig:
        return P.ProbeConfig(n_symbols=self.n_symbols, key_len=self.key_len, n_pairs=self.n_pairs,
                             n_queries=self.n_queries, segment_len=self.segment_len, filler_len=self.filler_len)


class Params(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    L_train: int = Field(ge=2, description="training length")
    probe: ProbeName = Field(description="retrieval probe evaluated")


# ------------------------------------------------------------------------------------ training


def mixed_batches(lm_tokens: np.ndarray, vocab: P.ProbeVocab, train_probes: list[str], seq_len: int,
                  batch_size: int, mix: float, seed: int):
    """Endless (B, T+1) int64 batches: each row is a probe example with probability ``mix`` (a
    probe of ``train_probes`` at a random depth), else a random window of ``lm_tokens``."""
    rng = np.random.default_rng([seed, 7])
    n = len(lm_tokens)
    if mix < 1.0 and n < seq_len + 1:
        raise ValueError(f"retrieval: the corpus has {n} training tokens, fewer than L_train+1 = {seq_len + 1}")
    span = np.arange(seq_len + 1)
    while True:
        out = np.empty((batch_size, seq_len + 1), dtype=np.int64)
        is_probe = rng.random(batch_size) < mix
        which = rng.integers(0, len(train_probes), size=batch_size)
        for i, probe in enumerate(train_probes):
            rows = np.flatnonzero(is_probe & (which == i))
            if len(rows):
                batch_seed = int(rng.integers(0, 2**31))  # training seeds stay below 2**31, eval's above
                out[rows] = P.generate(probe, vocab, seq_len + 1, len(rows), batch_seed).tokens
        lm_rows = np.flatnonzero(~is_probe)
        if len(lm_rows):
            starts = rng.integers(0, n - seq_len, size=len(lm_rows))
            out[lm_rows] = lm_tokens[starts[:, None] + span[None, :]]
        yield torch.from_numpy(out)


def checkpoint_path(case, s: Settings) -> Path | None:
    """``<run>/checkpoints/retrieval__<method>__L_train=<L>[__<probe>].pt``: with several training
    probes one model (and file) serves every probe case of the method."""
    if not getattr(case, "out_dir", ""):
        return None
    tail = "" if len(s.train_probes) > 1 else f"__{s.train_probes[0]}"
    return Path(case.out_dir) / "checkpoints" / f"retrieval__{case.method}__L_train={case.params.L_train}{tail}.pt"


def trained_model(case, s: Settings, vocab: P.ProbeVocab, lm_tokens: np.ndarray, ckpt: Path | None):
    """(model, metrics): trained at L_train on the mix, or loaded from this method's checkpoint."""
    L = case.params.L_train
    overrides = {"vocab_size": vocab.vocab_size, **s.model_overrides}
    cfg = model_config(s.model, case.method, method_options=s.method_options.get(case.method, {}), **overrides)
    if ckpt is not None and ckpt.exists() and s.reuse_checkpoint:
        model, blob = load_checkpoint(ckpt, case.device)
        r, reused = blob["result"], 1
        final, steps, tokens, seconds = r["final_loss"], r["steps"], r["tokens"], 0.0
    else:
        for probe in s.train_probes:
            if P.min_length(probe, vocab.cfg) > L + 1:
                raise ValueError(f"retrieval: L_train {L} is too short to train on probe {probe} "
                                 f"(it needs {P.min_length(probe, vocab.cfg) - 1} tokens)")
        torch.manual_seed(s.seed)
        model = TransformerLM(cfg)
        tcfg = TrainConfig(seq_len=L, batch_size=s.batch_size, steps=s.steps, tokens=s.tokens, lr=s.lr,
                           warmup_steps=s.warmup_steps, precision=s.precision, seed=s.seed)
        data = mixed_batches(lm_tokens, vocab, s.train_probes, L, s.batch_size, s.mix, s.seed)
        r = train(model, data, tcfg, case.device, ckpt)
        final, steps, tokens, seconds, reused = r.final_loss, r.steps, r.tokens, r.seconds, 0
    metrics = dict(final_train_loss=final, train_steps=steps, train_tokens=tokens, train_seconds=seconds,
                   reused_checkpoint=reused, n_params=model.num_parameters())
    return model, metrics


# ---------------------------------------------------------------------------------- evaluation


def fork(cache: KVCache) -> KVCache:
    """A branch of ``cache`` to decode into. Layers replace their entries with new tensors
    (``torch.cat``), so sharing the old ones leaves the trunk untouched."""
    return KVCache(keys=list(cache.keys), values=list(cache.values), pos=cache.pos)


@torch.no_grad()
def greedy_answers(model, tokens: torch.Tensor, spans: list[tuple[int, int]]) -> list[torch.Tensor]:
    """Greedy answers through the KV cache: one (B, end - start) tensor per span.

    tokens (B, T): the whole sequence. For each span the trunk cache is prefilled with the true
    tokens before it, and a fork decodes the answer token by token from its own predictions; the
    trunk then continues with the true answer, so a wrong answer never leaks into the next query.
    """
    cache = model.new_cache()
    cursor, out = 0, []
    for start, end in spans:
        logits = model(tokens[:, cursor:start], cache=cache)  # (B, start - cursor, V)
        nxt = logits[:, -1].argmax(-1)  # (B,)
        answer = [nxt]
        branch = fork(cache)
        for _ in range(end - start - 1):
            nxt = model(nxt[:, None], cache=branch)[:, -1].argmax(-1)
            answer.append(nxt)
        out.append(torch.stack(answer, dim=1))
        cursor = start
    return out


def score(model, batch: P.ProbeBatch, device, batch_size: int) -> np.ndarray:
    """(n, n_spans) bool: whether each answer was decoded exactly."""
    rows = []
    for i in range(0, len(batch.tokens), batch_size):
        tokens = torch.from_numpy(batch.tokens[i : i + batch_size]).to(device)
        answers = greedy_answers(model, tokens, batch.spans)
        rows.append(torch.stack([(a == tokens[:, s:e]).all(dim=1) for a, (s, e) in zip(answers, batch.spans)], 1))
    return torch.cat(rows).cpu().numpy()


def eval_length(model, probe: str, vocab: P.ProbeVocab, Lv: int, s: Settings, device) -> tuple[list, list]:
    """Cells (one per depth for passkey, else one) and mqar distance buckets at one L_valid."""
    seed = 2**31 + s.seed  # disjoint from the training draws (below 2**31)
    if probe == "passkey":
        per_depth = math.ceil(s.eval_samples / len(s.depths))
        plan = [(d, P.generate(probe, vocab, Lv, per_depth, seed, depth=d)) for d in s.depths]
    elif probe == "mqar":
        plan = [(None, P.generate(probe, vocab, Lv, math.ceil(s.eval_samples / vocab.cfg.n_queries), seed))]
    else:
        plan = [(None, P.generate(probe, vocab, Lv, s.eval_samples, seed))]
    cells, distance = [], defaultdict(lambda: [0, 0])
    for depth, batch in plan:
        cell = {"L_valid": Lv, "depth": depth, "correct": 0, "total": 0, "status": "ok", "message": ""}
        try:
            ok = score(model, batch, device, s.eval_batch_size)  # (n, n_spans)
        except (MemoryError, torch.cuda.OutOfMemoryError) as exc:
            text = str(exc).splitlines()
            cell.update(status="oom", message=f"{type(exc).__name__}: {text[0] if text else ''}")
            if torch.device(device).type == "cuda":
                torch.cuda.empty_cache()
            cells.append(cell)
            continue
        cell.update(correct=int(ok.sum()), total=int(ok.size))
        cells.append(cell)
        if probe == "mqar":
            # Distance buckets: powers of two, bucket b holds distances in (b/2, b].
            buckets = 2 ** np.ceil(np.log2(np.maximum(batch.distance, 1))).astype(np.int64)
            for b, hit in zip(buckets.ravel(), ok.ravel()):
                distance[int(b)][0] += int(hit)
                distance[int(b)][1] += 1
    by_distance = [{"L_valid": Lv, "distance": b, "correct": c, "total": t} for b, (c, t) in sorted(distance.items())]
    return cells, by_distance


def summarize(cells: list[dict], L: int, threshold: float) -> dict:
    """Per-L_valid metrics from cells: acc@L (counts summed over depths), its Wilson interval,
    acc_at_train_len, acc_at_max_len and effective_length. A length with an oom cell has no
    accuracy."""
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
    metrics["effective_length"] = effective_length(acc, threshold)
    return metrics


def run(case) -> dict:
    s, L, probe = case.settings, case.params.L_train, case.params.probe
    if s.threads:
        torch.set_num_threads(s.threads)
    for folder in case.methods_dirs:
        registry.add_methods_dir(folder)
    cfg = s.probe_config()
    for Lv in [f * L for f in s.L_valid_factors]:
        if Lv < P.min_length(probe, cfg):
            raise ValueError(f"retrieval: L_valid {Lv} is too short for probe {probe} "
                             f"(it needs {P.min_length(probe, cfg)} tokens)")
    corpus = open_corpus(s.corpus)
    vocab = P.ProbeVocab(corpus.vocab_size, cfg)
    model, metrics = trained_model(case, s, vocab, corpus.split("train"), checkpoint_path(case, s))
    model = model.to(getattr(torch, s.eval_dtype)).eval()
    cells, by_distance = [], []
    for factor in s.L_valid_factors:
        c, d = eval_length(model, probe, vocab, factor * L, s, case.device)
        cells += c
        by_distance += d
    metrics.update(summarize(cells, L, s.threshold))
    metrics["chance"] = P.chance(probe, cfg)
    series = {"cells": cells, "corpus": corpus.describe(), "threshold": s.threshold}
    if probe == "mqar":
        series["by_distance"] = by_distance
    return {"metrics": metrics, "series": series}
