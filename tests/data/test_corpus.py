"""Corpora, training batches, the WikiText-103 download and perplexity evaluation."""

from __future__ import annotations

import hashlib
import math
import socket
from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn

from posbench.data import markov
from posbench.data.corpus import DataError, batches, build_vocab, load_corpus
from posbench.data.download import download_wikitext103
from posbench.engine.evaluate import evaluate, positions, window_plan
from tests.helpers.archives import wikitext_zip_bytes


@pytest.fixture(autouse=True)
def cache_dir(tmp_path, monkeypatch):
    """Every test gets its own cache and no data folder unless it asks for one."""
    monkeypatch.setenv("POSBENCH_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache"


@pytest.fixture(autouse=True)
def one_thread():
    """These tensors are tiny: a second intra-op thread only adds wake-up latency (tens of ms per
    op on a busy 2-core box)."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


WIKI_TRAIN = " = Title = \n\n the cat sat on the mat . \n the dog sat . \n"
WIKI_VALID = " the cat ran . \n\n a bird sat . \n"


def make_wikitext(folder: Path, names=("wiki.train.tokens", "wiki.valid.tokens")) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for name, text in zip(names, (WIKI_TRAIN, WIKI_VALID)):
        (folder / name).write_text(text, encoding="utf-8")
    return folder


# ---------------------------------------------------------------- synthetic corpus


def test_synthetic_is_deterministic_and_knows_its_best_ppl():
    a = load_corpus("synthetic", seed=3, size=20_000)
    b = load_corpus("synthetic", seed=3, size=20_000)
    c = load_corpus("synthetic", seed=4, size=20_000)
    assert a.vocab_size == 64
    assert len(a.split("train")) == 20_000 and len(a.split("valid")) == 10_000
    assert np.array_equal(a.split("train"), b.split("train"))
    assert not np.array_equal(a.split("train"), c.split("train"))
    assert not np.array_equal(a.split("valid")[:1000], a.split("test")[:1000])
    assert a.split("train").max() < 64
    # Well below uniform (64) yet far from 1: there is structure to learn and noise left.
    assert 2.0 < a.best_ppl < 10.0
    assert a.describe()["best_ppl"] == pytest.approx(math.exp(a.describe()["entropy_rate"]))


def test_markov_entropy_rate_matches_long_sample():
    # Small chain, so the plug-in estimate of H(X_t | X_{t-2}, X_{t-1}) has little bias:
    # 16**3 cells against 600k samples.
    chain = markov.random_chain(vocab=16, order=2, branching=3, jump=0.05, seed=7)
    rate = chain.entropy_rate()
    x = chain.sample(600_000, seed=1)
    assert markov.empirical_conditional_entropy(x, 16, 2) == pytest.approx(rate, abs=0.01)
    assert chain.log_loss(x) == pytest.approx(rate, abs=0.01)
    # One symbol of context is not enough: the order-1 conditional entropy is clearly higher.
    assert markov.empirical_conditional_entropy(x, 16, 1) > rate + 0.5


def test_default_synthetic_chain_true_model_loss_is_the_entropy_rate():
    corpus = load_corpus("synthetic", seed=0, size=200_000)
    chain = markov.random_chain(seed=0, **{k: corpus.describe()["settings"][k] for k in ("vocab", "order", "branching", "jump")})
    loss = chain.log_loss(np.asarray(corpus.split("train")))
    assert math.exp(loss) == pytest.approx(corpus.best_ppl, rel=0.01)


def test_stationary_distribution_is_fixed_point():
    chain = markov.random_chain(vocab=5, order=1, branching=2, jump=0.1, seed=0)
    pi = chain.stationary()
    assert pi.sum() == pytest.approx(1.0)
    np.testing.assert_allclose(pi @ chain.probs(), pi, atol=1e-12)  # order 1: state == symbol


# ---------------------------------------------------------------- wikitext and text corpora


def test_wikitext_vocab_eos_and_unk(tmp_path):
    corpus = load_corpus("wikitext", path=make_wikitext(tmp_path / "wt"))
    train = corpus.decode(corpus.split("train")).split(" ")
    # 4 lines -> 4 <eos>; the blank line is just <eos>.
    assert train == "= Title = <eos> <eos> the cat sat on the mat . <eos> the dog sat . <eos>".split()
    # "ran", "a", "bird" are not in the training split: <unk>.
    assert corpus.decode(corpus.split("valid")) == "the cat <unk> . <eos> <eos> <unk> <unk> sat . <eos>"
    vocab = build_vocab([tmp_path / "wt" / "wiki.train.tokens"])
    assert vocab[:4] == ["<eos>", "the", "=", "sat"]  # most frequent first, ties by first use
    assert corpus.vocab_size == len(vocab) and "<unk>" in vocab
    assert corpus.split("train").dtype == np.uint8


def test_wikitext_txt_names_split_mapping_and_env(tmp_path, monkeypatch):
    make_wikitext(tmp_path / "data" / "wikitext-2", names=("test.txt", "valid.txt"))
    monkeypatch.setenv("POSBENCH_DATA_DIR", str(tmp_path / "data"))
    with pytest.raises(DataError, match=r"no training split.*splits=\{'train': 'test'"):
        load_corpus("wikitext-2")
    corpus = load_corpus("wikitext-2", splits={"train": "test", "valid": "valid"})
    assert corpus.splits == ["train", "valid"]
    assert corpus.decode(corpus.split("train")[:4]) == "= Title = <eos>"
    with pytest.raises(DataError, match=r"has no split 'test' \(it has: train, valid\)"):
        corpus.split("test")


def test_missing_folder_is_one_clear_line(tmp_path, monkeypatch):
    monkeypatch.delenv("POSBENCH_DATA_DIR", raising=False)
    with pytest.raises(DataError, match="set POSBENCH_DATA_DIR") as e:
        load_corpus("wikitext-103")
    assert "\n" not in str(e.value)
    with pytest.raises(DataError, match=r"does not exist; run `python bench.py download wikitext-103"):
        load_corpus("wikitext-103", path=tmp_path / "nowhere")
    (tmp_path / "empty").mkdir()
    with pytest.raises(DataError, match="no WikiText files"):
        load_corpus("wikitext-103", path=tmp_path / "empty")
    assert issubclass(DataError, ValueError)


def test_cache_is_reused_and_invalidated_by_source_change(tmp_path, cache_dir):
    folder = make_wikitext(tmp_path / "wt")
    a = load_corpus("wikitext", path=folder)
    assert len(list(cache_dir.iterdir())) == 1
    b = load_corpus("wikitext", path=folder)
    assert b.folder == a.folder and isinstance(b.split("train"), np.memmap)
    (folder / "wiki.train.tokens").write_text(WIKI_TRAIN + " more words here . \n")
    c = load_corpus("wikitext", path=folder)
    assert c.folder != a.folder and len(c.split("train")) == len(a.split("train")) + 5
    meta = c.meta["source"]["train"][0]
    assert meta["sha256"] == hashlib.sha256((folder / "wiki.train.tokens").read_bytes()).hexdigest()


def test_text_byte_and_word_levels(tmp_path):
    f = tmp_path / "t.txt"
    text = "héllo world\n" * 50  # 13 bytes a line ("é" is two)
    f.write_text(text, encoding="utf-8")
    byte = load_corpus("text", path=f, level="byte")
    assert byte.vocab_size == 256
    ids = np.concatenate([byte.split("train"), byte.split("valid")])
    assert bytes(ids.tolist()) == text.encode("utf-8")
    assert len(byte.split("valid")) == int(650 * 0.1)
    word = load_corpus("text", path=f, level="word", size=7)
    assert word.decode(word.split("train")) == "héllo world <eos> héllo world <eos> héllo"
    split = load_corpus("text", splits={"train": f, "valid": [f, f]}, level="byte")
    assert len(split.split("valid")) == 2 * len(text.encode())


@pytest.mark.data
def test_real_wikitext2(real_data_dir):
    corpus = load_corpus("wikitext-2", path=real_data_dir, splits={"train": "test", "valid": "valid"})
    # The data README: valid 217k words, test 245k words, ~33k distinct in all of WikiText-2.
    assert 240_000 < len(corpus.split("train")) < 250_000
    assert 210_000 < len(corpus.split("valid")) < 225_000
    assert 10_000 < corpus.vocab_size < 33_500
    lines = (real_data_dir / "wikitext-2" / "valid.txt").read_text(encoding="utf-8").split("\n")
    head = [w if w in corpus.itos else "<unk>" for line in lines[:4] for w in line.split() + ["<eos>"]]
    assert corpus.decode(corpus.split("valid")[: len(head)]).split(" ") == head
    assert head[:5] == ["<eos>", "=", "<unk>", "<unk>", "="]  # "Homarus" is not in test.txt


# ---------------------------------------------------------------- training batches


def test_batches_shape_contiguity_and_determinism():
    tokens = np.arange(1000, dtype=np.uint16)
    a = list(batches(tokens, seq_len=16, batch_size=4, seed=1, steps=3))
    b = list(batches(tokens, seq_len=16, batch_size=4, seed=1, steps=3))
    assert len(a) == 3 and a[0].shape == (4, 17) and a[0].dtype == torch.int64
    assert all(torch.equal(x, y) for x, y in zip(a, b))
    assert not torch.equal(a[0], next(batches(tokens, 16, 4, seed=2)))
    for x in a:  # consecutive ids: each row is a contiguous slice
        assert torch.equal(x[:, 1:] - x[:, :-1], torch.ones(4, 16, dtype=torch.int64))
    # Every start that fits (0 .. 1000-17) is reachable and none beyond.
    starts = torch.cat([x[:, 0] for x in batches(tokens, 16, 512, seed=0, steps=20)])
    assert starts.min() == 0 and starts.max() == 1000 - 17
    with pytest.raises(DataError, match="at least seq_len"):
        next(batches(tokens[:10], 16, 4, seed=0))


# ---------------------------------------------------------------- download (127.0.0.1 only)


def test_download_verifies_and_extracts(server, tmp_path):
    digest = hashlib.sha256(wikitext_zip_bytes()).hexdigest()
    folder = download_wikitext103(tmp_path / "data", url=f"{server}/wikitext-103-v1.zip", sha256=digest, quiet=True)
    assert folder == tmp_path / "data" / "wikitext-103"
    assert (folder / "wiki.valid.tokens").read_text() == " = valid = \n the valid text . \n"
    assert sorted(p.name for p in folder.iterdir()) == [
        "wiki.test.tokens",
        "wiki.train.tokens",
        "wiki.valid.tokens",
    ]  # archive removed
    corpus = load_corpus("wikitext-103", path=tmp_path / "data")
    assert corpus.decode(corpus.split("test")) == "= <unk> = <eos> the <unk> text . <eos>"
    # Second call finds the files and does not touch the network (a dead URL would fail).
    assert download_wikitext103(tmp_path / "data", url="http://127.0.0.1:9/x.zip", quiet=True) == folder


def test_download_checksum_mismatch(server, tmp_path):
    with pytest.raises(DataError, match=r"checksum mismatch .* expected sha256 0{64}, got [0-9a-f]{64}"):
        download_wikitext103(tmp_path / "d", url=f"{server}/wikitext-103-v1.zip", sha256="0" * 64, quiet=True)
    assert not (tmp_path / "d" / "wikitext-103" / "wikitext-103-v1.zip").exists()


def test_download_http_error_and_unreachable(server, tmp_path):
    with pytest.raises(DataError, match=r"HTTP 404"):
        download_wikitext103(tmp_path / "d", url=f"{server}/missing.zip", quiet=True)
    with socket.socket() as s:  # a port that was free a moment ago: nothing listens there
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(DataError, match=r"cannot reach http://127\.0\.0\.1:\d+/w\.zip .*offline") as e:
        download_wikitext103(tmp_path / "d", url=f"http://127.0.0.1:{port}/w.zip", timeout=5, quiet=True)
    assert "\n" not in str(e.value)


# ---------------------------------------------------------------- evaluation


class Bigram(nn.Module):
    """logits[b, t] = table[idx[b, t]]: ignores positions and all but the last token."""

    def __init__(self, vocab: int, seed: int = 0):
        super().__init__()
        g = torch.Generator().manual_seed(seed)
        self.table = nn.Parameter(torch.randn(vocab, vocab, generator=g))

    def forward(self, idx, pos=None):
        return self.table[idx]  # (B, T, V)


class Uniform(nn.Module):
    def __init__(self, vocab: int):
        super().__init__()
        self.vocab = vocab

    def forward(self, idx, pos=None):
        return torch.zeros(*idx.shape, self.vocab)


class PrefixMean(nn.Module):
    """Context- and position-sensitive: logits from the mean embedding of the window prefix."""

    def __init__(self, vocab: int):
        super().__init__()
        g = torch.Generator().manual_seed(1)
        self.emb = nn.Parameter(torch.randn(vocab, vocab, generator=g))

    def forward(self, idx, pos=None):
        T = idx.shape[1]
        return self.emb[idx].cumsum(1) / torch.arange(1, T + 1)[None, :, None]


class TargetWeight(nn.Module):
    """On the stream x = arange(N), predicting x[t] costs exactly w[t] nats: a ledger of targets."""

    def __init__(self, weights: torch.Tensor):
        super().__init__()
        self.w = weights  # (N,) losses in (0, log N)
        N = len(weights)
        self.N = N

    def forward(self, idx, pos=None):
        nxt = (idx + 1).clamp(max=self.N - 1)  # (B, T): the target of each position
        p = torch.exp(-self.w[nxt])  # probability given to the true next token
        rest = (1 - p) / (self.N - 1)  # spread over the other N-1 tokens
        probs = rest[..., None].expand(*idx.shape, self.N).clone()
        probs.scatter_(-1, nxt[..., None], p[..., None])
        return probs.log()


def _ledger(n: int):
    g = torch.Generator().manual_seed(0)
    w = torch.rand(n, generator=g, dtype=torch.float64) * 2 + 0.1
    return TargetWeight(w), w


@pytest.mark.parametrize("mode,stride", [("nonoverlapping", None), ("sliding", 1), ("sliding", 3), ("sliding", 8)])
@pytest.mark.parametrize("n", [40, 41, 47])
def test_every_target_scored_exactly_once(mode, stride, n):
    L = 8
    plan = window_plan(n, L, stride or L)
    hits = np.zeros(n, dtype=int)
    for start, first in plan:
        hits[start + first + 1 : start + L + 1] += 1
    assert hits[0] == 0 and (hits[1:] == 1).all()
    # End to end: with losses w[t] unique per target, the total must be exactly sum(w[1:]).
    model, w = _ledger(n)
    r = evaluate(model, np.arange(n), L, mode=mode, stride=stride, batch_size=3)
    assert r.n_tokens_scored == n - 1
    assert r.loss * r.n_tokens_scored == pytest.approx(float(w[1:].sum()), rel=1e-5)


def test_sliding_window_shapes_match_the_definition():
    plan = window_plan(20, 8, 3)
    # Starts 0,3,6,9; then the tail window right-aligned at 19-8=11 scoring its last 2.
    assert plan.tolist() == [[0, 0], [3, 5], [6, 5], [9, 5], [11, 6]]
    assert window_plan(17, 8, 8).tolist() == [[0, 0], [8, 0]]
    with pytest.raises(ValueError, match="at least L_valid"):
        window_plan(8, 8, 1)
    with pytest.raises(ValueError, match="stride"):
        window_plan(100, 8, 9)


def test_bigram_loss_is_exact_in_both_modes():
    V, n = 11, 300
    x = np.random.default_rng(0).integers(0, V, n)
    model = Bigram(V)
    logp = torch.log_softmax(model.table.detach().double(), -1).numpy()
    expected = -logp[x[:-1], x[1:]].mean()
    for mode, stride in [("nonoverlapping", None), ("sliding", 1), ("sliding", 5)]:
        r = evaluate(model, x, 16, mode=mode, stride=stride, batch_size=7)
        assert r.loss == pytest.approx(expected, rel=1e-6)
        assert r.ppl == pytest.approx(math.exp(expected), rel=1e-6)


def test_uniform_logits_give_vocab_size_perplexity():
    x = np.random.default_rng(0).integers(0, 50, 500).astype(np.uint16)
    for mode, stride in [("nonoverlapping", None), ("sliding", 4)]:
        r = evaluate(Uniform(50), x, 32, mode=mode, stride=stride)
        assert r.ppl == pytest.approx(50.0, rel=1e-5)
        np.testing.assert_allclose(r.per_position_loss[~np.isnan(r.per_position_loss)], math.log(50), rtol=1e-5)


def test_sliding_equals_nonoverlapping_when_stride_is_L():
    x = np.random.default_rng(1).integers(0, 13, 203)  # 202 targets: 12 windows + a tail
    model = PrefixMean(13)
    a = evaluate(model, x, 16)
    b = evaluate(model, x, 16, mode="sliding", stride=16, batch_size=5)
    assert a.loss == pytest.approx(b.loss, rel=1e-12)
    np.testing.assert_array_equal(a.per_position_count, b.per_position_count)
    np.testing.assert_allclose(a.per_position_loss, b.per_position_loss, rtol=1e-12)
    # A context-sensitive model does see the difference of more context.
    assert evaluate(model, x, 16, mode="sliding", stride=2).loss != pytest.approx(a.loss, rel=1e-6)


def test_per_position_curve_averages_each_window_position():
    x = np.random.default_rng(2).integers(0, 7, 65)  # 64 targets: 8 windows of 8
    model = PrefixMean(7)
    r = evaluate(model, x, 8, batch_size=3)
    assert r.per_position_loss.shape == (8,) and r.per_position_count.tolist() == [8] * 8
    with torch.no_grad():
        logits = model(torch.as_tensor(x[:64]).view(8, 8))  # the same 8 windows, by hand
        nll = torch.nn.functional.cross_entropy(logits.reshape(-1, 7), torch.as_tensor(x[1:]), reduction="none").view(8, 8)
    np.testing.assert_allclose(r.per_position_loss, nll.mean(0).double().numpy(), rtol=1e-6)
    assert r.loss == pytest.approx(float(nll.mean()), rel=1e-6)
    # Sliding with stride 2: the first window fills every position, later ones only the last 2.
    s = evaluate(model, x, 8, mode="sliding", stride=2)
    assert s.per_position_count.tolist() == [1, 1, 1, 1, 1, 1, 29, 29]
    assert s.n_tokens_scored == 64 and s.n_windows == 29


def test_interpolated_positions():
    assert positions(16) is None
    torch.testing.assert_close(positions(16, 16), torch.arange(16, dtype=torch.float32))
    p = positions(64, 16)
    assert p.dtype == torch.float32 and p[0] == 0 and p[1] == 0.25 and float(p.max()) < 16
    seen = []

    class Spy(Uniform):
        def forward(self, idx, pos=None):
            seen.append(pos)
            return super().forward(idx, pos)

    r = evaluate(Spy(5), np.zeros(200, dtype=np.int64)[:129], 64, interpolate_from=16)
    assert r.interpolated and r.interpolate_from == 16 and r.n_tokens_scored == 128
    assert all(torch.equal(s, p) for s in seen)
    assert r.to_dict()["per_position_loss"][0] == pytest.approx(math.log(5))


def test_oracle_ppl_is_the_true_source_on_the_given_tokens():
    corpus = load_corpus("synthetic", size=20_000, vocab=16, order=1, branching=2, jump=0.05)
    valid = np.asarray(corpus.split("valid"), dtype=np.int64)
    chain = markov.random_chain(vocab=16, order=1, branching=2, jump=0.05, seed=0)
    assert corpus.oracle_ppl(valid[:500]) == pytest.approx(math.exp(chain.log_loss(valid[:500])))
    # long samples approach the long-run bound; short ones may sit on either side of it
    assert corpus.oracle_ppl(valid) == pytest.approx(corpus.best_ppl, rel=0.05)
