"""Writing files so that a reader sees the whole file or none, and keeping a run folder's folders
free of links; failing in one line.

Every file a run or a report writes whole (``run.json``, ``env.json``, tables, charts) goes through
``atomic_write_bytes`` (``atomic_write_text``, ``write_figure``): the bytes are written to a temporary
file in the same folder, fsynced, then renamed over the target (a link there is replaced, never
written through), so a crash or a full disk never leaves a half-written or empty file.
Files get the mode ``open()`` would give them (``new_file_mode``: 0644 under umask 022), not
``mkstemp``'s 0600: colleagues read a shared results folder.
"""

from __future__ import annotations

import os
import re
import stat
import tempfile
from pathlib import Path

from posbench.core.nofollow import UnsafeFile, file_kind, open_nofollow, read_regular
from posbench.core.outcome import PosbenchError

# Imported from here by earlier code (the names of ``posbench.core.nofollow``).
__all__ = [
    "WriteError",
    "new_file_mode",
    "current_umask",
    "atomic_write_text",
    "atomic_write_bytes",
    "write_figure",
    "open_lock",
    "refuse_links",
    "own_folder",
    "UnsafeFile",
    "file_kind",
    "open_nofollow",
    "read_regular",
]


class WriteError(PosbenchError, OSError):
    """A file could not be written; the message is one line naming the file and the reason."""


# Suite names, run ids and the folders made of them under results/: one plain path component,
# never ".", "..", a hidden name or anything with a separator (the suite schema's pattern too).
PLAIN_NAME = r"^[A-Za-z0-9_][A-Za-z0-9_.-]*$"
PLAIN_NAME_MAX = 100
PLAIN_NAME_ALLOWED = "letters, digits, _ . - (not starting with . or -), at most 100 characters"


def is_plain_name(value) -> bool:
    """Whether ``value`` is a string that ``PLAIN_NAME`` allows as a folder name."""
    return isinstance(value, str) and len(value) <= PLAIN_NAME_MAX and re.fullmatch(PLAIN_NAME, value) is not None


def new_file_mode() -> int:
    """0o666 less this process's umask: the mode ``open()`` gives a new file (0o644 under 022)."""
    return 0o666 & ~current_umask()


def current_umask() -> int:
    """The process's umask, read from ``/proc/self/status`` (Linux); elsewhere set and restored,
    which another thread creating a file at that instant could see."""
    try:
        with open("/proc/self/status", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def atomic_write_text(path: str | os.PathLike, text: str) -> Path:
    """Write ``text`` (UTF-8) to ``path`` atomically; raise ``WriteError`` with a one-line reason."""
    return atomic_write_bytes(path, text.encode("utf-8"))


def write_figure(fig, path: str | os.PathLike, **savefig_kwargs) -> Path:
    """A matplotlib figure written to ``path`` (its format from the suffix) as every run file is:
    rendered in memory, then ``atomic_write_bytes`` (a planted link there is replaced, never
    written through)."""
    import io

    path = Path(path)
    buffer = io.BytesIO()
    fig.savefig(buffer, format=path.suffix.lstrip(".") or "png", **savefig_kwargs)
    return atomic_write_bytes(path, buffer.getvalue())


def open_lock(path: str | os.PathLike) -> int:
    """The descriptor of lock file ``path`` (created when missing) for ``fcntl.flock``, opened
    without following a link (a planted link would create its target outside the folder)."""
    try:
        return open_nofollow(path, os.O_RDWR | os.O_CREAT)
    except UnsafeFile:
        raise
    except OSError as exc:
        raise WriteError(f"cannot write {path}: {exc.strerror or exc}") from None


def atomic_write_bytes(path: str | os.PathLike, data: bytes) -> Path:
    """Write ``data`` to ``path`` atomically: a temporary file in the same folder, fsynced, renamed
    over ``path`` (so a link at ``path`` is replaced, its target untouched); ``WriteError`` with a
    one-line reason. Every file a run or a report writes whole goes through here."""
    path = Path(path)
    tmp = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
        os.fchmod(fd, new_file_mode())  # mkstemp's 0600 would hide the file from the group
        with os.fdopen(fd, "wb") as f:
            f.write(data)
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


def refuse_links(folder: str | os.PathLike) -> None:
    """``UnsafeFile`` (one line) when ``folder`` is a symbolic link or holds one: files of a run
    folder are written in place, and a planted link would send a write outside ``results/``."""
    folder = Path(folder)
    if folder.is_symlink():
        raise UnsafeFile(
            f"{folder}: the run folder is a symbolic link; posbench does not follow links in a "
            "run folder (allowed: a real folder; remove the link or pick another --run-id)"
        )
    try:
        entries = sorted(os.scandir(folder), key=lambda e: e.name)
    except (FileNotFoundError, NotADirectoryError):
        return
    for entry in entries:
        if entry.is_symlink():
            raise UnsafeFile(
                f"{folder}: holds a symbolic link, {entry.name} -> {os.readlink(entry.path)}; "
                "posbench does not follow links in a run folder (allowed: regular files; remove the "
                "link or pick another --run-id)"
            )


def own_folder(path: str | os.PathLike) -> Path:
    """``path`` made (with its parents) and checked to be a real folder, not a link to one: the
    folders posbench writes into below a run folder (``checkpoints/``, ``cases/<name>/``) must
    not send a write outside it. ``UnsafeFile`` (one line) otherwise."""
    path = Path(path)
    try:
        path.mkdir(parents=True, exist_ok=True)
    except FileExistsError:
        pass  # a link or a file: named below
    mode = os.lstat(path).st_mode
    if stat.S_ISLNK(mode):
        raise UnsafeFile(
            f"{path} is a symbolic link; posbench does not follow links in a run folder (allowed: a real folder; remove the link)"
        )
    if not stat.S_ISDIR(mode):
        raise UnsafeFile(f"{path} is {file_kind(mode)}; allowed: a folder (remove it)")
    return path
