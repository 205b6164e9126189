"""The retrieval suite: probe generators, the oracle, chance level, Wilson intervals, effective
length, KV-cache greedy decoding, the charts against their table, the suite, and tiny runs."""

import types

import numpy as np
import pytest
import torch

from posbench.core.model import build_model, model_config
from posbench.protocols.probing import probes as P
from posbench.protocols.probing import scoring, training_mix
from posbench.report.stats import effective_length, wilson_interval
from posbench.run import suite as suitemod
from posbench.tasks import find as find_task
from posbench.tasks.retrieval import accuracy
from posbench.tasks.retrieval import report as charts
from posbench.tasks.retrieval import run as R
from tests.helpers.cases import RETRIEVAL_TINY, make_case

CFG = P.ProbeConfig(n_symbols=10, key_len=4, n_pairs=6, n_queries=3, segment_len=5, filler_len=3)
VOCAB = P.ProbeVocab(20, CFG)


# --- generators -----------------------------------------------------------------------------


@pytest.mark.parametrize("probe", P.PROBES)
def test_generators_are_deterministic_and_seeded(probe):
    a = P.generate(P.ProbeRequest(probe, 61), VOCAB, 7, seed=3)
    b = P.generate(P.ProbeRequest(probe, 61), VOCAB, 7, seed=3)
    c = P.generate(P.ProbeRequest(probe, 61), VOCAB, 7, seed=4)
    assert np.array_equal(a.tokens, b.tokens) and np.array_equal(a.distance, b.distance)
    assert not np.array_equal(a.tokens, c.tokens)
    assert a.tokens.shape == (7, 61) and a.tokens.dtype == np.int64
    assert a.tokens.min() >= VOCAB.base and a.tokens.max() < VOCAB.vocab_size
    for s, e in a.spans:  # answers are symbols, right after a question token or a queried key
        assert VOCAB.is_symbol(a.tokens[:, s:e]).all()


def test_layouts():
    pk = P.generate(P.ProbeRequest("passkey", 41, depth=0.0), VOCAB, 5, seed=0)
    assert (pk.tokens[:, 0] == VOCAB.BOS).all()  # the start token of every probe example
    assert (pk.tokens[:, 1] == VOCAB.MARK).all() and (pk.tokens[:, 6] == VOCAB.END).all()
    assert np.array_equal(pk.tokens[:, 2:6], pk.tokens[:, 37:41]) and (pk.tokens[:, 36] == VOCAB.ASK).all()
    assert pk.spans == [(37, 41)] and (pk.distance[:, 0] == 35).all()
    end = P.generate(P.ProbeRequest("passkey", 41, depth=1.0), VOCAB, 5, seed=0)
    assert (end.tokens[:, 30] == VOCAB.MARK).all() and (end.tokens[:, 35] == VOCAB.END).all()
    rev = P.generate(P.ProbeRequest("reverse", 30, depth=0.5), VOCAB, 4, seed=1)
    start = int(np.flatnonzero(rev.tokens[0] == VOCAB.MARK)[0])
    assert np.array_equal(rev.tokens[:, start + 1 : start + 6][:, ::-1], rev.tokens[:, 25:30])
    mq = P.generate(P.ProbeRequest("mqar", 50), VOCAB, 4, seed=2)
    assert (mq.tokens[:, 0] == VOCAB.BOS).all()
    assert mq.spans == [(43, 44), (46, 47), (49, 50)]
    assert all(len(set(row[1:13:2])) == 6 for row in mq.tokens)  # distinct keys
    assert (mq.tokens[:, [41, 44, 47]] == VOCAB.QUERY).all()
    # filler: the repeated phrase wherever nothing else sits
    assert list(mq.tokens[0, 13:16]) == list(VOCAB.filler[[1, 2, 0]])


def test_mqar_keys_and_values_come_from_disjoint_alphabets():
    # Zoology's MQAR: a queried key never appears as a value (one shared alphabet: 40% of rows)
    mq = P.generate(P.ProbeRequest("mqar", 60), VOCAB, 300, seed=7)
    keys, values = mq.tokens[:, 1:13:2], mq.tokens[:, 2:13:2]
    assert ((keys >= VOCAB.first_key) & (keys < VOCAB.first_key + CFG.n_keys)).all()
    assert VOCAB.is_symbol(values).all() and not VOCAB.is_symbol(keys).any()
    assert VOCAB.first_key == VOCAB.first_symbol + CFG.n_symbols
    assert VOCAB.vocab_size == 20 + CFG.filler_len + len(P.ProbeVocab.SPECIALS) + CFG.n_symbols + CFG.n_keys
    assert len(np.unique(keys)) == CFG.n_keys  # every key of the alphabet is drawn somewhere


@pytest.mark.parametrize("probe, k", [("copy", 5), ("reverse", 5), ("passkey", 4)])
def test_keys_and_segments_repeat_no_symbol_while_they_fit_the_alphabet(probe, k):
    batch = P.generate(P.ProbeRequest(probe, 40), VOCAB, 200, seed=3)
    starts = [int(np.flatnonzero(row == VOCAB.MARK)[0]) for row in batch.tokens]
    segments = np.stack([row[s + 1 : s + 1 + k] for row, s in zip(batch.tokens, starts)])
    assert all(len(set(seg)) == k for seg in segments)
    assert P.chance(probe, CFG) == pytest.approx(1 / np.prod(np.arange(10, 10 - k, -1)))
    long = P.ProbeConfig(n_symbols=3, segment_len=5, key_len=5, n_pairs=3, n_queries=1, n_keys=4)  # longer than the alphabet
    assert not P.distinct_symbols(probe, long) and P.chance(probe, long) == pytest.approx(3.0**-5)
    batch = P.generate(P.ProbeRequest(probe, 30), P.ProbeVocab(0, long), 50, seed=0)
    assert batch.tokens.shape == (50, 30)


def test_answers_only_targets_keep_answer_tokens_and_lm_rows():
    lm = np.arange(200, dtype=np.int64) % 20
    gen = training_mix.mixed_batches(
        lm, VOCAB, training_mix.TrainingMix(["passkey", "mqar"], 40, 16, 0.5, loss="answers"), seed=0
    )
    for _ in range(3):
        ids, targets = next(gen)
        assert ids.shape == (16, 41) and targets.shape == (16, 40)
        for row, target in zip(ids.numpy(), targets.numpy()):
            if row[0] != VOCAB.BOS:  # a language-model window: every target kept
                assert np.array_equal(target, row[1:])
                continue
            kept = np.flatnonzero(target != -100)
            spans = [(37, 41)] if row[36] == VOCAB.ASK else [(40 - 3 * j, 41 - 3 * j) for j in range(CFG.n_queries)]
            assert sorted(kept + 1) == sorted(i for s, e in spans for i in range(s, e))
            assert np.array_equal(target[kept], row[kept + 1])
    plain = next(training_mix.mixed_batches(lm, VOCAB, training_mix.TrainingMix(["passkey"], 40, 4, 0.5), seed=0))
    assert isinstance(plain, torch.Tensor) and plain.shape == (4, 41)


@pytest.mark.parametrize("probe", ["passkey", "mqar", "copy"])
def test_predictable_targets_drop_only_the_random_draws_outside_the_answers(probe):
    lm = np.arange(200, dtype=np.int64) % 20
    ids, targets = next(
        training_mix.mixed_batches(lm, VOCAB, training_mix.TrainingMix([probe], 40, 8, 1.0, loss="predictable"), seed=1)
    )
    batch = P.generate(P.ProbeRequest(probe, 41), VOCAB, 1, seed=0)  # the spans depend on the probe and length only
    answer = {i - 1 for s, e in batch.spans for i in range(s, e)}  # target positions of the answers
    for row, target in zip(ids.numpy(), targets.numpy()):
        nxt = row[1:]
        dropped = np.flatnonzero(target == -100)
        assert len(dropped) > 0 and not answer & set(dropped.tolist())
        assert VOCAB.is_draw(nxt[dropped]).all()  # only draws lose their loss ...
        kept = np.flatnonzero(target != -100)
        assert np.array_equal(target[kept], nxt[kept])
        drawn_outside = [j for j in range(len(nxt)) if VOCAB.is_draw(nxt[j : j + 1])[0] and j not in answer]
        assert sorted(dropped.tolist()) == drawn_outside  # ... and every draw outside the answers does
        assert all(target[j] == nxt[j] for j in answer)


def test_an_unknown_loss_is_one_line():
    with pytest.raises(ValueError, match="loss 'some' is not known; allowed: all, answers, predictable"):
        next(
            training_mix.mixed_batches(
                np.zeros(100, dtype=np.int64), VOCAB, training_mix.TrainingMix(["passkey"], 40, 2, 1.0, loss="some"), 0
            )
        )


def test_generator_bad_input_is_one_line():
    with pytest.raises(ValueError, match="too short; it needs at least 12 tokens"):
        P.generate(P.ProbeRequest("passkey", 11), VOCAB, 1, 0)
    with pytest.raises(ValueError, match="unknown probe 'nope'; allowed: passkey, mqar, copy, reverse"):
        P.generate(P.ProbeRequest("nope", 40), VOCAB, 1, 0)
    with pytest.raises(ValueError, match="depth must be in"):
        P.generate(P.ProbeRequest("copy", 40, depth=1.5), VOCAB, 1, 0)
    with pytest.raises(ValueError, match="n_queries <= n_pairs <= n_keys"):
        P.ProbeConfig(n_keys=4, n_pairs=6)


# --- the oracle and chance, through the same KV-cache decoding the task uses ------------------


class History:
    """A test double's KV cache: the token history (B, T), replaced by a new tensor per call, and
    ``fork`` as ``KVCache.fork``: the branch's tokens never reach the trunk."""

    def __init__(self, tokens=None):
        self.tokens = tokens

    def append(self, idx):
        self.tokens = idx if self.tokens is None else torch.cat([self.tokens, idx], 1)
        return self.tokens

    def fork(self):
        return History(self.tokens)


class OracleModel:
    """Test double: logits one-hot on the oracle's next token."""

    def new_cache(self):
        return History()

    def __call__(self, idx, cache):
        hist = cache.append(idx)
        logits = torch.zeros(idx.shape[0], idx.shape[1], VOCAB.vocab_size)
        for b in range(idx.shape[0]):
            logits[b, -1, P.oracle_next(VOCAB, hist[b].numpy())] = 1.0
        return logits


class GuessingModel:
    """Uniform logits over the answer symbols (ties broken at random): a chance-level guesser."""

    def __init__(self, seed):
        self.g = torch.Generator().manual_seed(seed)

    def new_cache(self):
        return History()

    def __call__(self, idx, cache):
        logits = torch.full((idx.shape[0], idx.shape[1], VOCAB.vocab_size), -1e9)
        sym = slice(VOCAB.first_symbol, VOCAB.first_symbol + CFG.n_symbols)
        logits[:, :, sym] = 1e-6 * torch.rand(idx.shape[0], idx.shape[1], CFG.n_symbols, generator=self.g)
        return logits


@pytest.mark.parametrize("probe", P.PROBES)
@pytest.mark.parametrize("length", [29, 64, 203])
def test_oracle_reaches_100_percent(probe, length):
    batch = P.generate(P.ProbeRequest(probe, length), VOCAB, 6, seed=length)
    ok = scoring.score(OracleModel(), batch, "cpu", batch_size=4)
    assert ok.shape == (6, len(batch.spans)) and ok.all()


def test_decoding_uses_its_own_predictions_and_true_context():
    # A model that echoes its input token: decoding a span feeds back its own guesses, so only
    # the first answer token can depend on the prompt; the trunk must still see true answers.
    class Echo(OracleModel):
        def __call__(self, idx, cache):
            cache.append(idx)
            return torch.nn.functional.one_hot(idx, VOCAB.vocab_size).float()

    batch = P.generate(P.ProbeRequest("mqar", 40), VOCAB, 3, seed=0)
    tokens = torch.from_numpy(batch.tokens)
    answers = scoring.greedy_answers(Echo(), tokens, batch.spans)
    for (s, _), a in zip(batch.spans, answers):
        assert torch.equal(a[:, 0], tokens[:, s - 1])  # the queried key, echoed
    batch = P.generate(P.ProbeRequest("copy", 40), VOCAB, 2, seed=0)
    (a,) = scoring.greedy_answers(Echo(), torch.from_numpy(batch.tokens), batch.spans)
    assert (a == VOCAB.COPY).all()  # echoes the question, then its own echo


@pytest.mark.parametrize("probe", P.PROBES)
@pytest.mark.parametrize("seed", [0, 1])
def test_teacher_forced_exact_match_equals_greedy_decoding(probe, seed):
    # The stop criterion scores with one forward; it must agree with the evaluation's greedy
    # decoding. An untrained model gets most answers wrong, so the batch is rewritten span by span
    # to the model's own greedy answers in half of the rows: both must then say right exactly there.
    torch.manual_seed(seed)
    model = build_model(
        model_config("tiny", "alibi", n_layers=2, d_model=32, n_heads=2, d_ff=64, vocab_size=VOCAB.vocab_size)
    ).eval()
    batch = P.generate(P.ProbeRequest(probe, 37), VOCAB, 6, seed=seed)
    assert np.array_equal(scoring.score(model, batch, "cpu", 4, scoring.forced_answers), scoring.score(model, batch, "cpu", 4))
    rows = np.arange(0, 6, 2)
    for k, (s, e) in enumerate(batch.spans):  # span k's greedy answer depends on spans < k only
        answers = scoring.greedy_answers(model, torch.from_numpy(batch.tokens), batch.spans)
        batch.tokens[rows, s:e] = answers[k][rows].numpy()
    want = np.zeros((6, len(batch.spans)), dtype=bool)
    want[rows] = True
    forced = scoring.score(model, batch, "cpu", 4, scoring.forced_answers)
    assert np.array_equal(scoring.score(model, batch, "cpu", 4)[rows], want[rows]) and forced[rows].all()
    assert np.array_equal(forced, scoring.score(model, batch, "cpu", 4))


@pytest.mark.parametrize("probe", ["mqar", "passkey"])
def test_uniform_guesser_scores_chance(probe):
    cfg = CFG if probe == "mqar" else P.ProbeConfig(n_symbols=10, key_len=1, n_pairs=6, n_queries=3, segment_len=5, filler_len=3)
    global VOCAB
    saved, VOCAB = VOCAB, P.ProbeVocab(20, cfg)
    try:
        batch = P.generate(P.ProbeRequest(probe, 40), VOCAB, 1200, seed=5)
        ok = scoring.score(GuessingModel(0), batch, "cpu", batch_size=400)
    finally:
        VOCAB = saved
    lo, hi = wilson_interval(int(ok.sum()), ok.size)
    assert P.chance(probe, cfg) == pytest.approx(0.1)
    assert lo < 0.1 < hi and hi - lo < 0.05


# --- statistics -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "k,n,lo,hi",
    [
        # Newcombe (1998), Statistics in Medicine 17:857, Table I, method 3 (score, no continuity correction)
        (81, 263, 0.2553, 0.3662),
        (15, 148, 0.0624, 0.1605),
        (0, 20, 0.0, 0.1611),
        (1, 29, 0.0061, 0.1718),
    ],
)
def test_wilson_interval_known_values(k, n, lo, hi):
    got = wilson_interval(k, n)
    assert got == pytest.approx((lo, hi), abs=6e-5)


def test_wilson_interval_edges():
    assert wilson_interval(0, 0) == (0.0, 1.0)
    for n in range(1, 300):  # the ends are exact, never rounding noise beyond p
        assert wilson_interval(0, n)[0] == 0.0 and wilson_interval(n, n)[1] == 1.0
        assert all(lo <= k / n <= hi for k in (0, n // 3, n) for lo, hi in [wilson_interval(k, n)])
    z2 = 1.959963984540054**2
    assert wilson_interval(29, 29) == pytest.approx((29 / (29 + z2), 1.0))  # all correct: low end n / (n + z^2)
    lo, hi = wilson_interval(50, 100)
    assert lo == pytest.approx(1 - hi) and hi - lo < 0.2  # symmetric at 50%, +-10% at n = 100
    with pytest.raises(ValueError, match="0 <= correct <= total"):
        wilson_interval(5, 4)


def test_effective_length():
    assert effective_length({64: 0.9, 128: 0.6, 256: 0.3, 512: 0.7}, 0.5) == 128  # must *stay* above
    assert effective_length({64: 0.4, 128: 0.9}, 0.5) == 0
    assert effective_length({64: 0.9, 128: None, 256: 0.9}, 0.5) == 64
    assert effective_length({64: 1.0, 128: 1.0}, 1.0) == 128


# --- charts and table -----------------------------------------------------------------------


def _row(method, probe, cells, L=8):
    return {
        "method": method,
        "task": "retrieval",
        "status": "ok",
        "params": {"L_train": L, "probe": probe},
        "metrics": {},
        "series": {"cells": cells},
    }


def _cell(Lv, depth, k, n):
    return {"L_valid": Lv, "depth": depth, "correct": k, "total": n, "status": "ok", "message": ""}


ROWS = [
    _row(
        "alibi",
        "passkey",
        [_cell(Lv, d, k, 10) for Lv, ks in ((8, (10, 9)), (16, (7, 3)), (32, (2, 0))) for d, k in zip((0.0, 1.0), ks)],
    ),
    _row("rotary", "passkey", [_cell(8, 0.0, 10, 10), _cell(8, 1.0, 10, 10), _cell(16, 0.0, 0, 10), _cell(16, 1.0, 1, 10)]),
    _row("alibi", "passkey", [_cell(8, 0.0, 5, 10)]),  # a second seed: pooled with the first
    _row("alibi", "mqar", [_cell(8, None, 30, 40), _cell(16, None, 12, 40)]),
    {**_row("nope", "mqar", []), "status": "error"},
]


def test_table_recomputes_intervals_and_effective_length():
    table = accuracy.accuracy_table(ROWS, threshold=0.5)
    t = {(r["method"], r["probe"], r["L_valid"]): r for r in table}
    assert (t["alibi", "passkey", 8]["correct"], t["alibi", "passkey", 8]["total"]) == (24, 30)
    assert t["alibi", "passkey", 8]["acc"] == pytest.approx(0.8)
    assert (t["alibi", "passkey", 8]["lo"], t["alibi", "passkey", 8]["hi"]) == wilson_interval(24, 30)
    assert t["alibi", "passkey", 8]["effective_length"] == 16 and t["rotary", "passkey", 8]["effective_length"] == 8
    assert t["alibi", "mqar", 16]["acc"] == pytest.approx(0.3) and t["alibi", "mqar", 16]["effective_length"] == 8
    assert not any(r["method"] == "nope" for r in table)  # failed rows are left out
    md = charts.markdown_table(_with_bar(ROWS, 0.7), "mqar")
    assert "| alibi | 8 | 75% [" in md and "| 8 |\n\n1 of 1 learnt the task at L_train (accuracy >= 70%)" in md


def _with_bar(rows, bar):
    return [{**r, "series": {**r["series"], "learned_threshold": bar}} for r in rows]


def test_the_probe_table_says_how_many_steps_each_model_trained_and_whether_it_stopped():
    rows = [
        {**r, "metrics": m}
        for r, m in zip(
            ROWS[:2], ({"train_steps": 1700, "stopped_at_step": 1700}, {"train_steps": 3000, "stopped_at_step": None})
        )
    ]
    t = charts.probe_table(rows, "passkey")
    assert t.columns[-1] == "steps" and "'stopped' where training stopped on reaching stop_at_acc" in t.caption
    assert t.cell("alibi", "steps").text == "1700 (stopped)" and t.cell("rotary", "steps").text == "3000"
    assert charts.probe_table(ROWS, "passkey").cell("alibi", "steps").text == "-"  # rows that do not say
    assert charts.steps_text({"train_steps": True}) == charts.steps_text("junk") == "-"


def test_a_method_that_did_not_learn_has_no_effective_length_in_tables_and_charts():
    # The rows' learned_threshold (default 0.9): alibi's passkey at L_train pools 24/30 = 80% and
    # did not learn; rotary's 20/20 did. One of two learnt: nothing to compare, a broken profile.
    table = accuracy.accuracy_table(ROWS)
    verdicts = {(t["method"], t["probe"]): t["learned"] for t in table}
    assert verdicts == {("alibi", "passkey"): False, ("rotary", "passkey"): True, ("alibi", "mqar"): False}
    assert accuracy.learned_threshold(ROWS) == 0.9 and accuracy.learned_threshold(_with_bar(ROWS, 0.75)) == 0.75
    md = charts.markdown_table(ROWS, "passkey")
    assert "| alibi | 8 | 80% [" in md and "| not learnt at L_train |" in md and "| rotary | 8 | 100% [" in md
    assert "BROKEN PROFILE: 1 of 2 learnt the task at L_train (accuracy >= 90%)" in md
    t = charts.probe_table(ROWS, "passkey")
    assert t.cell("alibi", "effective length").text == "not learnt at L_train"
    assert t.cell("alibi", "effective length").value is None and t.cell("rotary", "effective length").value == 8.0
    assert t.title.endswith("BROKEN PROFILE: 1 of 2 learnt the task at L_train")
    assert (
        "1 of 2 learnt the task at L_train (accuracy >= 90%) and are compared beyond it; not learnt at L_train: "
        "alibi." in t.caption
    )
    ok = charts.probe_table(_with_bar(ROWS, 0.8), "passkey")  # at a bar of 80% both learnt: comparable
    assert "BROKEN" not in ok.title and ok.cell("alibi", "effective length").text == "16"
    assert "2 of 2 learnt" in ok.caption
    chart = charts.accuracy_chart(ROWS, "passkey")
    lines = {ln.get_gid(): ln for ln in chart.axes[0].lines}
    assert lines["method:alibi"].get_label() == "alibi (not learnt at L_train)"
    assert lines["method:alibi"].get_linestyle() == ":" and lines["method:rotary"].get_label() == "rotary"
    assert charts.heatmap_chart(ROWS, "alibi").axes[0].get_title().endswith(", not learnt at L_train")
    assert not charts.heatmap_chart(ROWS, "rotary").axes[0].get_title().endswith("not learnt at L_train")


def test_summarize_records_learned_and_hides_the_length_of_an_unlearnt_task():
    cells = [_cell(8, None, 9, 10), _cell(16, None, 6, 10), _cell(32, None, 1, 10)]
    m = R.summarize(cells, 8, threshold=0.5, learned_threshold=0.9)
    assert m["learned"] == 1 and m["effective_length"] == 16 and m["acc_at_train_len"] == 0.9
    m = R.summarize(cells, 8, threshold=0.5, learned_threshold=0.95)
    assert m["learned"] == 0 and m["effective_length"] is None and m["acc@16"] == 0.6
    oom = [{**_cell(8, None, 0, 0), "status": "oom"}, _cell(16, None, 6, 10)]
    m = R.summarize(oom, 8, threshold=0.5, learned_threshold=0.9)
    assert m["learned"] is None and m["effective_length"] is None


def test_heatmap_values_equal_the_table():
    depths, lengths, acc = accuracy.heatmap_table(ROWS, "alibi")
    assert depths == [0.0, 1.0] and lengths == [8, 16, 32]
    fig = charts.heatmap_chart(ROWS, "alibi")
    shown = np.asarray(fig.axes[0].images[0].get_array())
    assert np.allclose(shown, acc)
    # ... and the heatmap's cells pooled over depth are the table's accuracies
    table = {r["L_valid"]: r for r in accuracy.accuracy_table(ROWS) if r["method"] == "alibi" and r["probe"] == "passkey"}
    # (depth 0 at L=8 pooled two rows: 20 samples against 10 at depth 1, so weight by samples)
    weights = {8: [20, 10], 16: [10, 10], 32: [10, 10]}
    for j, Lv in enumerate(lengths):
        assert np.average(shown[:, j], weights=weights[Lv]) == pytest.approx(table[Lv]["acc"])
    assert shown[0, 0] == pytest.approx(15 / 20) and shown[1, 2] == 0.0
    with pytest.raises(ValueError, match="no passkey results for method 'nope'"):
        charts.heatmap_chart(ROWS, "nope")


def test_accuracy_chart_log_x_dashed_L_train_and_table_values(tmp_path):
    fig = charts.accuracy_chart(ROWS, "passkey")
    ax = fig.axes[0]
    assert ax.get_xscale() == "log"
    (vline,) = [ln for ln in ax.lines if ln.get_gid() == "L_train"]
    assert vline.get_linestyle() == "--" and list(vline.get_xdata()) == [8, 8]
    table = {(r["method"], r["L_valid"]): r["acc"] for r in accuracy.accuracy_table(ROWS) if r["probe"] == "passkey"}
    for ln in ax.lines:
        if (gid := ln.get_gid() or "").startswith("method:"):
            m = gid.split(":", 1)[1]
            assert [table[m, int(x)] for x in ln.get_xdata()] == pytest.approx(list(ln.get_ydata()))
    paths = charts.write_charts(ROWS, tmp_path)
    assert {p.name for p in paths} == {
        "retrieval_passkey_accuracy.png",
        "retrieval_mqar_accuracy.png",
        "retrieval_passkey_heatmap_alibi.png",
        "retrieval_passkey_heatmap_rotary.png",
    }
    assert all(p.stat().st_size > 1000 for p in paths)


# --- task and suite -------------------------------------------------------------------------

TINY = RETRIEVAL_TINY


def test_mixed_batches_mix_probes_and_text():
    lm = np.arange(1000) % 16
    it = training_mix.mixed_batches(lm, P.ProbeVocab(16, CFG), training_mix.TrainingMix(["passkey", "copy"], 40, 64, 0.5), seed=0)
    b = next(it)
    assert b.shape == (64, 41)
    probe_rows = (b >= 16).any(dim=1)
    assert 16 < int(probe_rows.sum()) < 48  # about half
    assert torch.equal(
        b,
        next(
            training_mix.mixed_batches(
                lm, P.ProbeVocab(16, CFG), training_mix.TrainingMix(["passkey", "copy"], 40, 64, 0.5), seed=0
            )
        ),
    )
    all_text = next(training_mix.mixed_batches(lm, P.ProbeVocab(16, CFG), training_mix.TrainingMix(["mqar"], 40, 8, 0.0), seed=0))
    assert (all_text < 16).all()


def test_task_runs_shares_the_checkpoint_and_counts(tmp_path):
    task, case = make_case("retrieval", "alibi", {"L_train": 16, "probe": "passkey"}, TINY, tmp_path)
    out = task.run(case)
    cells = out["series"]["cells"]
    assert [(c["L_valid"], c["depth"]) for c in cells] == [(Lv, d) for Lv in (16, 32) for d in (0.0, 0.5, 1.0)]
    assert all(c["total"] == 2 and 0 <= c["correct"] <= 2 for c in cells)  # ceil(6 / 3) per depth
    m = out["metrics"]
    k = sum(c["correct"] for c in cells if c["L_valid"] == 32)
    assert m["acc@32"] == m["acc_at_max_len"] == k / 6
    assert (m["acc_lo@32"], m["acc_hi@32"]) == wilson_interval(k, 6)
    assert m["chance"] == 1 / (8 * 7 * 6) and m["reused_checkpoint"] == 0 and m["train_steps"] == 3
    assert m["learned"] == int(m["acc@16"] >= 0.9) and out["series"]["learned_threshold"] == 0.9
    assert (tmp_path / "checkpoints" / "retrieval__alibi__L_train=16.pt").exists()
    task, case = make_case("retrieval", "alibi", {"L_train": 16, "probe": "mqar"}, TINY, tmp_path)
    out = task.run(case)  # the same model, loaded: trained once per method
    assert out["metrics"]["reused_checkpoint"] == 1
    assert sum(c["total"] for c in out["series"]["cells"] if c["L_valid"] == 16) == 6  # 3 examples x 2 queries
    assert sum(d["total"] for d in out["series"]["by_distance"]) == 12


def test_train_to_criterion_stops_at_the_check_that_reaches_stop_at_acc(tmp_path):
    base = {**TINY, "model_per_probe": True, "steps": 9, "check_every": 3, "check_samples": 5}
    seen = []

    class Tracker:
        def scalars(self, values, step):
            if "check/acc" in values:
                seen.append((step, values["check/acc"]))

    # stop_at_acc 0: the first check (after 3 steps) stops training.
    task, case = make_case("retrieval", "alibi", {"L_train": 16, "probe": "copy"}, {**base, "stop_at_acc": 0.0}, tmp_path / "a")
    model, m = training_mix.train_probe_model(
        case, P.ProbeVocab(16, case.settings.probe_config()), np.arange(2000) % 16, None, ["copy"], Tracker()
    )
    assert (m["train_steps"], m["stopped_at_step"], m["train_tokens"]) == (3, 3, 3 * 4 * 16)
    assert [s for s, _ in seen] == [2] and m["check_acc"] == seen[0][1]
    # stop_at_acc 1 on a model that cannot reach it: the whole budget; the check at the last
    # step is not asked (training ends there anyway).
    seen.clear()
    task, case = make_case("retrieval", "alibi", {"L_train": 16, "probe": "copy"}, {**base, "stop_at_acc": 1.0}, tmp_path / "b")
    out = task.run(case)
    m = out["metrics"]
    assert m["train_steps"] == 9 and m["stopped_at_step"] is None and 0.0 <= m["check_acc"] < 1.0
    # reloaded from its checkpoint, the row still says whether training stopped early
    task, case = make_case("retrieval", "alibi", {"L_train": 16, "probe": "copy"}, {**base, "stop_at_acc": 0.0}, tmp_path / "a")
    first = task.run(case)["metrics"]
    again = task.run(case)["metrics"]
    assert first["stopped_at_step"] == 3 and again["reused_checkpoint"] == 1 and again["stopped_at_step"] == 3
    assert first["check_acc"] is not None and again["check_acc"] is None  # not saved in the checkpoint
    # without stop_at_acc nothing is checked
    task, case = make_case("retrieval", "alibi", {"L_train": 16, "probe": "copy"}, base, tmp_path / "c")
    m = task.run(case)["metrics"]
    assert m["train_steps"] == 9 and m["stopped_at_step"] is None and m["check_acc"] is None


def test_settings_errors_are_one_line(tmp_path):
    with pytest.raises(ValueError, match="exactly one training budget"):
        make_case("retrieval", "alibi", {"L_train": 16, "probe": "copy"}, {**TINY, "tokens": 100}, tmp_path)
    with pytest.raises(ValueError, match="n_queries <= n_pairs"):
        make_case("retrieval", "alibi", {"L_train": 16, "probe": "copy"}, {**TINY, "n_queries": 9}, tmp_path)
    with pytest.raises(ValueError, match="probe"):
        make_case("retrieval", "alibi", {"L_train": 16, "probe": "needle"}, TINY, tmp_path)
    task, case = make_case("retrieval", "alibi", {"L_train": 4, "probe": "copy"}, TINY, tmp_path)
    with pytest.raises(ValueError, match="L_valid 4 is too short for probe copy"):
        task.run(case)


def test_suite_validates_with_both_profiles():
    loaded = suitemod.load("retrieval")
    for profile in ("default", "cpu", "gpu"):
        assert suitemod.resolve(loaded, profile).task_name == "retrieval"
    assert list(suitemod.resolve(loaded, "gpu").grid["probe"]) == list(P.PROBES)
    # The cpu profile: passkey, mqar and copy, each trained by its own model (the four-probe mix
    # taught the tiny model nothing in 4000 steps).
    cpu = suitemod.resolve(loaded, "cpu")
    assert cpu.grid["probe"] == ["passkey", "mqar", "copy"] and cpu.settings.model_per_probe
    assert cpu.settings.mix == 1.0 and cpu.settings.loss == "predictable" and cpu.settings.learned_threshold == 0.9
    # train to criterion, with a bar above learned_threshold so a stopped model passes it at evaluation
    assert cpu.settings.stop_at_acc == 0.98 > cpu.settings.learned_threshold and cpu.settings.steps == 3000
    gpu = suitemod.resolve(loaded, "gpu")
    assert gpu.grid["L_train"] == [512, 1024] and max(gpu.settings.L_valid_factors) * 1024 == 16384
    assert cpu.grid["L_train"] == [64] and max(cpu.settings.L_valid_factors) * 64 == 512
    # the first five, then issue 58's methods whose papers claim retrieval or length generalisation
    assert set(cpu.methods) == {"sinusoidal", "rotary", "t5_bias", "alibi", "nope", "fope", "pope", "stickbreaking", "path_fox"}
    # +-10%: a 50% accuracy over eval_samples outcomes has a Wilson interval at most 20 points wide
    lo, hi = wilson_interval(cpu.settings.eval_samples // 2, cpu.settings.eval_samples)
    assert hi - lo <= 0.2


def test_model_per_probe_trains_each_probe_case_its_own_model(tmp_path):
    settings = {**TINY, "model_per_probe": True, "loss": "answers", "mix": 1.0}
    for probe in ("passkey", "copy"):
        task, case = make_case("retrieval", "alibi", {"L_train": 16, "probe": probe}, settings, tmp_path)
        assert R.training_probes(case, case.settings) == [probe]
        out = task.run(case)
        assert out["metrics"]["reused_checkpoint"] == 0  # not the other probe's model
        assert (tmp_path / "checkpoints" / f"retrieval__alibi__L_train=16__{probe}.pt").exists()
    task, case = make_case("retrieval", "alibi", {"L_train": 16, "probe": "copy"}, TINY, tmp_path)
    assert R.training_probes(case, case.settings) == list(P.PROBES)


@pytest.mark.subprocess
def test_two_method_tiny_run_through_the_cli(tmp_path, capsys):
    from posbench.cli import app as cli
    from posbench.cli.run_output import EXIT_CASES_FAILED
    from posbench.store.run_rows import read_rows

    sets = [
        "model_overrides={n_layers: 1, d_model: 32, n_heads: 2, d_ff: 64}",
        "steps=3",
        "warmup_steps=1",
        "batch_size=4",
        "eval_samples=4",
        "eval_batch_size=4",
        "L_valid_factors=[1, 2]",
        "corpus={kind: synthetic, size: 20000}",
        "grid.L_train=[32]",
        "grid.probe=[passkey]",
        "threads=1",
    ]
    argv = [
        "--suite",
        "retrieval",
        "--profile",
        "cpu",
        "--device",
        "cpu",
        "--methods",
        "alibi,nope",
        "--results",
        str(tmp_path),
    ]  # not --quiet: that prints the summary line alone
    # three steps learn nothing: the rows and tables are written, and the run says BROKEN PROFILE (exit 3)
    assert cli.main(argv + [a for s in sets for a in ("--set", s)]) == EXIT_CASES_FAILED
    out = capsys.readouterr().out
    assert "effective_length" in out and "BROKEN PROFILE" in out
    (run_dir,) = (tmp_path / "retrieval").iterdir()
    rows = read_rows(run_dir / "cases.jsonl")
    assert sorted(r["method"] for r in rows) == ["alibi", "nope"] and {r["status"] for r in rows} == {"ok"}
    # table.md: accuracy per L_valid with its Wilson interval, the learn-first verdict under it
    md = (run_dir / "table.md").read_text()
    assert "**passkey: accuracy (Wilson 95% interval)" in md and "| method \\ L_valid | 32 | 64 | effective length |" in md
    table = {(t["method"], t["L_valid"]): t for t in accuracy.accuracy_table(rows)}
    for method in ("alibi", "nope"):
        t = table[method, 64]
        assert f"{100 * t['acc']:.0f}% [{100 * t['lo']:.0f}, {100 * t['hi']:.0f}]" in md
    assert "learnt the task at L_train (accuracy >= 90%)" in md
    assert "Accuracy at L_train (fraction)" not in md  # no one-cell summary tables
    assert {r["L_valid"] for r in accuracy.accuracy_table(rows)} == {32, 64}
    assert len(charts.write_charts(rows, tmp_path / "charts")) == 3  # accuracy chart + 2 heatmaps


def test_report_has_retrieval_tables_with_intervals_and_charts(tmp_path):
    """`bench.py report` on a retrieval run: the generic metric tables, then per probe the
    methods x L_valid accuracy with Wilson intervals (pooled counts), and the charts."""
    from posbench.report.build import build_report
    from tests.helpers.report_rows import base_row, write_run

    rows = []
    for method, cells in (
        ("alibi", [_cell(8, 0.0, 10, 10), _cell(16, 0.0, 3, 10)]),
        ("sinusoidal", [_cell(8, 0.0, 9, 10), _cell(16, 0.0, 0, 10)]),
    ):
        row = base_row("retrieval", "retrieval", method, {"L_train": 8, "probe": "passkey"}, "run-r")
        row["metrics"] = R.summarize(cells, 8, 0.5)
        row["series"] = {"cells": cells}
        rows.append(row)
    written = build_report([write_run(tmp_path / "runs", rows)], tmp_path / "report", find_task=find_task)
    md = (tmp_path / "report" / "report.md").read_text()
    assert "## Retrieval accuracy (Wilson 95% intervals)" in md and "### passkey" in md
    lo, hi = wilson_interval(3, 10)
    assert f"30% [{100 * lo:.0f}, {100 * hi:.0f}]" in md  # alibi at L_valid 16: 3 of 10
    assert "charts/retrieval_passkey_accuracy.png" in md and "charts/retrieval_passkey_heatmap_alibi.png" in md
    assert {"charts/retrieval_passkey_accuracy.png", "charts/retrieval_passkey_heatmap_sinusoidal.png"} <= set(written)


def test_evaluation_examples_are_shaped_as_training_rows(monkeypatch):
    # Training rows hold L_train + 1 tokens (inputs and shifted targets); an evaluation at L_valid
    # must use L_valid + 1, or every answer sits one position earlier than training put it (an
    # absolute method then scores 0% at L_train on a model that retrieves perfectly).
    seen = []
    monkeypatch.setattr(
        scoring,
        "score",
        lambda model, batch, device, bs: (
            seen.append(batch.tokens.shape) or np.ones((len(batch.tokens), len(batch.spans)), dtype=bool)
        ),
    )
    s = types.SimpleNamespace(seed=0, depths=[0.0, 1.0], eval_samples=4, eval_batch_size=4)
    train_row = next(
        training_mix.mixed_batches(np.zeros(200, dtype=np.int64), VOCAB, training_mix.TrainingMix(["passkey"], 40, 2, 1.0), 0)
    )
    cells, _ = scoring.eval_length(None, "passkey", VOCAB, 40, s, "cpu")
    assert train_row.shape == (2, 41) and seen == [(2, 41), (2, 41)]
    assert [c["L_valid"] for c in cells] == [40, 40] and all(c["correct"] == c["total"] == 2 for c in cells)
