"""The synthetic-copy source: closed form vs counting, the bound per window position, the corpus, a suite run."""

import json
import math
from collections import Counter

import numpy as np
import pytest
import torch

from posbench.cli import app as cli
from posbench.cli.run_output import EXIT_CASES_FAILED
from posbench.data import synthetic_copy as sc
from posbench.data.corpus import DataError, load_corpus
from posbench.engine.evaluate import evaluate, evaluate_source
from posbench.tasks import find as find_task

SMALL = dict(vocab=3, branching=2, jump=0.2, copy_prob=0.4, max_distance=3, decay=0.6)


@pytest.fixture(autouse=True)
def cache_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("POSBENCH_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache"


def closed_form(source, prefix: tuple, v: int) -> float:
    """p(x_t = v | prefix) from token_loss on the stream prefix + (v,)."""
    return math.exp(-source.token_loss(np.array(prefix + (v,)))[-1])


def row_counts(rows: np.ndarray, vocab: int) -> dict[tuple, int]:
    """{row as a tuple of ints: how often it occurs} of (S, t) rows of tokens below ``vocab``,
    each row one number in base ``vocab`` (a Counter over 200,000 rows made into lists took seconds)."""
    shape = (vocab,) * rows.shape[1]
    counts = np.bincount(np.ravel_multi_index(tuple(rows.T), shape))  # (vocab ** t,)
    found = np.flatnonzero(counts)
    return dict(zip(zip(*(d.tolist() for d in np.unravel_index(found, shape))), counts[found].tolist()))


@pytest.mark.slow  # 2 x 200,000 sampled streams
@pytest.mark.parametrize("seed", [0, 1])
def test_closed_form_equals_brute_force_counts(seed):
    # Short streams, so t < D (the renormalised copy distribution) is most of what is checked;
    # decay < 1 makes the renormalisation matter.
    source = sc.make_source(seed=seed, **SMALL)
    x = source.sample(200_000, 6, seed=10 + seed)  # (S, 6)
    assert row_counts(x[:50, :3], source.vocab) == Counter(map(tuple, x[:50, :3].tolist()))  # as counted one by one
    checked = 0
    for t in range(1, 6):
        counts = row_counts(x[:, : t + 1], source.vocab)
        contexts = row_counts(x[:, :t], source.vocab)
        for prefix, n in contexts.items():
            if n < 1000:
                continue
            for v in range(source.vocab):
                p = closed_form(source, prefix, v)
                p_hat = counts.get(prefix + (v,), 0) / n
                # Five standard errors: with ~500 comparisons a correct closed form fails ~never,
                # while a wrong renormalisation at t < D is off by several percent.
                assert abs(p_hat - p) < 5 * math.sqrt(p * (1 - p) / n) + 1e-9, (prefix, v, p, p_hat)
                checked += 1
    assert checked > 150


def test_closed_form_is_a_distribution_and_mixes_chain_and_copies():
    source = sc.make_source(seed=2, vocab=8, branching=2, jump=0.1, copy_prob=0.3, max_distance=5, decay=1.0)
    rng = np.random.default_rng(0)
    P = source.chain.probs()
    for length in (1, 3, 5, 11):  # fewer and more past tokens than D
        prefix = tuple(int(i) for i in rng.integers(0, 8, size=length))
        probs = [closed_form(source, prefix, v) for v in range(8)]
        assert sum(probs) == pytest.approx(1.0, abs=1e-12)
        m = min(5, length)
        for v in range(8):
            copies = sum(prefix[-d] == v for d in range(1, m + 1)) / m  # uniform w over 1..min(D, t)
            assert probs[v] == pytest.approx(0.7 * P[prefix[-1], v] + 0.3 * copies, abs=1e-12)


def test_stream_starts_at_the_stationary_distribution_and_stays_there():
    source = sc.make_source(seed=0, **SMALL)
    x = source.sample(100_000, 5, seed=3)
    pi = source.chain.stationary()
    for t in (0, 4):
        freq = np.bincount(x[:, t], minlength=3) / len(x)
        assert np.allclose(freq, pi, atol=0.01)


def test_generator_is_deterministic_from_its_seed():
    source = sc.make_source(seed=0, **SMALL)
    assert np.array_equal(source.sample(4, 50, seed=7), source.sample(4, 50, seed=7))
    assert not np.array_equal(source.sample(4, 50, seed=7), source.sample(4, 50, seed=8))
    a = load_corpus("synthetic-copy", seed=3, size=20_000)
    b = load_corpus("synthetic-copy", seed=3, size=20_000)
    c = load_corpus("synthetic-copy", seed=4, size=20_000)
    for split in ("train", "valid", "test"):
        assert np.array_equal(a.split(split), b.split(split))
        assert not np.array_equal(a.split(split), c.split(split))
    assert a.best_ppl == b.best_ppl != c.best_ppl
    assert a.kind == "synthetic-copy" and a.vocab_size == sc.DEFAULTS["vocab"]


def test_corpus_bound_is_the_source_on_the_split_stream_and_near_the_long_run_bound():
    corpus = load_corpus("synthetic-copy", seed=0, size=50_000)
    source = sc.make_source(seed=0, **sc.DEFAULTS)
    valid = corpus.split("valid")
    loss = corpus.oracle_token_loss(valid[:1000])
    assert np.isnan(loss[0]) and np.array_equal(loss[1:], source.token_loss(valid[:1000])[1:])
    assert corpus.oracle_ppl(valid) == pytest.approx(corpus.best_ppl, rel=0.03)
    # Copies make it far harder than the chain alone, and far easier than uniform.
    assert math.exp(source.chain.entropy_rate()) < corpus.best_ppl < corpus.vocab_size / 2


def test_corpora_without_a_known_source_have_no_bound(tmp_path):
    (tmp_path / "t.txt").write_text("some text " * 100)
    text = load_corpus("text", path=tmp_path / "t.txt", level="byte")
    assert text.oracle_token_loss(text.split("valid")) is None and text.oracle_ppl(text.split("valid")) is None


class Uniform(torch.nn.Module):
    def __init__(self, vocab):
        super().__init__()
        self.vocab = vocab

    def forward(self, idx, pos=None):
        return torch.zeros(*idx.shape, self.vocab)


class KnowsTheChain(torch.nn.Module):
    """Logits log P(. | x_{t-1}): a model whose loss on each token is computable outside it."""

    def __init__(self, P):
        super().__init__()
        self.logp = torch.log(torch.as_tensor(P))

    def forward(self, idx, pos=None):
        return self.logp[idx]


def test_uniform_logits_score_the_vocabulary_size():
    corpus = load_corpus("synthetic-copy", seed=0, size=20_000)
    V = corpus.vocab_size
    tokens = corpus.split("valid")[:1001]
    for mode, stride in (("nonoverlapping", None), ("sliding", 7)):
        r = evaluate(Uniform(V), tokens, 64, mode=mode, stride=stride)
        assert r.ppl == pytest.approx(V, rel=1e-6) and r.n_tokens_scored == 1000
        b = evaluate_source(np.full(1001, math.log(V)), 64, mode=mode, stride=stride)
        assert b.ppl == pytest.approx(V, rel=1e-12) and np.allclose(b.per_position_loss, math.log(V))
        assert np.array_equal(b.per_position_count, r.per_position_count)


@pytest.mark.parametrize(
    "mode,stride,L",
    [("nonoverlapping", None, 16), ("nonoverlapping", None, 37), ("sliding", 5, 16), ("sliding", 1, 9), ("sliding", 13, 13)],
)
def test_bound_lands_each_token_at_the_window_position_evaluate_scores_it(mode, stride, L):
    source = sc.make_source(seed=1, **sc.DEFAULTS)
    tokens = source.sample(1, 503, seed=2)[0]  # odd length: a right-aligned last window
    model = KnowsTheChain(source.chain.probs())
    r = evaluate(model, tokens, L, mode=mode, stride=stride, batch_size=3)
    chain_loss = np.full(len(tokens), np.nan)
    chain_loss[1:] = -np.log(source.chain.probs()[tokens[:-1], tokens[1:]])
    b = evaluate_source(chain_loss, L, mode=mode, stride=stride)
    assert np.allclose(b.per_position_loss, r.per_position_loss, rtol=1e-6, equal_nan=True)
    assert np.array_equal(b.per_position_count, r.per_position_count)
    assert b.ppl == pytest.approx(r.ppl, rel=1e-6) and b.n_windows == r.n_windows
    # The true source's own bound: every target once, so the same total at every L and mode.
    exact = source.token_loss(tokens)
    assert evaluate_source(exact, L, mode=mode, stride=stride).loss == pytest.approx(np.nanmean(exact))


def test_bound_skips_tokens_the_source_does_not_score():
    loss = np.array([np.nan, np.nan, 1.0, 2.0, 3.0, 4.0, 5.0])  # an order-2 chain scores t >= 2
    b = evaluate_source(loss, 3, max_tokens=7)
    assert list(b.per_position_count) == [1, 2, 2] and b.n_tokens_scored == 5
    assert b.loss == pytest.approx(3.0)


def test_bad_options_are_one_line():
    with pytest.raises(DataError, match=r"^synthetic-copy: need 0 <= copy_prob < 1.*got copy_prob=1.5"):
        load_corpus("synthetic-copy", size=1000, copy_prob=1.5)
    with pytest.raises(DataError, match=r"^synthetic-copy: unknown options \['order'\]; known: "):
        load_corpus("synthetic-copy", size=1000, order=2)


def test_distance_beyond_the_training_length_is_allowed():
    corpus = load_corpus("synthetic-copy", size=20_000, max_distance=200, decay=1.0)
    source = sc.make_source(seed=0, **{**sc.DEFAULTS, "max_distance": 200})
    assert source.max_distance == 200 and corpus.best_ppl > 1
    x = source.sample(1, 2000, seed=0)[0]
    # Far copies exist: without the tokens 65..200 back the sample is harder to predict.
    near = sc.CopySource(source.chain, source.copy_prob, sc.distance_weights(64, 1.0))
    assert near.log_loss(x) > source.log_loss(x)


@pytest.mark.subprocess
def test_tiny_suite_run_uses_it_and_reports_the_bound(tmp_path, capsys):
    results = tmp_path / "results"
    corpus = "{kind: synthetic-copy, size: 20000, synthetic: {vocab: 16, copy_prob: 0.5, max_distance: 6}}"
    args = [
        "--suite",
        "extrapolation",
        "--profile",
        "cpu",
        "--device",
        "cpu",
        "--results",
        str(results),
        "--methods",
        "alibi",
        "--set",
        f"corpus={corpus}",
        "--set",
        "steps=2",
        "--set",
        "warmup_steps=1",
        "--set",
        "batch_size=2",
        "--set",
        "grid.L_train=[8]",
        "--set",
        "L_valid_factors=[1, 2]",
        "--set",
        "stride=4",
        "--set",
        "eval_tokens=301",
        "--set",
        "model_overrides={n_layers: 1, d_model: 32, n_heads: 2, d_ff: 64}",
    ]
    # two steps learn nothing: the rows and tables are written, and the run says BROKEN PROFILE (exit 3)
    assert cli.main(args) == EXIT_CASES_FAILED
    (rows_file,) = results.glob("extrapolation/*/cases.jsonl")
    (row,) = [json.loads(line) for line in rows_file.read_text().splitlines()]
    assert row["status"] == "ok"
    assert row["series"]["corpus"]["kind"] == "synthetic-copy"
    source = sc.make_source(seed=0, **{**sc.DEFAULTS, "vocab": 16, "copy_prob": 0.5, "max_distance": 6})
    valid = load_corpus("synthetic-copy", size=20_000, vocab=16, copy_prob=0.5, max_distance=6).split("valid")
    exact = math.exp(source.log_loss(valid[:301]))
    assert row["metrics"]["best_ppl_eval"] == pytest.approx(exact)
    cells = row["series"]["evals"]
    assert len(cells) == 4 and all(c["best_ppl_eval"] == pytest.approx(exact) for c in cells)
    curves = row["series"]["best_per_position_loss"]
    assert set(curves) == {"nonoverlapping@8", "nonoverlapping@16", "sliding@8", "sliding@16"}
    assert len(curves["sliding@16"]) == 16 and all(v is not None for v in curves["nonoverlapping@16"])
    # The run prints the paper's layout (methods x L_valid, per evaluation mode) with the exact
    # bound as the last row of each table, beside every cell.
    out = capsys.readouterr().out
    bound_lines = [line for line in out.splitlines() if line.startswith("bound (true source)")]
    assert len(bound_lines) == 2  # nonoverlapping and sliding
    assert all(line.split()[-2:] == [f"{exact:.2f}"] * 2 for line in bound_lines)
    from posbench.report.rows import load_runs
    from posbench.tasks.extrapolation.ppl_charts import ppl_chart
    from posbench.tasks.extrapolation.ppl_tables import BOUND_ROW, extrapolation_tables

    table = extrapolation_tables(load_runs(rows_file.parent, find_task=find_task))[0]
    assert table.rows == ["alibi", BOUND_ROW] and table.cell(BOUND_ROW, 16).value == pytest.approx(exact)
    fig = ppl_chart(table)
    gids = {line.get_gid() for line in fig.axes[0].lines}
    assert f"method:{BOUND_ROW}" in gids and "best_ppl" not in gids  # the bound of these tokens, not the long run


def test_precision_perplexity_study_reports_the_bound(tmp_path):
    from tests.helpers.cases import TINY, make_case

    settings = {
        **TINY,
        "interpolate": False,
        "modes": ["nonoverlapping"],
        "corpus": {"kind": "synthetic-copy", "size": 20000, "synthetic": {"vocab": 16, "max_distance": 6}},
    }
    task, case = make_case("precision", "alibi", {"study": "bias_dtype_ppl", "L_train": 8}, settings, tmp_path)
    out = task.run(case)
    bound = out["metrics"]["best_ppl_eval"]
    assert 1 < bound < 16
    assert len(out["series"]["evals"]) == 4 and all(c["best_ppl_eval"] == pytest.approx(bound) for c in out["series"]["evals"])


@pytest.mark.slow  # trains two seeds
def test_seed_averaged_rows_keep_the_bound(tmp_path):
    from tests.helpers.cases import TINY, make_case

    settings = {
        **TINY,
        "interpolate": False,
        "seeds": [0, 1],
        "L_valid_factors": [1, 2],
        "corpus": {"kind": "synthetic-copy", "size": 20000, "synthetic": {"vocab": 16, "max_distance": 6}},
    }
    task, case = make_case("extrapolation", "rotary", {"L_train": 8}, settings, tmp_path)
    out = task.run(case)
    assert out["metrics"]["n_seeds"] == 2 and out["metrics"]["best_ppl_eval_std"] == 0.0
    assert all(c["best_ppl_eval"] == pytest.approx(out["metrics"]["best_ppl_eval"]) for c in out["series"]["evals"])
    assert set(out["series"]["best_per_position_loss"]) == {"nonoverlapping@8", "nonoverlapping@16", "sliding@8", "sliding@16"}
