"""The token cache and the tokenizers that fill it: a corpus is tokenized once and kept as
memory-mapped ids in ``$POSBENCH_CACHE_DIR`` (or ``~/.cache/posbench``), one folder per hash of the
source files' (path, size, mtime) and the tokenizer settings, so a changed source gets a new key.
``posbench.data.corpus`` chooses what to build; this module builds and finds it.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from collections import Counter
from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np

from posbench.core.outcome import PosbenchError


class DataError(PosbenchError, ValueError):
    """A missing folder, split or file, a damaged cache, or a failed download; the message is one
    line for the user."""


CACHE_ENV = "POSBENCH_CACHE_DIR"
EOS, UNK = "<eos>", "<unk>"  # WikiText's end-of-line and unknown-word tokens
FORMAT_VERSION = 1  # bump when tokenization changes, so old caches are not reused


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


def dtype_for(vocab_size: int) -> str:
    """Smallest unsigned type that holds every id: a memmap of uint16 is half a uint32's size."""
    if vocab_size <= 1 << 8:
        return "uint8"
    return "uint16" if vocab_size <= 1 << 16 else "uint32"


def cached(kind: str, settings: dict, files: Sequence[Path], build) -> tuple[Path, dict]:
    """Folder and meta of a cached corpus, calling ``build(tmp_dir) -> meta`` on a miss; the folder
    is renamed into place whole, so a crash or a second builder never leaves half a cache."""
    root = cache_root()
    folder = root / f"{kind}_{_cache_key(kind, settings, files)}"
    meta_path = folder / "meta.json"
    if os.path.lexists(folder):
        problem = damage(folder)
        if problem is None:
            return folder, json.loads(meta_path.read_text())
        _discard(folder, problem)  # rebuilt below from the sources, which are still there
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


# Token ids are stored raw; only these dtypes are ever memory-mapped (``meta.json`` is data, and a
# dtype such as ``object`` would make numpy read pointers out of the file).
DTYPES = {"uint8": 1, "uint16": 2, "uint32": 4}


def damage(folder: Path) -> str | None:
    """What is wrong with a cache folder, or None when ``meta.json`` and every ``<split>.bin`` (of
    exactly ``n_tokens`` x itemsize bytes: a truncated one would train on the rest) are whole."""
    if folder.is_symlink() or not folder.is_dir():
        return "is not a folder"
    meta_path = folder / "meta.json"
    if meta_path.is_symlink() or not meta_path.is_file():
        return "has no meta.json"
    try:
        meta = json.loads(meta_path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError, RecursionError):
        return "has an unreadable meta.json"
    splits = meta.get("splits") if isinstance(meta, dict) else None
    if not isinstance(splits, dict) or not splits or not isinstance(meta.get("vocab_size"), int):
        return "has a meta.json without splits or vocab_size"
    for name, info in splits.items():
        n, dtype = (info.get("n_tokens"), info.get("dtype")) if isinstance(info, dict) else (None, None)
        if dtype not in DTYPES:
            return f"names dtype {dtype!r} for split {name!r} (allowed: {', '.join(DTYPES)})"
        if not isinstance(n, int) or isinstance(n, bool) or n < 0:
            return f"names no token count for split {name!r}"
        path = folder / f"{name}.bin"
        if n == 0:
            continue
        if path.is_symlink() or not path.is_file():
            return f"has no regular file {path.name}"
        if path.stat().st_size != n * DTYPES[dtype]:
            return f"has {path.name} of {path.stat().st_size} bytes where meta.json says {n * DTYPES[dtype]}"
    return None


def _discard(folder: Path, problem: str) -> None:
    """Move a damaged cache folder out of the way (then delete it), so it is rebuilt; a folder that
    cannot be moved is refused with one line naming it."""
    import sys

    aside = folder.with_name(f".damaged-{folder.name}-{os.getpid()}")
    try:
        os.rename(folder, aside)  # a link is renamed, never followed
    except OSError as exc:
        raise DataError(
            f"token cache {folder} {problem} and cannot be moved aside ({exc.strerror}); delete that folder and run again"
        ) from None
    print(f"posbench: token cache {folder} {problem}; rebuilding it", file=sys.stderr)
    if aside.is_symlink() or not aside.is_dir():
        aside.unlink()
    else:
        shutil.rmtree(aside, ignore_errors=True)


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


def build_word_splits(split_files: dict[str, list[Path]], vocab_split: str):
    """``build`` callback for word-level corpora with one file list per split."""

    def build(tmp: Path) -> dict:
        itos = build_vocab(split_files[vocab_split])
        stoi = {w: i for i, w in enumerate(itos)}
        dtype = dtype_for(len(itos))
        splits = {
            s: {"n_tokens": _write_words(fs, stoi, tmp / f"{s}.bin", dtype), "dtype": dtype} for s, fs in split_files.items()
        }
        return {
            "vocab_size": len(itos),
            "itos": itos,
            "level": "word",
            "splits": splits,
            "vocab_split": vocab_split,
            "source": _source_info(split_files),
        }

    return build


def build_holdout(files: list[Path], level: str, valid_fraction: float):
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
        dtype = dtype_for(vocab)
        cut = len(ids) - int(len(ids) * valid_fraction)
        parts = {"train": ids[:cut], "valid": ids[cut:]}
        for s, a in parts.items():
            a.astype(dtype).tofile(tmp / f"{s}.bin")
        meta = {
            "vocab_size": vocab,
            "level": level,
            "valid_fraction": valid_fraction,
            "splits": {s: {"n_tokens": len(a), "dtype": dtype} for s, a in parts.items()},
            "source": _source_info({"all": files}),
        }
        if itos is not None:
            meta["itos"] = itos
        return meta

    return build


def build_byte_splits(split_files: dict[str, list[Path]]):
    """``build`` callback for byte-level corpora with one file list per split: ids are the bytes."""

    def build(tmp: Path) -> dict:
        splits = {}
        for s, fs in split_files.items():
            with open(tmp / f"{s}.bin", "wb") as out:
                for f in fs:
                    with open(f, "rb") as src:
                        shutil.copyfileobj(src, out)
            splits[s] = {"n_tokens": (tmp / f"{s}.bin").stat().st_size, "dtype": "uint8"}
        return {"vocab_size": 256, "level": "byte", "splits": splits, "source": _source_info(split_files)}

    return build
