"""Writing files so that a reader sees the whole file or none, and failing in one line.

Every metadata file of a run (``run.json``, ``env.json``, tables) goes through
``atomic_write_text``: the text is written to a temporary file in the same folder, fsynced, then
renamed over the target, so a crash or a full disk never leaves a half-written or empty file.
"""
from __future__ import annotations

import os
import tempfile
from pathlib import Path

from posbench.core.outcome import PosbenchError


class WriteError(PosbenchError, OSError):
    """A file could not be written; the message is one line naming the file and the reason."""


def atomic_write_text(path: str | os.PathLike, text: str) -> Path:
    """Write ``text`` (UTF-8) to ``path`` atomically; raise ``WriteError`` with a one-line reason."""
    path = Path(path)
    tmp = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
        tmp = None
    except OSError as exc:
        raise WriteError(f"cannot write {path}: {exc.strerror or exc}") from exc
    finally:
        if tmp is not None:
            try:
                os.unlink(tmp)
            except OSError:
                pass
    return path
