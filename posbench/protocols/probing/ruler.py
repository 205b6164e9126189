"""RULER's probes (Hsieh et al. 2024; hsiehjackson/RULER, ``scripts/data/synthetic/*.py``), drawn
from the retrieval probes' vocabulary (``ProbeVocab``): each example has exactly ``length`` tokens,
starts with ``BOS``, ends with its answer (one span, the same for every example of a length), and is
a pure function of its seeded draws. Answers are scored by RULER's rules (``scoring``).

- ``multikey`` (RULER's niah with several keys and values): ``n_needles`` keys, each with
  ``n_values`` values; by default (``needles: separate``, RULER's ``niah.py``) every value is a
  needle of its own ``MARK k v END``, the needles shuffled and placed at random depths, and the
  answer is the asked key's m values in the order they appear; ``needles: packed`` (posbench's
  earlier, easier form) puts a key's values in one needle ``MARK k v1..vm END``. With probability
  ``absent_prob`` (RULER has none) the asked key is in no needle, and the answer is m ``END``.
- ``vartrack`` (variable tracking, RULER's form: "find every variable assigned the value v"):
  ``n_chains`` chains of assignments ``MARK v x1 END`` (x1 = v), ``MARK x1 x2 END`` (x2 = x1), ...,
  ``MARK x(k-1) xk END`` (each chain in order, chains interleaved), then ``ASK v`` and the queried
  chain's names x1 .. xk in order, padded with ``END`` to ``hops`` tokens; k, 1..``hops``, is an
  axis. Each answer token is one hop: the next name is the one assigned from the name before it.
- ``common_words`` (RULER's cwe, ``common_words_extraction.py``): the context is a shuffled list
  in which ``n_top`` common words occur ``freq_cw`` times as often as each other (uncommon) word
  (RULER's repeats: 6 and 1 below 4096 tokens, 30 and 3 from 4096), filler filling the rest; the
  answer is the common words, tied, in the order they first appear.
- ``frequent_words`` (RULER's fwe, ``freq_words_extraction.py``): the word of rank k occurs
  floor(free x k^-alpha / zeta(alpha)) times (Zipf, alpha 2), rank 1 being noise (the filler, as
  RULER's '...') and ranks 2, 3, ... the symbols; the answer is the ``n_top`` words of ranks
  2..n_top+1 (RULER: 3), in the order they first appear.
- ``aggregate`` (posbench's stricter frequent-words variant): the ``n_top`` most frequent symbols
  occur 2, 3, ... times as often as every other symbol, answered most frequent first.

Training examples may ask ``queries`` questions in turn (``ASKS_SEVERAL``; the setting
``train_queries``), each ``ASK key`` followed by its answer: the last one is drawn exactly as the
evaluation's single question, the ones before it ask any key (multikey: a needle's or an absent
one; vartrack: any chain's value). One answer per example is little signal, and the binding these
probes need forms only after a long plateau; more questions per example shorten it without
changing what is evaluated.

An answer's order is fixed (order of appearance, or the chain's) so that training can teach it and
``scoring: exact`` can ask for it; RULER's ``string_match_all`` ignores it.
"""

from __future__ import annotations

import math

import numpy as np

from posbench.protocols.probing.tokens import ProbeBatch

RULER_PROBES = ("multikey", "vartrack", "aggregate", "common_words", "frequent_words")
ASKS_SEVERAL = ("multikey", "vartrack")  # the probes whose examples may ask several questions
WORD_PROBES = ("aggregate", "common_words", "frequent_words")  # a list of words filling the context
# common_words_extraction.py: (freq_cw, freq_ucw) below 4096 tokens, and from 4096 on
CWE_REPEATS = {"short": (6, 1), "long": (30, 3)}
CWE_LONG_FROM = 4096
ZIPF_ALPHA = 2.0  # freq_words_extraction.py's --alpha default
ZETA_ALPHA = math.pi**2 / 6  # zeta(2), the Zipf counts' normaliser


def min_length(probe: str, cfg, hops: int | None = None, queries: int = 1) -> int:
    """Shortest sequence that holds the probe (``hops``: vartrack's chain length, default the longest;
    ``queries``: questions asked, multikey and vartrack)."""
    if probe == "multikey":
        needles = cfg.n_needles * (cfg.n_values + 3 if cfg.needles == "packed" else 4 * cfg.n_values)
        return 1 + needles + queries * (2 + cfg.n_values)
    if probe == "vartrack":
        return 1 + 4 * cfg.n_chains * (hops or cfg.hops) + queries * (2 + cfg.hops)
    if probe in WORD_PROBES:
        return 2 + cfg.n_top + _min_list(probe, cfg)
    raise ValueError(f"unknown RULER probe {probe!r}; allowed: {', '.join(RULER_PROBES)}")


def answer_len(probe: str, cfg) -> int:
    return cfg.n_values if probe == "multikey" else cfg.hops if probe == "vartrack" else cfg.n_top


def check(probe: str, cfg) -> None:
    """One line when the probe's shapes do not fit its alphabets (``ProbeConfig.ruler_misfit``)."""
    misfit = cfg.ruler_misfit(probe)
    if misfit is not None:
        _, problem, allowed = misfit
        raise ValueError(f"{problem}; allowed: {allowed}")


def chance(probe: str, cfg, scoring: str = "exact") -> float | None:
    """Score of the best answer that ignores the context, under ``scoring``.

    exact: multikey, always "absent" or a uniform guess of the m values (whichever is higher);
    vartrack, each of the ``hops`` answer tokens guessed among the n_keys names and END; the word
    probes, an ordered guess of n_top distinct symbols. string_match_all: the expected share of the
    reference items found by a guess of distinct tokens (a reference item is in a guess of g of A
    tokens with probability g / A); multikey with absent keys the better of m symbols and one END
    beside m - 1 symbols. string_match_part: None (not derived)."""
    if scoring == "string_match_part":
        return None
    if scoring == "string_match_all":
        if probe == "multikey":
            m, n, absent = cfg.n_values, cfg.n_symbols, cfg.absent_prob
            return max((1.0 - absent) * m / n, absent + (1.0 - absent) * (m - 1) / n if absent else 0.0)
        if probe == "vartrack":
            return min(1.0, cfg.hops / cfg.n_keys)
        return cfg.n_top / cfg.n_symbols
    if probe == "multikey":
        return max(cfg.absent_prob, (1.0 - cfg.absent_prob) * float(cfg.n_symbols) ** -cfg.n_values)
    if probe == "vartrack":
        return float(cfg.n_keys + 1) ** -cfg.hops
    return 1.0 / math.perm(cfg.n_symbols, cfg.n_top)


def _shares(cfg) -> int:
    """aggregate: how many multiples of the base count b one list holds (each symbol b, the top
    words 1..n_top extra multiples)."""
    return cfg.n_symbols + cfg.n_top * (cfg.n_top + 1) // 2


def _cwe_repeats(length: int) -> tuple[int, int]:
    return CWE_REPEATS["long" if length >= CWE_LONG_FROM else "short"]


def zipf_counts(free: int, n_symbols: int) -> np.ndarray:
    """frequent_words: (n_symbols,) counts of ranks 2..n_symbols+1 in a list of ``free`` words,
    floor(free x k^-alpha / zeta(alpha)) as RULER's ``gen_text`` (rank 1, the noise, is the rest)."""
    k = np.arange(2, n_symbols + 2, dtype=np.float64)
    return np.floor(free * k**-ZIPF_ALPHA / ZETA_ALPHA).astype(np.int64)


def _min_list(probe: str, cfg) -> int:
    """The word probes: the shortest list that holds them. frequent_words: long enough that the
    last answer rank is at least one count above the next rank at every longer length (the floors
    differ by >= 1 once free x (c(t+1) - c(t+2)) >= 1), so the answer is never tied."""
    if probe == "aggregate":
        return _shares(cfg)
    if probe == "common_words":
        common, rare = CWE_REPEATS["short"]
        return common * cfg.n_top + rare * (cfg.n_symbols - cfg.n_top)
    t = cfg.n_top
    gap = ((t + 1) ** -ZIPF_ALPHA - (t + 2) ** -ZIPF_ALPHA) / ZETA_ALPHA
    return math.ceil(1.0 / gap)


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
    items = np.full((n, queries, m), -1, dtype=np.int64)  # the reference items RULER's scoring looks for
    distance = np.zeros((n, queries), dtype=np.int64)
    depth = np.zeros(n)
    spans = [(length - (queries - j) * block + 2, length - (queries - j - 1) * block) for j in range(queries)]
    for i in range(n):
        if probe == "multikey":
            row, asked = _multikey(vocab, length, rng, queries)
        elif probe == "vartrack":
            row, asked = _vartrack(vocab, length, rng, hops or int(rng.integers(1, cfg.hops + 1)), queries)
        elif probe == "aggregate":
            row, asked = _aggregate(vocab, length, rng)
        else:
            row, asked = _word_list(probe, vocab, length, rng)
        for j, ((start, end), (key, answer, source)) in enumerate(zip(spans, asked)):
            if key is not None:
                row[start - 2 : start] = [vocab.ASK, key]
            row[start:end] = answer
            # vartrack's END padding is no name to find; multikey's absent answer (m END) is its reference
            items[i, j] = np.where(answer == vocab.END, -1, answer) if probe == "vartrack" else answer
            distance[i, j] = start - 1 - source if source is not None else 0  # the asked key minus the source
        tokens[i] = row
        source = asked[-1][2]
        depth[i] = 0.0 if source is None else (source - 1) / max(1, spans[-1][0] - 2)
    return ProbeBatch(tokens, spans, depth, distance, items)


def _multikey(vocab, length, rng, queries: int = 1):
    """(row, [(asked key, answer, source start or None), ...] per question); the source of a key
    with several needles is its first (farthest) one."""
    cfg = vocab.cfg
    N, m = cfg.n_needles, cfg.n_values
    keys = rng.permutation(cfg.n_keys)[: N + 1] + vocab.first_key  # N needles' keys, then one absent key
    values = rng.integers(0, cfg.n_symbols, size=(N, m)) + vocab.first_symbol
    if cfg.needles == "packed":
        needles = [np.concatenate([[vocab.MARK, keys[j]], values[j], [vocab.END]]) for j in range(N)]
        owner = np.arange(N)  # needle -> its key
        answers = list(values)
    else:  # RULER: one needle per value, all of them shuffled, each at its own random depth
        order = rng.permutation(N * m)  # needle i holds value order[i] (key order[i] // m)
        owner = order // m
        placed = values.ravel()[order]  # (N * m,) each needle's value, in the order they are placed
        needles = [np.array([vocab.MARK, keys[j], v, vocab.END]) for j, v in zip(owner, placed)]
        answers = [placed[owner == j] for j in range(N)]  # a key's values in the order its needles appear
    row, starts = _place(rng, length, needles, queries * (m + 2), vocab)
    first = [starts[int(np.flatnonzero(owner == j)[0])] for j in range(N)]
    asked = []
    for _ in range(queries):  # the last question's draws are the single-question example's
        absent = rng.random() < cfg.absent_prob
        j = int(rng.integers(0, N))
        asked.append((keys[N], np.full(m, vocab.END), None) if absent else (keys[j], answers[j], first[j]))
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


def _word_list(probe: str, vocab, length: int, rng):
    """common_words or frequent_words (RULER's cwe, fwe): (row, [(None, answer, None)]), the answer
    the asked words in the order they first appear."""
    cfg = vocab.cfg
    t, n = cfg.n_top, cfg.n_symbols
    free = length - 2 - t  # after BOS, before the question
    if free < _min_list(probe, cfg):
        raise ValueError(f"{probe}: length {length} is too short; it needs at least {min_length(probe, cfg)} tokens")
    words = rng.permutation(n) + vocab.first_symbol  # words[:t] are the answer
    if probe == "common_words":
        common, rare = _cwe_repeats(length)
        b = free // (common * t + rare * (n - t))
        if b < 1:
            raise ValueError(f"common_words: length {length} is too short for RULER's repeats {common} and {rare}")
        counts = np.full(n, rare * b)
        counts[:t] = common * b
    else:
        counts = zipf_counts(free, n)
    listed = np.repeat(words, counts)
    body = rng.permutation(np.concatenate([listed, np.resize(vocab.filler, free - len(listed))]))
    row = np.empty(length, dtype=np.int64)
    row[0] = vocab.BOS
    row[1 : 1 + free] = body
    row[1 + free] = vocab.ASK
    return row, [(None, _by_first_appearance(body, words[:t]), None)]


def _by_first_appearance(body: np.ndarray, words: np.ndarray) -> np.ndarray:
    first = [int(np.flatnonzero(body == w)[0]) for w in words]
    return words[np.argsort(first)]


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
    if probe in WORD_PROBES:  # common_words, frequent_words: the top n_top, tied or not, as they first appear
        symbols = h[vocab.is_symbol(h)]
        ids, counts = np.unique(symbols, return_counts=True)
        order = np.argsort(-counts, kind="stable")
        if cfg.n_top < len(counts) and counts[order[cfg.n_top - 1]] <= counts[order[cfg.n_top]]:
            raise ValueError("oracle: the asked words are not strictly more frequent than the rest")
        return _by_first_appearance(h, ids[order[: cfg.n_top]])
    statements = {}  # key -> the tokens between it and END, over every statement of the key in order
    for start in np.flatnonzero(h == vocab.MARK):
        end = start + 1 + int(np.flatnonzero(h[start + 1 :] == vocab.END)[0])
        statements.setdefault(int(h[start + 1]), []).extend(h[start + 2 : end])
    asked = int(h[-1])
    if probe == "multikey":
        return np.array(statements[asked]) if asked in statements else np.full(cfg.n_values, vocab.END)
    chain = []  # vartrack: from the value, each name assigned from the one before
    while asked in statements and len(chain) < cfg.hops:
        asked = int(statements[asked][0])
        chain.append(asked)
    return np.array(chain + [vocab.END] * (cfg.hops - len(chain)))
