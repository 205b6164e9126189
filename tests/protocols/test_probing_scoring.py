"""The probes' scoring rules: RULER's string_match_all and string_match_part (hsiehjackson/RULER,
scripts/eval/synthetic/constants.py) reproduced on hand-written answers, and the cells a rule counts."""

import numpy as np
import pytest
import torch

from posbench.protocols.probing import probes as P
from posbench.protocols.probing import scoring

CFG = P.ProbeConfig(n_symbols=10, n_keys=12, n_needles=3, n_values=2, absent_prob=0.0, hops=4, n_chains=1, n_top=4, filler_len=3)
VOCAB = P.ProbeVocab(20, CFG)


def ruler_string_match_all(preds: list[str], refs: list[list[str]]) -> float:
    """RULER's rule as its constants.py states it: per prediction, the share of its reference
    strings that occur in it (case-folded), averaged over predictions."""
    return sum(sum(r.lower() in p.lower() for r in ref) / len(ref) for p, ref in zip(preds, refs)) / len(preds)


def ruler_string_match_part(preds: list[str], refs: list[list[str]]) -> float:
    """RULER's QA rule: 1 per prediction holding any of its reference strings, averaged."""
    return sum(max(float(r.lower() in p.lower()) for r in ref) for p, ref in zip(preds, refs)) / len(preds)


def _score(rule, preds, refs):
    hits, counted = scoring.string_match(np.array(preds), np.array(refs), rule)
    return float(np.mean(hits / counted)), hits, counted


def test_right_names_in_the_wrong_order_score_one_half_of_them_a_half():
    refs = [[31, 32, 33, 34]] * 4
    preds = [
        [34, 33, 32, 31],  # every name, in the wrong order
        [31, 32, 40, 40],  # half of them
        [40, 31, 40, 40],  # one of four
        [40, 40, 40, 40],  # none
    ]
    words = {t: f"word{t}" for t in range(20, 50)}
    as_text = [" ".join(words[t] for t in p) for p in preds]
    as_refs = [[words[t] for t in r] for r in refs]
    for i, expected_all, expected_part in [(0, 1.0, 1.0), (1, 0.5, 1.0), (2, 0.25, 1.0), (3, 0.0, 0.0)]:
        got_all, _, _ = _score("string_match_all", [preds[i]], [refs[i]])
        got_part, _, _ = _score("string_match_part", [preds[i]], [refs[i]])
        assert got_all == expected_all == ruler_string_match_all([as_text[i]], [as_refs[i]])
        assert got_part == expected_part == ruler_string_match_part([as_text[i]], [as_refs[i]])
    # over the four answers: RULER's mean of per-answer scores
    mean_all, hits, counted = _score("string_match_all", preds, refs)
    assert mean_all == pytest.approx(ruler_string_match_all(as_text, as_refs)) == pytest.approx((1 + 0.5 + 0.25) / 4)
    assert hits.tolist() == [4, 2, 1, 0] and counted.tolist() == [4, 4, 4, 4]  # a cell pools items: 7 of 16
    mean_part, _, counted = _score("string_match_part", preds, refs)
    assert mean_part == ruler_string_match_part(as_text, as_refs) == 0.75 and counted.tolist() == [1] * 4


def test_missing_reference_items_are_not_counted_and_repeats_each_count():
    # vartrack's END padding (-1) is no item; a value a key holds twice is found twice (as RULER's strings are)
    hits, counted = scoring.string_match(
        np.array([[31, 32, 20, 20], [33, 33, 40, 40]]), np.array([[32, 31, -1, -1], [33, 33, -1, -1]]), "string_match_all"
    )
    assert hits.tolist() == [2, 2] and counted.tolist() == [2, 2]
    with pytest.raises(
        ValueError, match="scoring 'exact' is not a string-match rule; allowed: string_match_all, string_match_part"
    ):
        scoring.string_match(np.zeros((1, 1)), np.zeros((1, 1)), "exact")


class ReplayModel:
    """Predicts, at every position, the token ``answer[j]`` where j counts the tokens fed since the
    question's last token: a fixed hand-written answer, decoded greedily through a cache."""

    def __init__(self, answer: list[int], prompt_len: int):
        self.answer, self.prompt_len = answer, prompt_len

    def new_cache(self):
        return _Cache([0])

    def __call__(self, idx, cache=None):
        cache[0] += idx.shape[1]
        logits = torch.full((idx.shape[0], idx.shape[1], VOCAB.vocab_size), -1e9)
        j = cache[0] - self.prompt_len
        logits[:, -1, self.answer[min(max(j, 0), len(self.answer) - 1)]] = 0.0
        return logits


class _Cache(list):
    def fork(self):
        return _Cache(self)


def test_a_cell_counts_what_its_rule_counts():
    """common_words answered with its words reversed: exact scores 0, string_match_all 1 (4 items of
    4 per answer), string_match_part 1; answered with half of them, all scores a half."""
    batch = P.generate(P.ProbeRequest("common_words", 80), VOCAB, 1, seed=0)
    ((s, e),) = batch.spans
    truth = batch.tokens[0, s:e].tolist()
    reversed_model = ReplayModel(truth[::-1], s)
    assert scoring.score_counts(reversed_model, batch, "cpu", 1, "exact")[0].tolist() == [[0]]
    assert [x.tolist() for x in scoring.score_counts(reversed_model, batch, "cpu", 1, "string_match_all")] == [[[4]], [[4]]]
    assert [x.tolist() for x in scoring.score_counts(reversed_model, batch, "cpu", 1, "string_match_part")] == [[[1]], [[1]]]
    other = [t for t in VOCAB.first_symbol + np.arange(CFG.n_symbols) if t not in truth][:2]
    half = ReplayModel([truth[1], *other, truth[0]], s)
    assert [x.tolist() for x in scoring.score_counts(half, batch, "cpu", 1, "string_match_all")] == [[[2]], [[4]]]
    assert scoring.score_counts(ReplayModel(truth, s), batch, "cpu", 1, "exact")[0].tolist() == [[1]]


def test_only_rulers_probes_take_the_settings_rule():
    class S:
        scoring = "string_match_all"

    assert scoring.rule_of("multikey", S) == "string_match_all" and scoring.rule_of("passkey", S) == "exact"
    assert scoring.rule_of("frequent_words", object()) == "exact"  # the extension task's settings have no scoring
