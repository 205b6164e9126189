"""The retrieval probes (passkey, mqar, copy, reverse): synthetic prompts of exactly ``length``
tokens, starting with ``BOS``, whose last part is the answer; a batch is a pure function of its
arguments (seeded numpy draws) and its answer spans depend only on probe and length.
Each probe's layout: docs/tasks/retrieval.md.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from posbench.core.config import PROBES, ProbeConfig  # noqa: F401 (re-exported: defined where no numpy is needed)
from posbench.protocols.probing import ruler
from posbench.protocols.probing.ruler import ASKS_SEVERAL, RULER_PROBES
from posbench.protocols.probing.tokens import ProbeBatch, ProbeVocab

ALL_PROBES = PROBES + RULER_PROBES  # the four probes, then RULER's (posbench.protocols.probing.ruler)


def min_length(probe: str, cfg: ProbeConfig, queries: int = 1) -> int:
    """Shortest sequence that holds the probe (BOS, no filler); ``queries``: questions per example
    (RULER's multikey and vartrack; see ``ProbeRequest``)."""
    if probe == "passkey":
        return 2 * cfg.key_len + 4
    if probe == "mqar":
        return 1 + 2 * cfg.n_pairs + 3 * cfg.n_queries
    if probe in ("copy", "reverse"):
        return 2 * cfg.segment_len + 4
    if probe in RULER_PROBES:
        return ruler.min_length(probe, cfg, queries=queries)
    raise ValueError(f"unknown probe {probe!r}; allowed: {', '.join(ALL_PROBES)}")


def chance(probe: str, cfg: ProbeConfig, scoring: str = "exact") -> float | None:
    """Accuracy of guessing every answer symbol uniformly: per example for passkey/copy/reverse
    (exact match of the whole answer; k distinct symbols of n have n!/(n-k)! orders), per query
    for mqar; RULER's probes: ``ruler.chance`` under ``scoring`` (the others are scored exactly)."""
    if probe in RULER_PROBES:
        return ruler.chance(probe, cfg, scoring)
    n = {"passkey": cfg.key_len, "mqar": 1, "copy": cfg.segment_len, "reverse": cfg.segment_len}[probe]
    if probe != "mqar" and distinct_symbols(probe, cfg):
        return 1.0 / math.perm(cfg.n_symbols, n)
    return float(cfg.n_symbols) ** -n


def distinct_symbols(probe: str, cfg: ProbeConfig) -> bool:
    """Whether a passkey key or a copy/reverse segment repeats no symbol: it does only when it is
    longer than the alphabet."""
    return (cfg.key_len if probe == "passkey" else cfg.segment_len) <= cfg.n_symbols


@dataclass(frozen=True)
class ProbeRequest:
    """What a batch of one probe looks like: ``probe`` at exactly ``length`` tokens.

    depth: needle position in [0, 1] (passkey, copy, reverse); None draws one per example.
    hops: vartrack's chain length; None draws one in 1..cfg.hops per example.
    queries: questions per example, multikey and vartrack (training's ``train_queries``); the
    others ask the number their layout fixes, and take 1 here.
    """

    probe: str
    length: int
    depth: float | None = None
    hops: int | None = None
    queries: int = 1


def _rng(seed: int, request: ProbeRequest) -> np.random.Generator:
    depth_code = -1 if request.depth is None else int(round(request.depth * 1_000_000))
    # the four probes' draws stay those of before RULER's probes, one question's those of before queries
    tail = ([] if request.hops is None else [request.hops]) + ([] if request.queries == 1 else [0, request.queries])
    return np.random.default_rng([seed, ALL_PROBES.index(request.probe), request.length, depth_code + 1, *tail])


def generate(request: ProbeRequest, vocab: ProbeVocab, n: int, seed: int) -> ProbeBatch:
    """``n`` examples of ``request`` drawn with ``seed``; deterministic in its arguments."""
    probe, length, depth, queries = request.probe, request.length, request.depth, request.queries
    cfg = vocab.cfg
    if queries != 1 and probe not in ASKS_SEVERAL:
        raise ValueError(f"probe {probe}: queries {queries} is not allowed; only multikey and vartrack ask several")
    need = min_length(probe, cfg, queries)
    if length < need:
        raise ValueError(f"probe {probe}: length {length} is too short; it needs at least {need} tokens")
    if depth is not None and not 0.0 <= depth <= 1.0:
        raise ValueError(f"probe depth must be in [0, 1], got {depth}")
    rng = _rng(seed, request)
    if probe in RULER_PROBES:
        return ruler.generate(probe, vocab, length, n, rng, request.hops, queries)
    if probe == "mqar":
        return _mqar(vocab, length, n, rng)
    return _needle(probe, vocab, length, n, rng, depth)


def _filler(vocab: ProbeVocab, n: int, length: int) -> np.ndarray:
    """(n, length) rows of BOS then the repeated filler phrase."""
    phrase = vocab.filler[np.arange(length) % len(vocab.filler)]
    tokens = np.broadcast_to(phrase, (n, length)).copy()
    tokens[:, 0] = vocab.BOS
    return tokens


def _needle(probe, vocab: ProbeVocab, length, n, rng, depth) -> ProbeBatch:
    cfg = vocab.cfg
    k = cfg.key_len if probe == "passkey" else cfg.segment_len
    question = {"passkey": vocab.ASK, "copy": vocab.COPY, "reverse": vocab.REVERSE}[probe]
    if distinct_symbols(probe, cfg):  # k distinct symbols in random order
        symbols = np.argsort(rng.random((n, cfg.n_symbols)), axis=1)[:, :k] + vocab.first_symbol  # (n, k)
    else:
        symbols = rng.integers(0, cfg.n_symbols, size=(n, k)) + vocab.first_symbol  # (n, k)
    free = length - 1 - (k + 2) - (k + 1)  # filler tokens around the needle (after BOS)
    depths = rng.random(n) if depth is None else np.full(n, float(depth))
    starts = 1 + np.rint(depths * free).astype(np.int64)  # (n,) needle's first token (MARK)
    tokens = _filler(vocab, n, length)
    rows = np.arange(n)[:, None]
    tokens[rows, starts[:, None] + np.arange(k + 2)] = np.concatenate(
        [np.full((n, 1), vocab.MARK), symbols, np.full((n, 1), vocab.END)], axis=1
    )
    answer = symbols[:, ::-1] if probe == "reverse" else symbols
    tokens[:, length - k - 1] = question
    tokens[:, length - k :] = answer
    distance = (length - k - 1) - starts  # question token minus MARK
    return ProbeBatch(tokens, [(length - k, length)], depths, distance[:, None])


def _mqar(vocab: ProbeVocab, length, n, rng) -> ProbeBatch:
    cfg = vocab.cfg
    N, Q = cfg.n_pairs, cfg.n_queries
    # Distinct keys per row from the key alphabet: the N smallest of n_keys random numbers;
    # values from the value alphabet, and they may repeat (as in Zoology).
    keys = np.argsort(rng.random((n, cfg.n_keys)), axis=1)[:, :N] + vocab.first_key  # (n, N)
    values = rng.integers(0, cfg.n_symbols, size=(n, N)) + vocab.first_symbol  # (n, N)
    asked = np.argsort(rng.random((n, N)), axis=1)[:, :Q]  # (n, Q) which pairs are queried, in order
    tokens = _filler(vocab, n, length)
    tokens[:, 1 : 1 + 2 * N : 2] = keys
    tokens[:, 2 : 2 + 2 * N : 2] = values
    rows = np.arange(n)[:, None]
    q0 = length - 3 * Q  # first QUERY token
    tokens[:, q0::3] = vocab.QUERY
    tokens[:, q0 + 1 :: 3] = keys[rows, asked]
    tokens[:, q0 + 2 :: 3] = values[rows, asked]
    spans = [(q0 + 3 * j + 2, q0 + 3 * j + 3) for j in range(Q)]
    distance = (q0 + 3 * np.arange(Q) + 1)[None, :] - (1 + 2 * asked)  # query key minus pair key
    return ProbeBatch(tokens, spans, np.zeros(n), distance)


def oracle_next(vocab: ProbeVocab, history: np.ndarray) -> int:
    """The next answer token, read off the prompt alone: proves every answer is recoverable.

    ``history`` (T,) ends inside an answer: after the last question token and the answer so far.
    """
    h = np.asarray(history)
    marks = np.flatnonzero(np.isin(h, [vocab.ASK, vocab.COPY, vocab.REVERSE, vocab.QUERY]))
    if len(marks) == 0:
        raise ValueError("oracle: the history holds no question token")
    a = int(marks[-1])
    if h[a] == vocab.QUERY:
        key = h[a + 1]
        pairs_end = int(np.flatnonzero(h == vocab.QUERY)[0])
        for i in range(1, pairs_end - 1, 2):  # pairs block after BOS: k1 v1 k2 v2 ...
            if h[i] == key:
                return int(h[i + 1])
        raise ValueError("oracle: the queried key is not among the pairs")
    start = int(np.flatnonzero(h == vocab.MARK)[0])
    end = start + 1 + int(np.flatnonzero(h[start + 1 :] == vocab.END)[0])
    segment = h[start + 1 : end]
    if h[a] == vocab.REVERSE:
        segment = segment[::-1]
    return int(segment[len(h) - a - 1])
