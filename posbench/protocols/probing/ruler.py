"""RULER's probes that posbench lacked (Hsieh et al. 2024), drawn from the retrieval probes'
vocabulary (``ProbeVocab``): each example has exactly ``length`` tokens, starts with ``BOS``, ends
with its answer (one span, the same for every example of a length), and is a pure function of its
seeded draws.

- ``multikey`` (RULER's multi-key/multi-value needles): ``n_needles`` needles ``MARK k v1..vm END``
  of distinct keys at random places in the filler, then ``ASK k`` and the m values of that key;
  with probability ``absent_prob`` the asked key is in no needle, and the answer is m ``END``.
- ``vartrack`` (variable tracking, RULER's form: "find every variable assigned the value v"):
  ``n_chains`` chains of assignments ``MARK v x1 END`` (x1 = v), ``MARK x1 x2 END`` (x2 = x1), ...,
  ``MARK x(k-1) xk END`` (each chain in order, chains interleaved), then ``ASK v`` and the queried
  chain's names x1 .. xk in order, padded with ``END`` to ``hops`` tokens; k, 1..``hops``, is an
  axis. Each answer token is one hop: the next name is the one assigned from the name before it.
- ``aggregate`` (frequent-word extraction): the whole context is a list of value symbols in which
  the ``n_top`` most frequent occur 2, 3, ... times as often as every other symbol (filler fills
  the rest); the answer is those symbols, most frequent first.

Training examples may ask ``queries`` questions in turn (``ASKS_SEVERAL``; the setting
``train_queries``), each ``ASK key`` followed by its answer: the last one is drawn exactly as the
evaluation's single question, the ones before it ask any key (multikey: a needle's or an absent
one; vartrack: any chain's value). One answer per example is little signal, and the binding these
probes need forms only after a long plateau; more questions per example shorten it without
changing what is evaluated.
"""

from __future__ import annotations

import math

import numpy as np

from posbench.protocols.probing.tokens import ProbeBatch

RULER_PROBES = ("multikey", "vartrack", "aggregate")
ASKS_SEVERAL = ("multikey", "vartrack")  # the probes whose examples may ask several questions


def min_length(probe: str, cfg, hops: int | None = None, queries: int = 1) -> int:
    """Shortest sequence that holds the probe (``hops``: vartrack's chain length, default the longest;
    ``queries``: questions asked, multikey and vartrack)."""
    if probe == "multikey":
        return 1 + cfg.n_needles * (cfg.n_values + 3) + queries * (2 + cfg.n_values)
    if probe == "vartrack":
        return 1 + 4 * cfg.n_chains * (hops or cfg.hops) + queries * (2 + cfg.hops)
    if probe == "aggregate":
        return 2 + cfg.n_top + _shares(cfg)
    raise ValueError(f"unknown RULER probe {probe!r}; allowed: {', '.join(RULER_PROBES)}")


def answer_len(probe: str, cfg) -> int:
    return {"multikey": cfg.n_values, "vartrack": cfg.hops, "aggregate": cfg.n_top}[probe]


def check(probe: str, cfg) -> None:
    """One line when the probe's shapes do not fit its alphabets (``ProbeConfig.ruler_misfit``)."""
    misfit = cfg.ruler_misfit(probe)
    if misfit is not None:
        _, problem, allowed = misfit
        raise ValueError(f"{problem}; allowed: {allowed}")


def chance(probe: str, cfg) -> float:
    """Accuracy of the best answer that ignores the context: multikey, always "absent" or a uniform
    guess of the m values (whichever is higher); vartrack, each of the ``hops`` answer tokens guessed
    among the n_keys names and END; aggregate, an ordered guess of n_top distinct symbols."""
    if probe == "multikey":
        return max(cfg.absent_prob, (1.0 - cfg.absent_prob) * float(cfg.n_symbols) ** -cfg.n_values)
    if probe == "vartrack":
        return float(cfg.n_keys + 1) ** -cfg.hops
    return 1.0 / math.perm(cfg.n_symbols, cfg.n_top)


def _shares(cfg) -> int:
    """aggregate: how many multiples of the base count b one list holds (each symbol b, the top
    words 1..n_top extra multiples)."""
    return cfg.n_symbols + cfg.n_top * (cfg.n_top + 1) // 2


def _place(rng, length: int, items: list[np.ndarray], tail: int, vocab) -> tuple[np.ndarray, list[int]]:
    """One row: BOS, filler, the ``items`` (token runs) in order at random places, then ``tail``
    tokens for the question and answer (left as filler); returns the row and each item's start."""
    row = np.resize(vocab.filler, length)
    row[0] = vocab.BOS
    free = length - 1 - sum(len(x) for x in items) - tail  # filler tokens between the items
    gaps = np.sort(rng.integers(0, free + 1, size=len(items)))
    starts, used = [], 0
    for gap, item in zip(gaps, items):
        start = 1 + int(gap) + used
        row[start : start + len(item)] = item
        starts.append(start)
        used += len(item)
    return row, starts


def generate(probe: str, vocab, length: int, n: int, rng: np.random.Generator, hops: int | None = None, queries: int = 1):
    """``n`` examples of a RULER probe as a ``tokens.ProbeBatch``; ``hops`` (vartrack): every chain's
    length, None draws one in 1..cfg.hops per example; ``queries`` (multikey, vartrack): questions
    asked in turn, the last drawn as the evaluation's one (aggregate has one question)."""
    cfg = vocab.cfg
    check(probe, cfg)
    if hops is not None and not 1 <= hops <= cfg.hops:
        raise ValueError(f"vartrack: hops {hops} must lie in 1..{cfg.hops} (the setting hops)")
    m = answer_len(probe, cfg)
    block = m + 2  # one question: ASK, the key (aggregate: ASK alone, its first block token is filler)
    tokens = np.empty((n, length), dtype=np.int64)
    distance = np.zeros((n, queries), dtype=np.int64)
    depth = np.zeros(n)
    spans = [(length - (queries - j) * block + 2, length - (queries - j - 1) * block) for j in range(queries)]
    for i in range(n):
        if probe == "multikey":
            row, asked = _multikey(vocab, length, rng, queries)
        elif probe == "vartrack":
            row, asked = _vartrack(vocab, length, rng, hops or int(rng.integers(1, cfg.hops + 1)), queries)
        else:
            row, asked = _aggregate(vocab, length, rng)
        for j, ((start, end), (key, answer, source)) in enumerate(zip(spans, asked)):
            if key is not None:
                row[start - 2 : start] = [vocab.ASK, key]
            row[start:end] = answer
            distance[i, j] = start - 1 - source if source is not None else 0  # the asked key minus the source
        tokens[i] = row
        source = asked[-1][2]
        depth[i] = 0.0 if source is None else (source - 1) / max(1, spans[-1][0] - 2)
    return ProbeBatch(tokens, spans, depth, distance)


def _multikey(vocab, length, rng, queries: int = 1):
    """(row, [(asked key, answer, source start or None), ...] per question)."""
    cfg = vocab.cfg
    N, m = cfg.n_needles, cfg.n_values
    keys = rng.permutation(cfg.n_keys)[: N + 1] + vocab.first_key  # N needles' keys, then one absent key
    values = rng.integers(0, cfg.n_symbols, size=(N, m)) + vocab.first_symbol
    needles = [np.concatenate([[vocab.MARK, keys[j]], values[j], [vocab.END]]) for j in range(N)]
    row, starts = _place(rng, length, needles, queries * (m + 2), vocab)
    asked = []
    for _ in range(queries):  # the last question's draws are the single-question example's
        absent = rng.random() < cfg.absent_prob
        j = int(rng.integers(0, N))
        asked.append((keys[N], np.full(m, vocab.END), None) if absent else (keys[j], values[j], starts[j]))
    return row, asked[1:] + asked[:1]


def _vartrack(vocab, length, rng, hops: int, queries: int = 1):
    """(row, [(asked value, answer, where the chain starts), ...] per question)."""
    cfg = vocab.cfg
    C = cfg.n_chains
    names = (rng.permutation(cfg.n_keys)[: C * hops] + vocab.first_key).reshape(C, hops)  # (C, hops)
    values = rng.permutation(cfg.n_symbols)[:C] + vocab.first_symbol  # (C,) distinct: each question has one chain
    # statement (c, j) assigns names[c, j] the value (j = 0) or names[c, j - 1]; chains keep their order
    order = np.argsort(np.sort(rng.random((C, hops)), axis=1).ravel(), kind="stable")  # (C * hops,) statement ids
    items = []
    for s in order:
        c, j = divmod(int(s), hops)
        items.append(np.array([vocab.MARK, values[c] if j == 0 else names[c, j - 1], names[c, j], vocab.END]))
    row, starts = _place(rng, length, items, queries * (cfg.hops + 2), vocab)
    first = [starts[int(np.flatnonzero(order == c * hops)[0])] for c in range(C)]  # where each chain's value sits
    pad = np.full(cfg.hops - hops, vocab.END)
    # Earlier questions (training only) ask any chain's value; the last asks chain 0's.
    asked = [int(c) for c in rng.integers(0, C, size=queries - 1)] if queries > 1 else []
    return row, [(values[c], np.concatenate([names[c], pad]), first[c]) for c in asked + [0]]


def _aggregate(vocab, length, rng):
    cfg = vocab.cfg
    m = cfg.n_top
    free = length - 2 - m  # after BOS, before the question
    b = free // _shares(cfg)
    if b < 1:
        raise ValueError(f"aggregate: length {length} is too short; it needs at least {min_length('aggregate', cfg)} tokens")
    ranked = rng.permutation(cfg.n_symbols) + vocab.first_symbol  # ranked[:m] are the top words, most frequent first
    counts = np.full(cfg.n_symbols, b)
    counts[:m] += b * np.arange(m, 0, -1)  # top word r (0-based) occurs (m - r + 1) * b times: strictly ranked
    words = np.repeat(ranked, counts)
    body = np.concatenate([words, np.resize(vocab.filler, free - len(words))])
    row = np.empty(length, dtype=np.int64)
    row[0] = vocab.BOS
    row[1 : 1 + free] = rng.permutation(body)
    row[1 + free] = vocab.ASK
    return row, [(None, ranked[:m], None)]


def oracle_answer(vocab, probe: str, prompt: np.ndarray) -> np.ndarray:
    """The answer read off the prompt alone (every token before the answer): proves each answer
    is recoverable, and is what the tests check the generators against."""
    cfg, h = vocab.cfg, np.asarray(prompt)
    if probe == "aggregate":
        symbols = h[vocab.is_symbol(h)]
        ids, counts = np.unique(symbols, return_counts=True)
        top = np.argsort(-counts, kind="stable")[: cfg.n_top]
        if cfg.n_top < len(counts) and counts[top[-1]] <= np.sort(counts)[::-1][cfg.n_top]:
            raise ValueError("oracle: the top words are not strictly more frequent than the rest")
        return ids[top]
    statements = {}  # key -> the tokens between it and END
    for start in np.flatnonzero(h == vocab.MARK):
        end = start + 1 + int(np.flatnonzero(h[start + 1 :] == vocab.END)[0])
        statements[int(h[start + 1])] = h[start + 2 : end]
    asked = int(h[-1])
    if probe == "multikey":
        return statements[asked] if asked in statements else np.full(cfg.n_values, vocab.END)
    chain = []  # vartrack: from the value, each name assigned from the one before
    while asked in statements and len(chain) < cfg.hops:
        asked = int(statements[asked][0])
        chain.append(asked)
    return np.array(chain + [vocab.END] * (cfg.hops - len(chain)))
