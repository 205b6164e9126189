"""Corpora behind one interface, tokenized once and cached as memory-mapped token ids.

Kinds (``load_corpus(kind, ...)``):

- ``wikitext`` (aliases ``wikitext-103``, ``wikitext-2``): a folder in the WikiText format,
  ``wiki.{train,valid,test}.tokens`` or ``{train,valid,test}.txt``. Word level: whitespace tokens,
  every line ends with ``<eos>``, ``<unk>`` is an ordinary token, and the vocabulary comes from
  the split used for training; words it lacks map to ``<unk>``.
- ``text``: UTF-8 text file(s), ``level="byte"`` (vocabulary 256) or ``level="word"``.
- ``synthetic``: an order-2 sparse Markov chain drawn from ``seed`` (see ``posbench.data.markov``);
  needs no files and knows its best achievable perplexity.
- ``synthetic-copy``: an order-1 sparse chain mixed with copies of the token d steps back (see
  ``posbench.data.synthetic_copy``); rewards knowing positions, and its true predictive probability
  is known in closed form, so the best perplexity on any evaluated sample is exact.

Cache: ``$POSBENCH_CACHE_DIR`` or ``~/.cache/posbench``, one folder per corpus named by a hash of
the source files' (path, size, mtime) and the tokenizer settings, holding ``<split>.bin`` (raw
uint8/16/32 ids) and ``meta.json``. A changed source file gets a new key, so no stale reads.
"""
from __future__ import annotations

import hashlib
import math
import json
import os
import shutil
import tempfile
from collections import Counter
from pathlib import Path
from typing import Iterator, Sequence

import numpy as np
import torch

from posbench.core.outcome import PosbenchError
from posbench.data import markov
from posbench.data import synthetic_copy

CACHE_ENV = "POSBENCH_CACHE_DIR"
DATA_ENV = "POSBENCH_DATA_DIR"
FORMAT_VERSION = 1  # bump when tokenization changes, so old caches are not reused
EOS, UNK = "<eos>", "<unk>"
DOWNLOAD_HINT = "run `python bench.py download wikitext-103 --data DIR`"
# File names tried for each WikiText split, in order.
WIKITEXT_FILES = {s: (f"wiki.{s}.tokens", f"{s}.txt") for s in ("train", "valid", "test")}
# The synthetic corpus's chain: 64 symbols, each 2-symbol context has 4 likely successors.
SYNTH_DEFAULTS = dict(vocab=64, order=2, branching=4, jump=0.05)
SYNTH_TRAIN_TOKENS = 1_000_000
# Training streams of synthetic-copy: each starts at its own t = 0, so they sample in parallel.
COPY_TRAIN_STREAMS = 64


class DataError(PosbenchError, ValueError):
    """A missing folder, split or file, or a failed download; the message is one line for the user."""


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
            raise DataError(
                f"corpus {self.name!r} has no split {name!r} (it has: {', '.join(self.splits)})"
            )
        info = self.meta["splits"][name]
        if info["n_tokens"] == 0:
            return np.zeros(0, dtype=info["dtype"])
        arr = np.memmap(self.folder / f"{name}.bin", dtype=info["dtype"], mode="r")
        return arr if self.size is None else arr[: self.size]

    def oracle_ppl(self, tokens) -> float | None:
        """Perplexity of the true source on exactly these tokens (synthetic corpora), else None.

        ``best_ppl`` is the source's long-run bound; a short evaluation sample can be easier or
        harder than that, so rows compare a model with the source on the tokens it was scored on.
        The source conditions on its order; the first ``order`` tokens of the sample are not scored.
        """
        loss = self.oracle_token_loss(tokens)
        return None if loss is None else math.exp(float(np.nanmean(loss)))

    def oracle_token_loss(self, tokens) -> np.ndarray | None:
        """(N,) float64 -log p(x_t | x_<t) of the true source for every token of a stream that
        starts at the split's first token, NaN where the source scores nothing (t = 0, and t < order
        for a Markov chain); None for corpora without a known source.

        ``synthetic-copy`` splits are single streams from t = 0, so on a split's prefix this is
        exactly the probability the generator used.
        """
        if self.kind not in ("synthetic", "synthetic-copy"):
            return None
        x = np.asarray(tokens, dtype=np.int64)
        cfg = self.meta["settings"]
        if self.kind == "synthetic":
            chain = markov.random_chain(vocab=cfg["vocab"], order=cfg["order"], branching=cfg["branching"],
                                        jump=cfg["jump"], seed=cfg["seed"])
            return chain.token_loss(x)
        return _copy_source(cfg).token_loss(x)

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


# ---------------------------------------------------------------- cache


def cache_root() -> Path:
    """Folder holding every cached corpus: ``$POSBENCH_CACHE_DIR`` or ``~/.cache/posbench``."""
    env = os.environ.get(CACHE_ENV)
    return Path(env).expanduser() if env else Path.home() / ".cache" / "posbench"


def _fingerprint(files: Sequence[Path]) -> list[list]:
    """(path, size, mtime_ns) of each source: cheap to compute, and changes when the file does."""
    out = []
    for f in files:
        st = f.stat()
        out.append([str(f.resolve()), st.st_size, st.st_mtime_ns])
    return out


def _cache_key(kind: str, settings: dict, files: Sequence[Path]) -> str:
    blob = json.dumps(
        {"v": FORMAT_VERSION, "kind": kind, "settings": settings, "files": _fingerprint(files)},
        sort_keys=True,
    )
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def _dtype_for(vocab_size: int) -> str:
    """Smallest unsigned type that holds every id: a memmap of uint16 is half a uint32's size."""
    if vocab_size <= 1 << 8:
        return "uint8"
    return "uint16" if vocab_size <= 1 << 16 else "uint32"


def _cached(kind: str, settings: dict, files: Sequence[Path], build) -> tuple[Path, dict]:
    """Folder and meta of a cached corpus, calling ``build(tmp_dir) -> meta`` on a miss.

    ``build`` writes ``<split>.bin`` files into a private temporary folder that is renamed into
    place whole, so a crash or a second process building the same key never leaves half a cache.
    """
    root = cache_root()
    folder = root / f"{kind}_{_cache_key(kind, settings, files)}"
    meta_path = folder / "meta.json"
    if meta_path.exists():
        return folder, json.loads(meta_path.read_text())
    root.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{folder.name}-", dir=root))
    try:
        meta = build(tmp)
        meta.update(kind=kind, settings=settings, format_version=FORMAT_VERSION)
        (tmp / "meta.json").write_text(json.dumps(meta))
        try:
            tmp.rename(folder)
        except OSError:  # another process finished first; its copy is as good as ours
            shutil.rmtree(tmp, ignore_errors=True)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return folder, json.loads(meta_path.read_text())


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _source_info(split_files: dict[str, list[Path]]) -> dict:
    return {
        s: [{"path": str(f.resolve()), "bytes": f.stat().st_size, "sha256": _sha256(f)} for f in fs]
        for s, fs in split_files.items()
    }


# ---------------------------------------------------------------- tokenizers


def _lines(files: Sequence[Path]) -> Iterator[str]:
    for f in files:
        with open(f, encoding="utf-8") as fh:
            yield from fh


def _words(files: Sequence[Path]) -> Iterator[list[str]]:
    """Word tokens of each line, the line's ``<eos>`` included (blank lines give just ``<eos>``)."""
    for line in _lines(files):
        yield line.split() + [EOS]


def build_vocab(files: Sequence[Path]) -> list[str]:
    """id -> word: most frequent first (ties by first appearance), ``<eos>``/``<unk>`` always in."""
    counts: Counter[str] = Counter()
    for words in _words(files):
        counts.update(words)
    counts.setdefault(UNK, 0)
    # Counter keeps insertion order and sorted() is stable, so ties stay in order of appearance.
    return sorted(counts, key=counts.__getitem__, reverse=True)


def _write_words(files: Sequence[Path], stoi: dict[str, int], out: Path, dtype: str) -> int:
    """Encode files into ``out`` in chunks (WikiText-103 is 103M tokens); returns the token count."""
    unk, n, chunk = stoi[UNK], 0, []
    with open(out, "wb") as fh:
        for words in _words(files):
            chunk.extend(stoi.get(w, unk) for w in words)
            if len(chunk) >= 1 << 20:
                np.asarray(chunk, dtype=dtype).tofile(fh)
                n, chunk = n + len(chunk), []
        np.asarray(chunk, dtype=dtype).tofile(fh)
    return n + len(chunk)


def _build_word_splits(split_files: dict[str, list[Path]], vocab_split: str):
    """``build`` callback for word-level corpora with one file list per split."""

    def build(tmp: Path) -> dict:
        itos = build_vocab(split_files[vocab_split])
        stoi = {w: i for i, w in enumerate(itos)}
        dtype = _dtype_for(len(itos))
        splits = {
            s: {"n_tokens": _write_words(fs, stoi, tmp / f"{s}.bin", dtype), "dtype": dtype}
            for s, fs in split_files.items()
        }
        return {"vocab_size": len(itos), "itos": itos, "level": "word", "splits": splits,
                "vocab_split": vocab_split, "source": _source_info(split_files)}

    return build


def _build_holdout(files: list[Path], level: str, valid_fraction: float):
    """``build`` callback for one text stream cut into train (head) and valid (tail)."""

    def build(tmp: Path) -> dict:
        if level == "byte":
            ids = np.concatenate([np.fromfile(f, dtype=np.uint8) for f in files])
            itos, vocab = None, 256
        else:
            words = [w for line in _words(files) for w in line]
            cut = len(words) - int(len(words) * valid_fraction)
            counts = Counter(words[:cut])  # vocabulary from the training head only
            counts.setdefault(UNK, 0)
            counts.setdefault(EOS, 0)
            itos = sorted(counts, key=counts.__getitem__, reverse=True)
            stoi = {w: i for i, w in enumerate(itos)}
            ids = np.asarray([stoi.get(w, stoi[UNK]) for w in words], dtype=np.int64)
            vocab = len(itos)
        dtype = _dtype_for(vocab)
        cut = len(ids) - int(len(ids) * valid_fraction)
        parts = {"train": ids[:cut], "valid": ids[cut:]}
        for s, a in parts.items():
            a.astype(dtype).tofile(tmp / f"{s}.bin")
        meta = {"vocab_size": vocab, "level": level, "valid_fraction": valid_fraction,
                "splits": {s: {"n_tokens": len(a), "dtype": dtype} for s, a in parts.items()},
                "source": _source_info({"all": files})}
        if itos is not None:
            meta["itos"] = itos
        return meta

    return build


def _build_byte_splits(split_files: dict[str, list[Path]]):
    """``build`` callback for byte-level corpora with one file list per split: ids are the bytes."""

    def build(tmp: Path) -> dict:
        splits = {}
        for s, fs in split_files.items():
            with open(tmp / f"{s}.bin", "wb") as out:
                for f in fs:
                    with open(f, "rb") as src:
                        shutil.copyfileobj(src, out)
            splits[s] = {"n_tokens": (tmp / f"{s}.bin").stat().st_size, "dtype": "uint8"}
        return {"vocab_size": 256, "level": "byte", "splits": splits,
                "source": _source_info(split_files)}

    return build


# ---------------------------------------------------------------- kinds


def _data_dir(path: str | os.PathLike | None, what: str) -> Path:
    """The explicit folder, else ``$POSBENCH_DATA_DIR``; a DataError naming both when neither is set."""
    raw = path if path is not None else os.environ.get(DATA_ENV)
    if raw is None:
        raise DataError(f"{what}: no data folder given; pass path=DIR (--data DIR) or set {DATA_ENV}")
    folder = Path(raw).expanduser()
    if not folder.exists():
        raise DataError(f"{what}: data folder {folder} does not exist; {DOWNLOAD_HINT}")
    return folder


def _wikitext_folder(root: Path, kind: str) -> Path:
    """``root`` itself if it holds WikiText files, else its ``wikitext-103``/``wikitext-2`` child."""
    children = [kind] if kind != "wikitext" else ["wikitext-103", "wikitext-2"]
    candidates = [root] + [root / c for c in children]
    for c in candidates:
        if any((c / n).is_file() for names in WIKITEXT_FILES.values() for n in names):
            return c
    looked = ", ".join(str(c) for c in candidates)
    raise DataError(
        f"{kind}: no WikiText files (wiki.valid.tokens or valid.txt, ...) in {looked}; {DOWNLOAD_HINT}"
    )


def _wikitext_split_file(folder: Path, file_split: str, kind: str) -> Path:
    names = WIKITEXT_FILES.get(file_split, (f"wiki.{file_split}.tokens", f"{file_split}.txt"))
    for n in names:
        if (folder / n).is_file():
            return folder / n
    hint = DOWNLOAD_HINT
    if file_split == "train":
        hint = ("WikiText-2 here has no training split: pass splits={'train': 'test', "
                "'valid': 'valid'} to train on test.txt, or " + DOWNLOAD_HINT)
    raise DataError(f"{kind}: split {file_split!r} not found in {folder} (looked for "
                    f"{' or '.join(names)}); {hint}")


def _load_wikitext(kind, path, splits, size) -> Corpus:
    folder = _wikitext_folder(_data_dir(path, kind), kind)
    if splits is None:
        present = [s for s in WIKITEXT_FILES if any((folder / n).is_file() for n in WIKITEXT_FILES[s])]
        splits = {s: s for s in (["train"] if "train" not in present else []) + present}
    if "train" not in splits:
        raise DataError(f"{kind}: splits {splits} must name a 'train' split (the vocabulary comes from it)")
    split_files = {s: [_wikitext_split_file(folder, f, kind)] for s, f in splits.items()}
    settings = {"level": "word", "splits": dict(splits)}
    files = [f for fs in split_files.values() for f in fs]
    cache, meta = _cached("wikitext", settings, files, _build_word_splits(split_files, "train"))
    return Corpus(f"{folder.name} (word)", "wikitext", cache, meta, size)


def _load_text(path, level, splits, size, valid_fraction) -> Corpus:
    if level not in ("byte", "word"):
        raise DataError(f"text: level must be 'byte' or 'word', got {level!r}")
    if splits is not None:  # {split: file or [files]}, relative names resolved against path
        base = Path(path).expanduser() if path is not None else Path(".")
        split_files = {
            s: [base / f for f in ([fs] if isinstance(fs, (str, os.PathLike)) else fs)]
            for s, fs in splits.items()
        }
    else:
        if path is None:
            raise DataError("text: give path=FILE (or a list of files) or splits={'train': FILE, ...}")
        raw = [path] if isinstance(path, (str, os.PathLike)) else list(path)
        split_files = {"all": [Path(p).expanduser() for p in raw]}
    for fs in split_files.values():
        for f in fs:
            if not f.is_file():
                raise DataError(f"text: file {f} not found")
    files = [f for fs in split_files.values() for f in fs]
    name = f"{files[0].stem} ({level})"
    if splits is None:
        settings = {"level": level, "valid_fraction": valid_fraction}
        build = _build_holdout(split_files["all"], level, valid_fraction)
    else:
        if "train" not in split_files and level == "word":
            raise DataError("text: splits must include 'train' (the vocabulary comes from it)")
        settings = {"level": level, "splits": {s: [str(f) for f in fs] for s, fs in split_files.items()}}
        build = (_build_byte_splits(split_files) if level == "byte"
                 else _build_word_splits(split_files, "train"))
    cache, meta = _cached("text", settings, files, build)
    return Corpus(name, "text", cache, meta, size)


def _load_synthetic(seed, size, options) -> Corpus:
    params = {**SYNTH_DEFAULTS, **options}
    n_train = SYNTH_TRAIN_TOKENS if size is None else int(size)
    n_eval = max(n_train // 10, 10_000)
    settings = {"seed": seed, "train_tokens": n_train, "eval_tokens": n_eval, **params}

    def build(tmp: Path) -> dict:
        chain = markov.random_chain(seed=seed, **params)
        rate = chain.entropy_rate()
        dtype = _dtype_for(chain.vocab)
        # Split samples use seeds spawned from the corpus seed, so they never share a stream.
        seeds = np.random.SeedSequence(seed).spawn(3)
        lengths = {"train": n_train, "valid": n_eval, "test": n_eval}
        for (s, n), ss in zip(lengths.items(), seeds):
            sample_seed = int(ss.generate_state(1)[0])
            chain.sample(n, sample_seed).astype(dtype).tofile(tmp / f"{s}.bin")
        return {"vocab_size": chain.vocab, "level": "symbol", "entropy_rate": rate,
                "best_ppl": markov.best_ppl(rate), "source": "markov chain (posbench.data.markov)",
                "splits": {s: {"n_tokens": n, "dtype": dtype} for s, n in lengths.items()}}

    cache, meta = _cached("synthetic", settings, [], build)
    return Corpus(f"synthetic-markov{params['order']}-v{params['vocab']}", "synthetic", cache, meta)


def _copy_source(settings: dict) -> synthetic_copy.CopySource:
    return synthetic_copy.make_source(seed=settings["seed"],
                                      **{k: settings[k] for k in synthetic_copy.DEFAULTS})


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
        dtype = _dtype_for(source.vocab)
        seeds = [int(ss.generate_state(1)[0]) for ss in np.random.SeedSequence(seed).spawn(3)]
        streams = min(COPY_TRAIN_STREAMS, n_train)
        train = source.sample(streams, -(-n_train // streams), seeds[0])  # (S, T)
        train.reshape(-1)[:n_train].astype(dtype).tofile(tmp / "train.bin")
        for s, ss in (("valid", seeds[1]), ("test", seeds[2])):
            source.sample(1, n_eval, ss)[0].astype(dtype).tofile(tmp / f"{s}.bin")
        # Long-run loss, estimated on the training streams past their first D tokens (where the
        # process is stationary); the exact figure for an evaluated sample is oracle_ppl.
        loss = source.token_loss(train)[:, source.max_distance + 1 :]
        rate = float(np.nanmean(loss)) if loss.size else float(np.nanmean(source.token_loss(train)))
        lengths = {"train": n_train, "valid": n_eval, "test": n_eval}
        return {"vocab_size": source.vocab, "level": "symbol", "entropy_rate": rate,
                "best_ppl": math.exp(rate), "source": "markov chain + copies (posbench.data.synthetic_copy)",
                "splits": {s: {"n_tokens": n, "dtype": dtype} for s, n in lengths.items()}}

    cache, meta = _cached("synthetic-copy", settings, [], build)
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
    """Open (building and caching on first use) one corpus.

    kind: ``synthetic`` | ``synthetic-copy`` | ``wikitext`` (``wikitext-103`` / ``wikitext-2`` pick that subfolder of
        the data folder) | ``text``.
    path: wikitext: the data folder (default ``$POSBENCH_DATA_DIR``); the folder itself or its
        ``wikitext-103``/``wikitext-2`` child must hold the split files. text: a file or list of
        files (or the base folder of ``splits``).
    level: text only, ``"word"`` or ``"byte"``; WikiText is always word level.
    seed, synthetic_options: synthetic (vocab, order, branching, jump) and synthetic-copy (vocab,
        branching, jump, copy_prob, max_distance, decay) only.
    splits: wikitext: ``{corpus split: file split}``, e.g. ``{"train": "test", "valid": "valid"}``
        for WikiText-2 without its training file. text: ``{split: file(s)}``; without it one
        stream is cut into ``train`` and its last ``valid_fraction`` as ``valid``.
    size: synthetic kinds: training tokens (valid/test get a tenth, at least 10k). Others: a cap on
        the tokens of every split, for quick runs.
    """
    if kind not in KINDS:
        raise DataError(f"unknown corpus kind {kind!r}; choose from {', '.join(KINDS)}")
    if synthetic_options and kind not in ("synthetic", "synthetic-copy"):
        raise DataError(f"{kind}: unexpected options {sorted(synthetic_options)}")
    if kind == "synthetic":
        unknown = set(synthetic_options) - set(SYNTH_DEFAULTS)
        if unknown:
            raise DataError(f"synthetic: unknown options {sorted(unknown)}; known: {sorted(SYNTH_DEFAULTS)}")
        return _load_synthetic(seed, size, synthetic_options)
    if kind == "synthetic-copy":
        unknown = set(synthetic_options) - set(synthetic_copy.DEFAULTS)
        if unknown:
            raise DataError(f"synthetic-copy: unknown options {sorted(unknown)}; "
                            f"known: {sorted(synthetic_copy.DEFAULTS)}")
        return _load_synthetic_copy(seed, size, synthetic_options)
    if kind == "text":
        return _load_text(path, level, splits, size, valid_fraction)
    return _load_wikitext(kind, path, splits, size)


# ---------------------------------------------------------------- training batches


def batches(
    tokens: np.ndarray, seq_len: int, batch_size: int, *, seed: int, steps: int | None = None
) -> Iterator[torch.Tensor]:
    """Training batches: (B, T+1) int64 tensors of contiguous tokens at random offsets.

    Inputs are ``batch[:, :-1]`` and targets ``batch[:, 1:]``. Offsets are uniform over every
    start that fits and come from ``seed`` alone, so two runs with one seed see the same data.
    Endless unless ``steps`` is given.
    """
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
