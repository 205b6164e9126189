"""RULER's probes (multikey, vartrack, aggregate): answers checkable by construction (an oracle reads
each answer off the prompt), layouts, chance levels against a uniform guesser, the hops axis, and a
tiny run of each probe."""

from dataclasses import replace

import numpy as np
import pytest

from posbench.protocols.probing import probes as P
from posbench.protocols.probing import ruler, scoring
from posbench.report.stats import wilson_interval
from tests.helpers.cases import RETRIEVAL_TINY, make_case

# posbench's earlier multikey (packed needles, absent keys): the strict options these tests pin down
CFG = P.ProbeConfig(
    n_symbols=10,
    n_keys=12,
    n_needles=3,
    n_values=2,
    absent_prob=0.25,
    hops=3,
    n_chains=2,
    n_top=2,
    filler_len=3,
    needles="packed",
)
VOCAB = P.ProbeVocab(20, CFG)
# RULER's form: one needle per value, no absent keys
RULER_CFG = replace(CFG, needles="separate", absent_prob=0.0)
RULER_VOCAB = P.ProbeVocab(20, RULER_CFG)


@pytest.mark.parametrize("probe", ruler.RULER_PROBES)
@pytest.mark.parametrize("extra", [0, 13, 150])
@pytest.mark.parametrize("vocab", [VOCAB, RULER_VOCAB], ids=["packed", "ruler"])
def test_every_answer_is_what_the_oracle_reads_off_the_prompt(probe, extra, vocab):
    length = P.min_length(probe, vocab.cfg) + extra
    batch = P.generate(P.ProbeRequest(probe, length), vocab, 40, seed=extra)
    ((s, e),) = batch.spans
    assert batch.tokens.shape == (40, length) and e == length and (batch.tokens[:, 0] == VOCAB.BOS).all()
    for row in batch.tokens:
        assert np.array_equal(ruler.oracle_answer(vocab, probe, row[:s]), row[s:e])
    again = P.generate(P.ProbeRequest(probe, length), vocab, 40, seed=extra)
    assert np.array_equal(again.tokens, batch.tokens)  # deterministic in its arguments


@pytest.mark.parametrize("probe", ["multikey", "vartrack"])
def test_training_examples_ask_several_questions_each_answered_by_its_prompt(probe):
    length = P.min_length(probe, CFG, queries=4) + 9
    batch = P.generate(P.ProbeRequest(probe, length, queries=4), VOCAB, 60, seed=4)
    m = ruler.answer_len(probe, CFG)
    assert batch.spans == [(length - (4 - j) * (m + 2) + 2, length - (3 - j) * (m + 2)) for j in range(4)]
    assert batch.spans[-1] == (length - m, length) and batch.distance.shape == (60, 4)
    for row, dist in zip(batch.tokens, batch.distance):
        for (s, e), d in zip(batch.spans, dist):
            assert row[s - 2] == VOCAB.ASK and np.array_equal(ruler.oracle_answer(VOCAB, probe, row[:s]), row[s:e])
            if d:  # the asked key's own statement starts d tokens before it
                assert row[s - 1 - d] == VOCAB.MARK
    if probe == "vartrack":  # every question asks a value its chains hold, each chain 1..hops long
        asked = batch.tokens[:, [s - 1 for s, _ in batch.spans]]
        assert VOCAB.is_symbol(asked).all()
        hops = {int((row[s:e] != VOCAB.END).sum()) for row in batch.tokens for s, e in batch.spans}
        assert hops == set(range(1, CFG.hops + 1))
    one = P.generate(P.ProbeRequest(probe, length), VOCAB, 60, seed=4)
    assert one.spans == [(length - m, length)]  # the evaluation's single question


def test_training_questions_are_refused_where_the_layout_fixes_them():
    for probe in ("aggregate", "passkey", "mqar"):
        with pytest.raises(ValueError, match=f"probe {probe}: queries 3 is not allowed; only multikey and vartrack"):
            P.generate(P.ProbeRequest(probe, 200, queries=3), VOCAB, 1, seed=0)


def test_the_training_mix_asks_train_queries_and_trains_on_every_answer(tmp_path):
    from posbench.protocols.probing import training_mix

    lm = np.arange(500, dtype=np.int64) % 20
    gen = training_mix.mixed_batches(
        lm, VOCAB, training_mix.TrainingMix(["multikey", "aggregate"], 60, 16, 1.0, loss="answers", queries=3), seed=0
    )
    ids, targets = next(gen)
    for row, tgt in zip(ids.numpy(), targets.numpy()):
        asks = np.flatnonzero(row[:-1] == VOCAB.ASK)
        kept = np.flatnonzero(tgt != -100)
        if len(asks) == 3:  # multikey: 3 questions, each answer's n_values tokens trained
            assert len(kept) == 3 * CFG.n_values and (np.isin(asks + 1, kept - 1) | np.isin(asks + 1, kept - 2)).all()
        else:  # aggregate keeps its one question
            assert len(asks) == 1 and len(kept) == CFG.n_top
    task, case = make_case(
        "retrieval", "rotary", {"L_train": 30, "probe": "multikey"}, _tiny(train_queries=4, needles="packed"), tmp_path
    )
    with pytest.raises(ValueError, match="L_train 30 is too short to train on probe multikey \\(it needs 31 tokens\\)"):
        task.run(case)


def _tiny(**extra):
    return dict(RETRIEVAL_TINY, n_keys=8, n_needles=3, n_values=2, model_per_probe=True, mix=1.0, **extra)


def test_multikey_holds_distinct_needles_and_asks_absent_keys_at_their_rate():
    batch = P.generate(P.ProbeRequest("multikey", 80), VOCAB, 2000, seed=1)
    ((s, e),) = batch.spans
    for row in batch.tokens[:50]:
        marks = np.flatnonzero(row[:s] == VOCAB.MARK)
        assert len(marks) == CFG.n_needles and len(set(row[marks + 1])) == CFG.n_needles  # distinct keys
        assert (row[marks + 2 + CFG.n_values] == VOCAB.END).all()
        assert row[s - 2] == VOCAB.ASK
    absent = (batch.tokens[:, s:e] == VOCAB.END).all(axis=1)
    lo, hi = wilson_interval(int(absent.sum()), len(absent))
    assert lo < CFG.absent_prob < hi
    assert (batch.distance[absent] == 0).all() and (batch.distance[~absent] > 0).all()


def test_vartrack_chains_keep_their_order_and_hops_is_the_chain_length():
    for hops in (1, 2, 3):
        batch = P.generate(P.ProbeRequest("vartrack", 90, hops=hops), VOCAB, 30, seed=hops)
        ((s, e),) = batch.spans
        assert e - s == CFG.hops  # the chain's names, padded with END to the longest chain
        for row in batch.tokens:
            marks = np.flatnonzero(row[:s] == VOCAB.MARK)
            assert len(marks) == CFG.n_chains * hops
            assigned = [int(row[m + 2]) for m in marks]  # MARK source name END: name = source
            for m in marks:  # a name is used as a source only after its own assignment
                src = int(row[m + 1])
                if not VOCAB.is_symbol(np.array([src]))[0]:
                    assert assigned.index(src) < list(marks).index(m)
            answer = row[s:e]
            assert (answer[:hops] != VOCAB.END).all() and (answer[hops:] == VOCAB.END).all()
            assert row[s - 2] == VOCAB.ASK and VOCAB.is_symbol(row[s - 1 : s]).all()  # ASK v
    with pytest.raises(ValueError, match="hops 4 must lie in 1..3"):
        P.generate(P.ProbeRequest("vartrack", 90, hops=4), VOCAB, 2, seed=0)


def test_aggregate_ranks_the_top_words_by_strictly_higher_counts():
    batch = P.generate(P.ProbeRequest("aggregate", 200), VOCAB, 20, seed=2)
    ((s, e),) = batch.spans
    for row in batch.tokens:
        counts = {int(t): int((row[:s] == t).sum()) for t in VOCAB.first_symbol + np.arange(CFG.n_symbols)}
        top = [int(t) for t in row[s:e]]
        rest = max(c for t, c in counts.items() if t not in top)
        assert counts[top[0]] > counts[top[1]] > rest and row[s - 1] == VOCAB.ASK


class GuessingModel:
    """Logits with a tiny random value on every answer token: a uniform guess among them."""

    def __init__(self, answers: np.ndarray, seed: int = 0):
        import torch

        self.answers, self.g = torch.as_tensor(answers), torch.Generator().manual_seed(seed)

    def new_cache(self):
        return _Cache()

    def __call__(self, idx, cache=None):
        import torch

        logits = torch.full((idx.shape[0], idx.shape[1], VOCAB.vocab_size), -1e9)
        logits[:, :, self.answers] = 1e-6 * torch.rand(idx.shape[0], idx.shape[1], len(self.answers), generator=self.g)
        return logits


class _Cache(list):
    def fork(self):
        return _Cache(self)


@pytest.mark.parametrize("probe", ["vartrack", "aggregate"])
def test_a_uniform_guesser_scores_the_stated_chance(probe):
    cfg = P.ProbeConfig(n_symbols=6, n_keys=5, n_pairs=4, hops=2, n_chains=2, n_top=1, filler_len=3)
    vocab = P.ProbeVocab(20, cfg)
    batch = P.generate(P.ProbeRequest(probe, 60), vocab, 3000, seed=5)
    if probe == "vartrack":  # each answer token among the names and END: (5 + 1) ** -2
        guesses, expected = np.append(vocab.first_key + np.arange(cfg.n_keys), vocab.END), 1 / 36
    else:  # the most frequent of 6 symbols
        guesses, expected = vocab.first_symbol + np.arange(cfg.n_symbols), 1 / 6
    ok = scoring.score(GuessingModel(guesses), batch, "cpu", batch_size=500)
    lo, hi = wilson_interval(int(ok.sum()), ok.size)
    assert P.chance(probe, cfg) == pytest.approx(expected) and lo < expected < hi


def test_multikey_chance_is_the_better_of_always_absent_and_a_uniform_guess():
    assert P.chance("multikey", CFG) == pytest.approx(0.25)
    rare = P.ProbeConfig(n_symbols=2, n_values=1, absent_prob=0.1)
    assert P.chance("multikey", rare) == pytest.approx(0.9 * 0.5)
    assert P.chance("aggregate", CFG) == pytest.approx(1 / 90)  # an ordered pair of 10 symbols


def test_shapes_that_do_not_fit_are_one_line():
    with pytest.raises(ValueError, match="n_needles 12 must be below n_keys 12"):
        P.generate(P.ProbeRequest("multikey", 200), P.ProbeVocab(20, P.ProbeConfig(n_keys=12, n_needles=12)), 1, seed=0)
    with pytest.raises(ValueError, match="n_chains \\* hops <= n_keys"):
        P.generate(
            P.ProbeRequest("vartrack", 200), P.ProbeVocab(20, P.ProbeConfig(n_keys=4, n_pairs=4, n_queries=1, hops=3)), 1, seed=0
        )
    with pytest.raises(ValueError, match="too short"):
        P.generate(P.ProbeRequest("aggregate", P.min_length("aggregate", CFG) - 1), VOCAB, 1, seed=0)


@pytest.mark.parametrize("probe", ruler.RULER_PROBES)
def test_a_tiny_run_scores_each_probe_and_vartrack_per_hops(tmp_path, probe):
    settings = dict(RETRIEVAL_TINY, n_keys=8, n_needles=2, n_values=2, hops=2, model_per_probe=True, mix=1.0)
    task, case = make_case("retrieval", "rotary", {"L_train": 32, "probe": probe}, settings, tmp_path)
    out = task.run(case)
    cells = out["series"]["cells"]
    if probe == "vartrack":
        assert [(c["L_valid"], c["hops"]) for c in cells] == [(32, 1), (32, 2), (64, 1), (64, 2)]
    else:
        assert [c["L_valid"] for c in cells] == [32, 64]
    # RULER's probes are scored by RULER's string_match_all by default, and the row says so
    assert out["series"]["scoring"] == "string_match_all"
    assert out["metrics"]["chance"] == P.chance(probe, task.Settings(**settings).probe_config(), "string_match_all")
    assert out["metrics"]["acc@64"] == sum(c["correct"] for c in cells if c["L_valid"] == 64) / sum(
        c["total"] for c in cells if c["L_valid"] == 64
    )


def test_attention_diagnostics_of_a_probe_are_stored_and_tabled(tmp_path):
    from posbench.protocols.attention_diagnostics import attention_tables
    from posbench.report.rows import load_runs
    from posbench.tasks import find as find_task
    from tests.helpers.report_rows import base_row, write_run

    settings = dict(RETRIEVAL_TINY, model_per_probe=True, mix=1.0, attention_diagnostics=True, attention_sequences=2)
    task, case = make_case("retrieval", "alibi", {"L_train": 32, "probe": "aggregate"}, settings, tmp_path)
    out = task.run(case)
    entries = out["series"]["attention"]
    assert [(e["L_valid"], e["layer"]) for e in entries] == [(32, 0), (64, 0)] and len(entries[0]["first_mass"]) == 2
    assert set(entries[1]["mass_by_distance"]) == {"0", "1-8", "9-32", "33-64"}
    assert out["metrics"]["attn_first_mass@64"] == pytest.approx(sum(entries[1]["first_mass"]) / 2)
    rows = [base_row("t", "retrieval", "alibi", {"L_train": 32, "probe": "aggregate"}, "r", series=out["series"])]
    ratio, first, mass = attention_tables(load_runs(write_run(tmp_path / "results", rows), find_task=find_task), "retrieval")
    assert ratio.title.endswith("L_train = 32, probe = aggregate") and ratio.columns == [32, 64]
    assert ratio.cell("alibi", 64).value == pytest.approx(out["metrics"]["attn_entropy_ratio@64"])


def test_vartrack_accuracy_by_hops_pools_rows_and_keeps_each_chain_length():
    from posbench.tasks.retrieval import accuracy
    from posbench.tasks.retrieval import report as charts

    def cell(Lv, hops, k, n):
        return {"L_valid": Lv, "depth": None, "hops": hops, "correct": k, "total": n, "status": "ok", "message": ""}

    def row(method, cells):
        return {
            "method": method,
            "task": "retrieval",
            "status": "ok",
            "params": {"L_train": 8, "probe": "vartrack"},
            "series": {"cells": cells},
        }

    rows = [
        row("alibi", [cell(8, 1, 9, 10), cell(8, 2, 6, 10), cell(16, 1, 5, 10), cell(16, 2, 1, 10)]),
        row("alibi", [cell(8, 1, 10, 10), cell(8, 2, 4, 10)]),  # a second seed or run: pooled
    ]
    got = {(t["hops"], t["L_valid"]): t for t in accuracy.hops_table(rows, "vartrack")}
    assert got[1, 8]["acc"] == pytest.approx(19 / 20) and got[2, 8]["acc"] == pytest.approx(0.5)
    assert (got[2, 16]["lo"], got[2, 16]["hi"]) == wilson_interval(1, 10)
    t = charts.hops_probe_table(rows, "vartrack")
    assert t.rows == ["alibi, hops=1", "alibi, hops=2"] and t.columns == [8, 16]
    assert t.cell("alibi, hops=2", 8).text.startswith("50% [") and t.cell("alibi, hops=1", 16).value == pytest.approx(0.5)
    assert charts.hops_probe_table([row("alibi", [{**cell(8, 1, 1, 2), "hops": None}])], "vartrack") is None


def test_train_queries_at_its_default_leaves_run_ids_as_they_were():
    """The retrieval suite's cpu run id from before the setting existed: resume still finds its folder."""
    from posbench.run import suite as suitemod

    loaded = suitemod.load(suitemod.find("retrieval"))
    assert suitemod.resolve(loaded, "cpu").fingerprint() == "1f39eb33"
    assert suitemod.resolve(loaded, "cpu", {"train_queries": 1}).fingerprint() == "1f39eb33"
    assert suitemod.resolve(loaded, "cpu", {"train_queries": 4}).fingerprint() != "1f39eb33"


def test_a_model_probe_cases_share_is_trained_once_under_its_lock(tmp_path):
    """Two probe cases of one method share a model trained on both probes: under --parallel the
    second waits on the checkpoint's lock, then reuses what the first trained."""
    import threading
    import time

    from posbench.engine.saved_model import exclusive
    from posbench.tasks.retrieval.run import shared_checkpoint

    settings = dict(RETRIEVAL_TINY, n_keys=8, n_needles=2, n_values=1, train_probes=["multikey", "aggregate"], mix=1.0)
    task, first = make_case("retrieval", "rotary", {"L_train": 32, "probe": "multikey"}, settings, tmp_path)
    _, second = make_case("retrieval", "rotary", {"L_train": 32, "probe": "aggregate"}, settings, tmp_path)
    ckpt = shared_checkpoint(second, task.Settings(**settings))
    assert ckpt == shared_checkpoint(first, task.Settings(**settings)) and ckpt.name.endswith("L_train=32.pt")
    out = {}
    with exclusive(ckpt):  # another case is training the shared model
        waiting = threading.Thread(target=lambda: out.update(second=task.run(second)))
        waiting.start()
        time.sleep(3)  # a case of this size runs in about 1.5 s: unlocked, it would be done
        assert "second" not in out  # it waits for the lock rather than training alongside
    waiting.join(60)
    out["first"] = task.run(first)
    assert out["second"]["metrics"]["reused_checkpoint"] == 0 and out["first"]["metrics"]["reused_checkpoint"] == 1


def test_multikey_in_rulers_form_puts_each_value_in_a_needle_of_its_own():
    """RULER's niah.py: one needle "key: value" per value, shuffled to random depths; the answer is
    the asked key's values in the order they appear, and no query asks an absent key."""
    m = RULER_CFG.n_values
    batch = P.generate(P.ProbeRequest("multikey", 90), RULER_VOCAB, 300, seed=3)
    ((s, e),) = batch.spans
    for row, items in zip(batch.tokens, batch.items[:, 0]):
        marks = np.flatnonzero(row[:s] == RULER_VOCAB.MARK)
        assert len(marks) == RULER_CFG.n_needles * m and (row[marks + 3] == RULER_VOCAB.END).all()
        keys, counts = np.unique(row[marks + 1], return_counts=True)
        assert len(keys) == RULER_CFG.n_needles and (counts == m).all()  # each key in m needles
        asked = row[s - 1]
        assert np.array_equal(row[s:e], row[marks[row[marks + 1] == asked] + 2]) and np.array_equal(items, row[s:e])
    assert not (batch.tokens[:, s:e] == RULER_VOCAB.END).any()  # absent_prob 0: every key asked is in the context
    needles = batch.tokens[:, s - 1][:, None] == batch.tokens[:, :s]
    spread = [np.ptp(np.flatnonzero(r)) for r in needles]  # a key's needles lie apart, not side by side
    assert np.mean(spread) > 10
    # the packed form's draws are those of before the option existed
    packed = P.generate(P.ProbeRequest("multikey", 90), VOCAB, 5, seed=3)
    marks = np.flatnonzero(packed.tokens[0, : packed.spans[0][0]] == VOCAB.MARK)
    assert len(marks) == CFG.n_needles and P.min_length("multikey", RULER_CFG) == 1 + 3 * 2 * 4 + 4


@pytest.mark.parametrize("length", [80, 4100])
def test_common_words_repeat_as_rulers_cwe_and_tie_the_answer(length):
    """common_words_extraction.py: each common word freq_cw times, each other freq_ucw times (6 and
    1 below 4096 tokens, 30 and 3 from 4096): the common words are tied, every one of them the answer."""
    common, rare = (6, 1) if length < 4096 else (30, 3)
    batch = P.generate(P.ProbeRequest("common_words", length), RULER_VOCAB, 6, seed=1)
    ((s, e),) = batch.spans
    free = s - 2
    b = free // (common * RULER_CFG.n_top + rare * (RULER_CFG.n_symbols - RULER_CFG.n_top))
    for row in batch.tokens:
        counts = {int(t): int((row[:s] == t).sum()) for t in RULER_VOCAB.first_symbol + np.arange(RULER_CFG.n_symbols)}
        answer = [int(t) for t in row[s:e]]
        assert sorted(counts[t] for t in answer) == [common * b] * RULER_CFG.n_top
        assert {c for t, c in counts.items() if t not in answer} == {rare * b}
        assert answer == sorted(answer, key=lambda t: int(np.flatnonzero(row == t)[0]))  # as they first appear


def test_frequent_words_follow_zipf_with_rank_one_as_noise():
    """freq_words_extraction.py: rank k occurs floor(n k^-2 / zeta(2)) times, rank 1 is noise (the
    filler here), and the answer is ranks 2..4 (n_top 3), unordered in RULER."""
    cfg = replace(RULER_CFG, n_top=3)
    vocab = P.ProbeVocab(20, cfg)
    length = P.min_length("frequent_words", cfg) + 40
    batch = P.generate(P.ProbeRequest("frequent_words", length), vocab, 10, seed=2)
    ((s, e),) = batch.spans
    free = s - 2
    expected = np.floor(free * np.arange(2, cfg.n_symbols + 2, dtype=float) ** -2 / (np.pi**2 / 6)).astype(int)
    assert np.array_equal(ruler.zipf_counts(free, cfg.n_symbols), expected) and expected[0] == int(free * 0.25 / 1.6449)
    for row in batch.tokens:
        counts = sorted((int((row[1 : s - 1] == t).sum()) for t in vocab.first_symbol + np.arange(cfg.n_symbols)), reverse=True)
        assert counts == list(expected)
        answer_counts = sorted((int((row[1 : s - 1] == t).sum()) for t in row[s:e]), reverse=True)
        assert answer_counts == list(expected[:3]) and expected[2] > expected[3]
        assert (~vocab.is_symbol(row[1 : s - 1])).sum() == free - expected.sum()  # the rest is noise
    with pytest.raises(ValueError, match="frequent_words: length 60 is too short"):
        P.generate(P.ProbeRequest("frequent_words", 60), vocab, 1, seed=0)


def test_chance_under_string_match_all_is_the_expected_share_found():
    assert P.chance("common_words", RULER_CFG, "string_match_all") == pytest.approx(2 / 10)
    assert P.chance("vartrack", RULER_CFG, "string_match_all") == pytest.approx(3 / 12)
    assert P.chance("multikey", RULER_CFG, "string_match_all") == pytest.approx(2 / 10)
    # with absent keys: one END beside a symbol finds the absent answer and half the chance of a value
    assert P.chance("multikey", CFG, "string_match_all") == pytest.approx(max(0.75 * 2 / 10, 0.25 + 0.75 * 1 / 10))
    assert P.chance("frequent_words", RULER_CFG, "exact") == pytest.approx(1 / 90)
    assert P.chance("multikey", CFG, "string_match_part") is None
