"""Where a corpus's files are, found without reading them: ``load_corpus`` opens its source
through these, and ``check_source`` lets ``--dry-run`` and ``validate --data`` say a corpus is
missing before anything runs (no torch, no tokenizing)."""

from __future__ import annotations

import os
import stat
from pathlib import Path

from posbench.core.files import file_kind
from posbench.data.token_cache import DataError

DATA_ENV = "POSBENCH_DATA_DIR"
DOWNLOAD_HINT = "run `python bench.py download wikitext-103 --data DIR`"
# File names tried for each WikiText split, in order.
WIKITEXT_FILES = {s: (f"wiki.{s}.tokens", f"{s}.txt") for s in ("train", "valid", "test")}


def data_dir(path: str | os.PathLike | None, what: str) -> Path:
    """The explicit folder, else ``$POSBENCH_DATA_DIR``; a DataError naming both when neither is set."""
    raw = path if path is not None else os.environ.get(DATA_ENV)
    if raw is None:
        raise DataError(f"{what}: no data folder given; pass path=DIR (--data DIR) or set {DATA_ENV}, or {DOWNLOAD_HINT}")
    folder = Path(raw).expanduser()
    if not folder.exists():
        raise DataError(f"{what}: data folder {folder} does not exist; {DOWNLOAD_HINT}")
    return folder


def source_file(path: Path) -> bool:
    """True for a regular file (or a link to one), False when nothing is there, a DataError for
    anything else (FIFO, device, folder, dangling link): never read, never taken for a missing split."""
    try:
        st = os.stat(path)
    except (FileNotFoundError, NotADirectoryError):
        if os.path.islink(path):
            raise DataError(f"{path} is a link to nothing; allowed: a regular file") from None
        return False
    except OSError as exc:
        raise DataError(f"{path} cannot be read ({exc.strerror}); allowed: a readable regular file") from None
    if not stat.S_ISREG(st.st_mode):
        raise DataError(f"{path} is not a regular file ({file_kind(st.st_mode)}); allowed: a regular file")
    return True


def wikitext_folder(root: Path, kind: str) -> Path:
    """``root`` itself if it holds WikiText files, else its ``wikitext-103``/``wikitext-2`` child."""
    children = [kind] if kind != "wikitext" else ["wikitext-103", "wikitext-2"]
    candidates = [root] + [root / c for c in children]
    for c in candidates:
        if any(source_file(c / n) for names in WIKITEXT_FILES.values() for n in names):
            return c
    looked = ", ".join(str(c) for c in candidates)
    raise DataError(f"{kind}: no WikiText files (wiki.valid.tokens or valid.txt, ...) in {looked}; {DOWNLOAD_HINT}")


def text_files(path, splits) -> dict[str, list[Path]]:
    """Kind ``text``: split -> its files (``{"all": [...]}`` without splits), each one there."""
    if splits is not None:  # {split: file or [files]}, relative names resolved against path
        base = Path(path).expanduser() if path is not None else Path(".")
        split_files = {s: [base / f for f in ([fs] if isinstance(fs, (str, os.PathLike)) else fs)] for s, fs in splits.items()}
    else:
        if path is None:
            raise DataError("text: give path=FILE (or a list of files) or splits={'train': FILE, ...}")
        raw = [path] if isinstance(path, (str, os.PathLike)) else list(path)
        split_files = {"all": [Path(p).expanduser() for p in raw]}
    for fs in split_files.values():
        for f in fs:
            if not source_file(f):
                raise DataError(f"text: file {f} not found")
    return split_files


def check_source(kind: str, path=None, splits=None) -> str | None:
    """The DataError ``load_corpus`` would raise for a missing source, reading nothing (a WikiText
    folder without the file of a split it would read); the synthetic kinds are built, so they are
    always there. Returns a line to say aloud where a model would train on an evaluation split: a
    WikiText-2 folder as shipped, without a training file (the training protocol then trains on
    its test split: ``protocols.training.open_corpus``), or ``splits`` asking for it; else None."""
    if kind.startswith("wikitext"):
        folder = wikitext_folder(data_dir(path, kind), kind)
        asked = dict(splits) if isinstance(splits, dict) else {"train": "train", "valid": "valid"}
        fallback = splits is None and not _has_split(folder, "train")
        if fallback:
            asked["train"] = "test"
        for split, file_split in asked.items():
            if not _has_split(folder, file_split):
                names = " or ".join(WIKITEXT_FILES.get(file_split, (f"{file_split}.txt",)))
                raise DataError(f"{kind}: split {split!r} has no file in {folder} (looked for {names}); {DOWNLOAD_HINT}")
        if fallback:
            return (
                f"{kind}: {folder} has no training split, so the models train on its test split and are "
                f"evaluated on valid; for a training split, {DOWNLOAD_HINT}"
            )
        if asked.get("train") in ("test", "valid"):
            return f"{kind}: training on the {asked['train']} split of {folder} (splits train: {asked['train']}), not on a training split"
    elif kind == "text":
        text_files(path, splits)
    return None


def _has_split(folder: Path, file_split: str) -> bool:
    names = WIKITEXT_FILES.get(file_split, (f"wiki.{file_split}.tokens", f"{file_split}.txt"))
    return any(source_file(folder / n) for n in names)
