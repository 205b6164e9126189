"""The retrieval probes' scoring: answers decoded greedily through the KV cache (or, for the
training's held-out checks, argmax in one forward, exactly right where greedy decoding is), scored
by a rule, and the cells of one L_valid (``s`` is the retrieval or extension task's Settings).

Rules (``RULES``): ``exact``, the whole answer right in order (posbench's; the only rule of passkey,
mqar, copy and reverse, and of the held-out checks of training to criterion); RULER's two, from
``scripts/eval/synthetic/constants.py`` (hsiehjackson/RULER), where a reference item counts as found
when it occurs anywhere in the prediction: ``string_match_all``, the share of the reference items
found (order-free, partial credit; RULER's rule for niah, variable tracking, common and frequent
words), and ``string_match_part``, 1 when any is found (RULER's rule for its QA tasks alone). Tokens
stand for RULER's strings: a reference token is found when the decoded answer holds it.

A cell counts what its rule counts: exact and string_match_part one per answer; string_match_all
one per reference item, so a cell's share is RULER's mean over answers exactly (every answer of a
cell has as many reference items: multikey m, vartrack its hops, the word probes n_top).
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import replace

import numpy as np
import torch

from posbench.protocols.probing import probes as P


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
        branch = cache.fork()  # a copy: the answer decoded into it never reaches the trunk
        for _ in range(end - start - 1):
            nxt = model(nxt[:, None], cache=branch)[:, -1].argmax(-1)
            answer.append(nxt)
        out.append(torch.stack(answer, dim=1))
        cursor = start
    return out


@torch.no_grad()
def forced_answers(model, tokens: torch.Tensor, spans: list[tuple[int, int]]) -> list[torch.Tensor]:
    """Each span's argmax predictions from one forward over the true sequence tokens (B, T): one
    (B, end - start) tensor per span. Exactly right where ``greedy_answers`` is (tested): a greedy
    answer is right only if each of its tokens is, each predicted from the true prefix."""
    pred = model(tokens[:, :-1]).argmax(-1)  # (B, T - 1): pred[:, j] guesses tokens[:, j + 1]
    return [pred[:, s - 1 : e - 1] for s, e in spans]


RULES = ("string_match_all", "string_match_part", "exact")


def string_match(pred: np.ndarray, refs: np.ndarray, rule: str) -> tuple[np.ndarray, np.ndarray]:
    """(hits, counted), each (n,) int, of predictions ``pred`` (n, k) against reference items
    ``refs`` (n, r) (-1: no item) under a RULER rule: string_match_all, hits = the reference items
    found in the prediction and counted = the items (score hits / counted); string_match_part,
    hits = 1 when any is found, counted = 1."""
    valid = refs >= 0  # (n, r)
    found = (refs[:, :, None] == pred[:, None, :]).any(-1) & valid  # (n, r)
    if rule == "string_match_all":
        return found.sum(1), valid.sum(1)
    if rule == "string_match_part":
        return found.any(1).astype(np.int64), np.ones(len(pred), dtype=np.int64)
    raise ValueError(f"scoring {rule!r} is not a string-match rule; allowed: string_match_all, string_match_part")


def score(model, batch: P.ProbeBatch, device, batch_size: int, answers=greedy_answers) -> np.ndarray:
    """(n, n_spans) bool: whether each answer was exactly right, decoded by ``answers``
    (``greedy_answers`` through the KV cache, or ``forced_answers``, one forward, for the
    training's held-out checks)."""
    rows = []
    for i in range(0, len(batch.tokens), batch_size):
        tokens = torch.from_numpy(batch.tokens[i : i + batch_size]).to(device)
        decoded = answers(model, tokens, batch.spans)
        rows.append(torch.stack([(a == tokens[:, s:e]).all(dim=1) for a, (s, e) in zip(decoded, batch.spans)], 1))
    return torch.cat(rows).cpu().numpy()


def score_counts(model, batch: P.ProbeBatch, device, batch_size: int, rule: str = "exact"):
    """(hits, counted), each (n, n_spans) int, of greedy answers under ``rule`` (``RULES``): exact,
    hits = 1 per answer exactly right, counted = 1; RULER's rules: ``string_match`` against the
    batch's reference items (a batch without them is scored exactly)."""
    if rule == "exact" or batch.items is None:
        ok = score(model, batch, device, batch_size).astype(np.int64)
        return ok, np.ones_like(ok)
    hits, counted = [], []
    for i in range(0, len(batch.tokens), batch_size):
        tokens = torch.from_numpy(batch.tokens[i : i + batch_size]).to(device)
        decoded = greedy_answers(model, tokens, batch.spans)
        per_span = [string_match(a.cpu().numpy(), batch.items[i : i + batch_size, j], rule) for j, a in enumerate(decoded)]
        hits.append(np.stack([h for h, _ in per_span], 1))
        counted.append(np.stack([c for _, c in per_span], 1))
    return np.concatenate(hits), np.concatenate(counted)


def eval_length(model, probe: str, vocab: P.ProbeVocab, Lv: int, s, device) -> tuple[list, list]:
    """Cells (one per depth for passkey, vartrack one per hops, else one) and mqar distance buckets
    at one L_valid; RULER's probes scored by the settings' ``scoring`` (``rule_of``), the others exactly."""
    seed = 2**31 + s.seed  # disjoint from the training draws (below 2**31)
    # Examples of Lv + 1 tokens, as training's rows of L_train + 1: the model reads positions
    # 0..Lv-1 and the last answer token is only predicted. With Lv tokens every answer sat one
    # position earlier than in training, and sinusoidal scored 0% at L_train on a checkpoint that
    # scores 100% on examples shaped as in training.
    request = P.ProbeRequest(probe, Lv + 1)
    if probe == "passkey":
        per_depth = math.ceil(s.eval_samples / len(s.depths))
        plan = [(d, P.generate(replace(request, depth=d), vocab, per_depth, seed)) for d in s.depths]
    elif probe == "mqar":
        plan = [(None, P.generate(request, vocab, math.ceil(s.eval_samples / vocab.cfg.n_queries), seed))]
    elif probe == "vartrack":  # hops is an axis: one cell per chain length
        per_hops = math.ceil(s.eval_samples / vocab.cfg.hops)
        plan = [(None, P.generate(replace(request, hops=k), vocab, per_hops, seed), k) for k in range(1, vocab.cfg.hops + 1)]
    else:
        plan = [(None, P.generate(request, vocab, s.eval_samples, seed))]
    rule = rule_of(probe, s)
    cells, distance = [], defaultdict(lambda: [0, 0])
    for depth, batch, *hops in plan:
        cell = {"L_valid": Lv, "depth": depth, "correct": 0, "total": 0, "status": "ok", "message": ""}
        if hops:
            cell["hops"] = hops[0]
        try:
            ok, counted = score_counts(model, batch, device, s.eval_batch_size, rule)  # (n, n_spans) each
        except (MemoryError, torch.cuda.OutOfMemoryError) as exc:
            text = str(exc).splitlines()
            cell.update(status="oom", message=f"{type(exc).__name__}: {text[0] if text else ''}")
            if torch.device(device).type == "cuda":
                torch.cuda.empty_cache()
            cells.append(cell)
            continue
        cell.update(correct=int(ok.sum()), total=int(counted.sum()))
        cells.append(cell)
        if probe == "mqar":
            # Distance buckets: powers of two, bucket b holds distances in (b/2, b].
            buckets = 2 ** np.ceil(np.log2(np.maximum(batch.distance, 1))).astype(np.int64)
            for b, hit in zip(buckets.ravel(), ok.ravel()):
                distance[int(b)][0] += int(hit)
                distance[int(b)][1] += 1
    by_distance = [{"L_valid": Lv, "distance": b, "correct": c, "total": t} for b, (c, t) in sorted(distance.items())]
    return cells, by_distance


def rule_of(probe: str, s) -> str:
    """The scoring rule of ``probe`` under settings ``s``: its ``scoring`` for RULER's probes (the
    extension task's settings have none), exact for the others."""
    return getattr(s, "scoring", "exact") if probe in P.RULER_PROBES else "exact"
