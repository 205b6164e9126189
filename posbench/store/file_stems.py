"""File name stems from row text (``rows/<unit>.jsonl``, report files): safe, and two names that
differ only in what was dropped stay two files (a short hash of the raw text is appended)."""

from __future__ import annotations

import hashlib

MAX_STEM = 100  # characters of a name before its hash; file names stay well under 255 bytes


def short_hash(text: str) -> str:
    """Eight hex digits of a SHA-1 of ``text``: the same text, the same hash, on every machine."""
    return hashlib.sha1(str(text).encode("utf-8", "surrogatepass")).hexdigest()[:8]


def file_stem(text: str) -> str:
    """A file name stem for ``text``: ASCII letters, digits, ``_``, ``-`` and ``.`` kept (no leading
    dot), anything else as ``-``; when anything changed, a hash of the raw text is appended, so two
    names that differ only in what was dropped (``a/b``, ``a b``) stay two files."""
    text = str(text)
    out = "".join(ch if ch.isascii() and (ch.isalnum() or ch in "_-.") else "-" for ch in text).lstrip(".")
    if out == text and 0 < len(out) <= MAX_STEM:
        return out
    return "-".join(p for p in (out[:MAX_STEM].strip("-."), short_hash(text)) if p)
