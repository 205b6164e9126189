"""The retrieval task's training: text mixed with probe examples (``TrainingMix``,
``mixed_batches``), a model trained on it at L_train or reused, to criterion when asked
(``Criterion``); ``s`` is the retrieval or extension task's Settings."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from posbench.core.task import case_model_config
from posbench.engine.train import Checkpointing
from posbench.engine.train import trained_model as trained_model_of
from posbench.protocols.probing import probes as P
from posbench.protocols.probing.scoring import forced_answers, score
from posbench.protocols.training import budget_metrics


@dataclass(frozen=True)
class TrainingMix:
    """What each training batch holds: ``batch_size`` rows of ``seq_len + 1`` tokens, each a probe
    example with probability ``probe_share`` (the settings' ``mix``; a probe of ``probes`` at a
    random depth), else a random window of text; multikey and vartrack examples ask ``queries``
    questions (``train_queries``), the others their layout's.

    ``loss`` other than ``all``: batches come as (ids (B, T+1), targets (B, T)), where -100 marks a
    target with no loss in a probe row: ``answers`` keeps its answers only; ``predictable`` keeps
    every target but the random draws outside the answers (the needle's symbols, mqar's keys and
    values, the queried keys: tokens nothing before them predicts, whose loss teaches only the
    draw's statistics, e.g. "a key repeats no symbol"). Language-model rows keep every target."""

    probes: Sequence[str]
    seq_len: int
    batch_size: int
    probe_share: float
    loss: str = "all"
    queries: int = 1


def mixed_batches(lm_tokens: np.ndarray, vocab: P.ProbeVocab, mix: TrainingMix, seed: int):
    """Endless (B, T+1) int64 batches of ``mix`` (or (ids, targets) pairs: ``TrainingMix.loss``),
    text windows from ``lm_tokens``, drawn with ``seed``."""
    seq_len, batch_size, loss = mix.seq_len, mix.batch_size, mix.loss
    if loss not in ("all", "answers", "predictable"):
        raise ValueError(f"retrieval: loss {loss!r} is not known; allowed: all, answers, predictable")
    rng = np.random.default_rng([seed, 7])
    n = len(lm_tokens)
    if mix.probe_share < 1.0 and n < seq_len + 1:
        raise ValueError(f"retrieval: the corpus has {n} training tokens, fewer than L_train+1 = {seq_len + 1}")
    span = np.arange(seq_len + 1)
    while True:
        out = np.empty((batch_size, seq_len + 1), dtype=np.int64)
        targets = out[:, 1:].copy() if loss != "all" else None
        is_probe = rng.random(batch_size) < mix.probe_share
        which = rng.integers(0, len(mix.probes), size=batch_size)
        for i, probe in enumerate(mix.probes):
            rows = np.flatnonzero(is_probe & (which == i))
            if len(rows):
                batch_seed = int(rng.integers(0, 2**31))  # training seeds stay below 2**31, eval's above
                batch = P.generate(
                    P.ProbeRequest(probe, seq_len + 1, queries=train_queries(probe, mix.queries)), vocab, len(rows), batch_seed
                )
                out[rows] = batch.tokens
                if loss != "all":
                    targets[rows] = _probe_targets(batch, vocab, loss)
        lm_rows = np.flatnonzero(~is_probe)
        if len(lm_rows):
            starts = rng.integers(0, n - seq_len, size=len(lm_rows))
            out[lm_rows] = lm_tokens[starts[:, None] + span[None, :]]
            if loss != "all":
                targets[lm_rows] = out[lm_rows, 1:]
        yield (torch.from_numpy(out), torch.from_numpy(targets)) if loss != "all" else torch.from_numpy(out)


def train_queries(probe: str, queries: int) -> int:
    """Questions per training example of ``probe``: ``queries`` for multikey and vartrack, else 1."""
    return queries if probe in P.ASKS_SEVERAL else 1


def _probe_targets(batch: P.ProbeBatch, vocab: P.ProbeVocab, loss: str) -> np.ndarray:
    """(n, T) targets of a probe batch of T + 1 tokens for ``loss`` answers/predictable; -100 = no loss."""
    nxt = batch.tokens[:, 1:]  # target j is token j + 1
    answer = np.zeros(nxt.shape, dtype=bool)
    for start, end in batch.spans:
        answer[:, start - 1 : end - 1] = True
    keep = answer if loss == "answers" else answer | ~vocab.is_draw(nxt)
    return np.where(keep, nxt, -100)


def train_probe_model(
    case,
    vocab: P.ProbeVocab,
    lm_tokens: np.ndarray,
    ckpt: Path | None,
    probes: list[str],
    tracker=None,
    seed: int | None = None,
):
    """(model, metrics): trained at L_train on the mix of ``probes`` and text with ``seed`` (weights
    and batches; default the settings' ``seed``), or loaded from the checkpoint; the training
    curves go to ``tracker`` (``posbench.engine.tracking``) when given; under the case's settings."""
    s, L = case.settings, case.params.L_train
    seed = s.seed if seed is None else seed
    queries = getattr(s, "train_queries", 1)  # the extension task's settings have none: its passkey asks one

    def data():
        for probe in probes:
            need = P.min_length(probe, vocab.cfg, train_queries(probe, queries))
            if need > L + 1:
                raise ValueError(f"retrieval: L_train {L} is too short to train on probe {probe} (it needs {need - 1} tokens)")
        return mixed_batches(lm_tokens, vocab, TrainingMix(probes, L, s.batch_size, s.mix, s.loss, queries), seed)

    checks = []  # the criterion this training made, whose last accuracy the row reports

    def until(model):
        if s.stop_at_acc is None:
            return None
        checks.append(Criterion(model, vocab, probes, L, s, case.device, tracker))
        return checks[0]

    model, r, reused = trained_model_of(
        case_model_config(case, vocab_size=vocab.vocab_size),
        s.train_config(L, seed),
        data,
        case.device,
        Checkpointing(ckpt, s.reuse_checkpoint),
        tracker,
        until,
    )
    check = checks[0] if checks else None  # None: loaded (its accuracy is not saved) or no criterion
    metrics = dict(
        final_train_loss=r.final_loss,
        train_steps=r.steps,
        train_tokens=r.tokens,
        train_seconds=0.0 if reused else r.seconds,
        reused_checkpoint=int(reused),
        n_params=model.num_parameters(),
        stopped_at_step=r.steps if r.stopped_early else None,
        check_acc=None if check is None else check.last,
        **budget_metrics(r),
    )
    return model, metrics


class Criterion:
    """Train to criterion: ``until`` for ``posbench.engine.train.train``. Every ``check_every`` steps,
    the exact-match accuracy of ``check_samples`` held-out examples of the training probes at L_train
    (its own seeds, apart from training's and evaluation's); True once it reaches ``stop_at_acc``.
    The accuracy goes to the tracker as ``check/acc``; ``last`` keeps the latest."""

    def __init__(self, model, vocab: P.ProbeVocab, probes: list[str], L: int, s, device, tracker=None):
        self.model, self.s, self.device, self.tracker = model, s, device, tracker
        seed = 2**31 + 2**30 + s.seed  # evaluation draws from 2**31 + seed, training below 2**31
        n = -(-s.check_samples // len(probes))
        self.batches = [P.generate(P.ProbeRequest(p, L + 1), vocab, n, seed + i) for i, p in enumerate(probes)]
        self.last: float | None = None

    def __call__(self, steps_done: int) -> bool:
        if steps_done % self.s.check_every:
            return False
        was = self.model.training
        self.model.eval()
        ok = [score(self.model, b, self.device, self.s.eval_batch_size, forced_answers) for b in self.batches]
        self.model.train(was)
        self.last = float(np.concatenate([o.ravel() for o in ok]).mean())
        if self.tracker is not None:
            self.tracker.scalars({"check/acc": self.last}, steps_done - 1)
        return self.last >= self.s.stop_at_acc
