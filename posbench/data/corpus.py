"""Corpora behind one interface (``load_corpus(kind, ...)``): WikiText, text files, and the
synthetic sources that know their best achievable perplexity; the kinds are described in
docs/data.md. Tokenizing and the cache are ``posbench.data.token_cache``'s; this module picks the
source and hands out the splits.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np
import torch

from posbench.data import markov, synthetic_copy
from posbench.data.sources import DATA_ENV, DOWNLOAD_HINT, WIKITEXT_FILES, check_source, text_files  # noqa: F401 (re-exported)
from posbench.data.sources import data_dir as _data_dir
from posbench.data.sources import source_file as _source_file
from posbench.data.sources import wikitext_folder as _wikitext_folder
from posbench.data.synthetic_options import MARKOV_DEFAULTS
from posbench.data.token_cache import (  # noqa: F401  (re-exported)
    CACHE_ENV,
    EOS,
    FORMAT_VERSION,
    UNK,
    DataError,
    build_byte_splits,
    build_holdout,
    build_vocab,
    build_word_splits,
    cache_root,
    cached,
    dtype_for,
)

SYNTH_TRAIN_TOKENS = 1_000_000
# Training streams of synthetic-copy: each starts at its own t = 0, so they sample in parallel.
COPY_TRAIN_STREAMS = 64


class Corpus:
    """Token-id splits of one corpus. Construct through :func:`load_corpus`."""

    def __init__(self, name: str, kind: str, folder: Path, meta: dict, size: int | None = None):
        self.name = name
        self.kind = kind
        self.folder = folder  # the cache folder holding <split>.bin and meta.json
        self.meta = meta
        self.size = size  # cap on tokens per split, or None
        self.vocab_size: int = meta["vocab_size"]
        self.best_ppl: float | None = meta.get("best_ppl")
        self.itos: list[str] | None = meta.get("itos")  # word level: id -> word

    @property
    def splits(self) -> list[str]:
        """Names of the splits this corpus has, e.g. ['train', 'valid']."""
        return list(self.meta["splits"])

    def split(self, name: str) -> np.ndarray:
        """(N,) token ids of one split as a read-only memmap (uint8/16/32), capped at ``size``."""
        if name not in self.meta["splits"]:
            raise DataError(f"corpus {self.name!r} has no split {name!r} (it has: {', '.join(self.splits)})")
        info = self.meta["splits"][name]
        if info["n_tokens"] == 0:
            return np.zeros(0, dtype=info["dtype"])
        arr = np.memmap(self.folder / f"{name}.bin", dtype=info["dtype"], mode="r")
        return arr if self.size is None else arr[: self.size]

    def oracle_ppl(self, tokens) -> float | None:
        """Perplexity of the true source on exactly these tokens (synthetic corpora), else None;
        unlike the long-run ``best_ppl``, it matches the sample. The first ``order`` tokens are not scored."""
        loss = self.oracle_token_loss(tokens)
        return None if loss is None else math.exp(float(np.nanmean(loss)))

    def oracle_token_loss(self, tokens) -> np.ndarray | None:
        """(N,) float64 -log p(x_t | x_<t) of the true source on a stream from the split's first
        token (NaN where it scores nothing: t = 0, t < order); None without a known source."""
        if self.kind not in ("synthetic", "synthetic-copy"):
            return None
        x = np.asarray(tokens, dtype=np.int64)
        cfg = self.meta["settings"]
        if self.kind == "synthetic":
            chain = markov.random_chain(
                vocab=cfg["vocab"], order=cfg["order"], branching=cfg["branching"], jump=cfg["jump"], seed=cfg["seed"]
            )
            return chain.token_loss(x)
        return _copy_source(cfg).token_loss(x)

    def copy_distances(self, name: str) -> np.ndarray | None:
        """(N,) int64 copy distance of every token of a synthetic-copy evaluation split (``valid`` or
        ``test``; 0 where the chain drew the token), regenerated from the source and the split's seed;
        None for another corpus or split."""
        if self.kind != "synthetic-copy" or name not in ("valid", "test"):
            return None
        cfg = self.meta["settings"]
        x, dist = _copy_source(cfg).sample_with_distances(1, cfg["eval_tokens"], _copy_split_seeds(cfg["seed"])[name])
        if not np.array_equal(x[0], self.split(name)):
            raise DataError(f"corpus {self.name!r}: the {name} split is not the stream its seed draws; delete its cache")
        return dist[0]

    def decode(self, ids: Sequence[int]) -> str:
        """Text of some ids: words joined by spaces, bytes as UTF-8, synthetic symbols as numbers."""
        ids = [int(i) for i in ids]
        if self.itos is not None:
            return " ".join(self.itos[i] for i in ids)
        if self.meta.get("level") == "byte":
            return bytes(ids).decode("utf-8", errors="replace")
        return " ".join(map(str, ids))

    def describe(self) -> dict:
        """JSON-ready summary for run records: name, kind, vocab, tokens per split, best_ppl, source."""
        return {
            "name": self.name,
            "kind": self.kind,
            "level": self.meta.get("level"),
            "vocab_size": self.vocab_size,
            "splits": {s: len(self.split(s)) for s in self.splits},
            "best_ppl": self.best_ppl,
            "entropy_rate": self.meta.get("entropy_rate"),
            "source": self.meta.get("source"),
            "settings": self.meta.get("settings"),
            "cache": str(self.folder),
        }


# ---------------------------------------------------------------- kinds


def _wikitext_split_file(folder: Path, file_split: str, kind: str) -> Path:
    names = WIKITEXT_FILES.get(file_split, (f"wiki.{file_split}.tokens", f"{file_split}.txt"))
    for n in names:
        if _source_file(folder / n):
            return folder / n
    hint = DOWNLOAD_HINT
    if file_split == "train":
        hint = (
            "WikiText-2 here has no training split: pass splits={'train': 'test', "
            "'valid': 'valid'} to train on test.txt, or " + DOWNLOAD_HINT
        )
    raise DataError(f"{kind}: split {file_split!r} not found in {folder} (looked for {' or '.join(names)}); {hint}")


def _load_wikitext(kind, path, splits, size) -> Corpus:
    folder = _wikitext_folder(_data_dir(path, kind), kind)
    if splits is None:
        present = [s for s in WIKITEXT_FILES if any(_source_file(folder / n) for n in WIKITEXT_FILES[s])]
        splits = {s: s for s in (["train"] if "train" not in present else []) + present}
    if "train" not in splits:
        raise DataError(f"{kind}: splits {splits} must name a 'train' split (the vocabulary comes from it)")
    split_files = {s: [_wikitext_split_file(folder, f, kind)] for s, f in splits.items()}
    settings = {"level": "word", "splits": dict(splits)}
    files = [f for fs in split_files.values() for f in fs]
    cache, meta = cached("wikitext", settings, files, build_word_splits(split_files, "train"))
    return Corpus(f"{folder.name} (word)", "wikitext", cache, meta, size)


def _load_text(path, level, splits, size, valid_fraction) -> Corpus:
    if level not in ("byte", "word"):
        raise DataError(f"text: level must be 'byte' or 'word', got {level!r}")
    split_files = text_files(path, splits)
    files = [f for fs in split_files.values() for f in fs]
    name = f"{files[0].stem} ({level})"
    if splits is None:
        settings = {"level": level, "valid_fraction": valid_fraction}
        build = build_holdout(split_files["all"], level, valid_fraction)
    else:
        if "train" not in split_files and level == "word":
            raise DataError("text: splits must include 'train' (the vocabulary comes from it)")
        settings = {"level": level, "splits": {s: [str(f) for f in fs] for s, fs in split_files.items()}}
        build = build_byte_splits(split_files) if level == "byte" else build_word_splits(split_files, "train")
    cache, meta = cached("text", settings, files, build)
    return Corpus(name, "text", cache, meta, size)


def _load_synthetic(seed, size, options) -> Corpus:
    params = {**MARKOV_DEFAULTS, **options}
    n_train = SYNTH_TRAIN_TOKENS if size is None else int(size)
    n_eval = max(n_train // 10, 10_000)
    settings = {"seed": seed, "train_tokens": n_train, "eval_tokens": n_eval, **params}

    def build(tmp: Path) -> dict:
        chain = markov.random_chain(seed=seed, **params)
        rate = chain.entropy_rate()
        dtype = dtype_for(chain.vocab)
        # Split samples use seeds spawned from the corpus seed, so they never share a stream.
        seeds = np.random.SeedSequence(seed).spawn(3)
        lengths = {"train": n_train, "valid": n_eval, "test": n_eval}
        for (s, n), ss in zip(lengths.items(), seeds):
            sample_seed = int(ss.generate_state(1)[0])
            chain.sample(n, sample_seed).astype(dtype).tofile(tmp / f"{s}.bin")
        return {
            "vocab_size": chain.vocab,
            "level": "symbol",
            "entropy_rate": rate,
            "best_ppl": markov.best_ppl(rate),
            "source": "markov chain (posbench.data.markov)",
            "splits": {s: {"n_tokens": n, "dtype": dtype} for s, n in lengths.items()},
        }

    cache, meta = cached("synthetic", settings, [], build)
    return Corpus(f"synthetic-markov{params['order']}-v{params['vocab']}", "synthetic", cache, meta)


def _copy_source(settings: dict) -> synthetic_copy.CopySource:
    return synthetic_copy.make_source(seed=settings["seed"], **{k: settings[k] for k in synthetic_copy.DEFAULTS})


def _copy_split_seeds(seed: int) -> dict[str, int]:
    """The seed each synthetic-copy split's streams are drawn from."""
    seeds = [int(ss.generate_state(1)[0]) for ss in np.random.SeedSequence(seed).spawn(3)]
    return dict(zip(("train", "valid", "test"), seeds))


def _load_synthetic_copy(seed, size, options) -> Corpus:
    params = {**synthetic_copy.DEFAULTS, **options}
    n_train = SYNTH_TRAIN_TOKENS if size is None else int(size)
    n_eval = max(n_train // 10, 10_000)
    settings = {"seed": seed, "train_tokens": n_train, "eval_tokens": n_eval, **params}
    try:
        source = _copy_source(settings)
    except ValueError as exc:
        raise DataError(str(exc)) from None

    def build(tmp: Path) -> dict:
        dtype = dtype_for(source.vocab)
        seeds = _copy_split_seeds(seed)
        streams = min(COPY_TRAIN_STREAMS, n_train)
        train = source.sample(streams, -(-n_train // streams), seeds["train"])  # (S, T)
        train.reshape(-1)[:n_train].astype(dtype).tofile(tmp / "train.bin")
        for s in ("valid", "test"):
            source.sample(1, n_eval, seeds[s])[0].astype(dtype).tofile(tmp / f"{s}.bin")
        # Long-run loss, estimated on the training streams past their first D tokens (where the
        # process is stationary); the exact figure for an evaluated sample is oracle_ppl.
        loss = source.token_loss(train)[:, source.max_distance + 1 :]
        rate = float(np.nanmean(loss)) if loss.size else float(np.nanmean(source.token_loss(train)))
        lengths = {"train": n_train, "valid": n_eval, "test": n_eval}
        return {
            "vocab_size": source.vocab,
            "level": "symbol",
            "entropy_rate": rate,
            "best_ppl": math.exp(rate),
            "source": "markov chain + copies (posbench.data.synthetic_copy)",
            "splits": {s: {"n_tokens": n, "dtype": dtype} for s, n in lengths.items()},
        }

    cache, meta = cached("synthetic-copy", settings, [], build)
    name = f"synthetic-copy-v{params['vocab']}-c{params['copy_prob']}-D{params['max_distance']}"
    return Corpus(name, "synthetic-copy", cache, meta)


KINDS = ("synthetic", "synthetic-copy", "wikitext", "wikitext-103", "wikitext-2", "text")


def load_corpus(
    kind: str = "synthetic",
    *,
    path: str | os.PathLike | Sequence[str | os.PathLike] | None = None,
    level: str = "word",
    seed: int = 0,
    splits: dict | None = None,
    size: int | None = None,
    valid_fraction: float = 0.1,
    **synthetic_options,
) -> Corpus:
    """Open one corpus, building and caching it on first use.

    ``path``: WikiText's data folder (default ``$POSBENCH_DATA_DIR``; it or its ``wikitext-103`` /
    ``wikitext-2`` child holds the splits), or text's file(s). ``splits``: WikiText's ``{corpus
    split: file split}``, text's ``{split: file(s)}`` (else the last ``valid_fraction`` of one
    stream is ``valid``). ``size``: synthetic training tokens (valid/test a tenth, >= 10k), else a
    cap on every split. ``synthetic_options``: the synthetic kinds' options only.
    """
    if kind not in KINDS:
        raise DataError(f"unknown corpus kind {kind!r}; choose from {', '.join(KINDS)}")
    if synthetic_options and kind not in ("synthetic", "synthetic-copy"):
        raise DataError(f"{kind}: unexpected options {sorted(synthetic_options)}")
    if kind == "synthetic":
        unknown = set(synthetic_options) - set(MARKOV_DEFAULTS)
        if unknown:
            raise DataError(f"synthetic: unknown options {sorted(unknown)}; known: {sorted(MARKOV_DEFAULTS)}")
        return _load_synthetic(seed, size, synthetic_options)
    if kind == "synthetic-copy":
        unknown = set(synthetic_options) - set(synthetic_copy.DEFAULTS)
        if unknown:
            raise DataError(f"synthetic-copy: unknown options {sorted(unknown)}; known: {sorted(synthetic_copy.DEFAULTS)}")
        return _load_synthetic_copy(seed, size, synthetic_options)
    if kind == "text":
        return _load_text(path, level, splits, size, valid_fraction)
    return _load_wikitext(kind, path, splits, size)


# ---------------------------------------------------------------- training batches


def batches(tokens: np.ndarray, seq_len: int, batch_size: int, *, seed: int, steps: int | None = None) -> Iterator[torch.Tensor]:
    """(B, T+1) int64 batches of contiguous tokens at uniform random offsets drawn from ``seed``
    alone (one seed, one data order); endless unless ``steps`` is given."""
    n = len(tokens)
    if n < seq_len + 1:
        raise DataError(f"batches: need at least seq_len+1 = {seq_len + 1} tokens, the split has {n}")
    rng = np.random.default_rng(seed)
    span = np.arange(seq_len + 1)  # (T+1,)
    made = 0
    while steps is None or made < steps:
        starts = rng.integers(0, n - seq_len, size=batch_size)  # (B,), n - T starts fit
        idx = starts[:, None] + span[None, :]  # (B, T+1)
        yield torch.from_numpy(np.asarray(tokens[idx], dtype=np.int64))
        made += 1
