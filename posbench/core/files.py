"""Writing files so that a reader sees the whole file or none, and failing in one line.

Every metadata file of a run (``run.json``, ``env.json``, tables) goes through
``atomic_write_text``: the text is written to a temporary file in the same folder, fsynced, then
renamed over the target, so a crash or a full disk never leaves a half-written or empty file.
Files get the mode ``open()`` would give them (``new_file_mode``: 0644 under umask 022), not
``mkstemp``'s 0600: colleagues read a shared results folder.
"""
from __future__ import annotations

import os
import stat
import tempfile
from pathlib import Path

from posbench.core.outcome import PosbenchError


class WriteError(PosbenchError, OSError):
    """A file could not be written; the message is one line naming the file and the reason."""


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
    path = Path(path)
    tmp = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
        os.fchmod(fd, new_file_mode())  # mkstemp's 0600 would hide the file from the group
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


class UnsafeFile(PosbenchError, OSError):
    """A file posbench will not read or write: a symbolic link, a FIFO or a device where a regular
    file belongs (following it could block, exhaust memory or write outside the folder)."""


_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_NONBLOCK = getattr(os, "O_NONBLOCK", 0)


def open_nofollow(path: str | os.PathLike, flags: int, mode: int = 0o666) -> int:
    """``os.open`` that never follows a symbolic link at ``path`` and accepts only a regular file
    there (a FIFO opens without blocking, then is refused): the descriptor, or ``UnsafeFile``. A
    file it creates gets ``mode`` less the umask, as ``open()``'s."""
    try:
        fd = os.open(path, flags | _NOFOLLOW | _NONBLOCK | os.O_CLOEXEC, mode)
    except OSError as exc:
        try:
            found = os.lstat(path).st_mode
        except OSError:
            raise exc from None  # the open's own error (no such file, no permission)
        if stat.S_ISLNK(found):
            raise UnsafeFile(f"{path} is a symbolic link; posbench does not follow links in a run folder "
                             "(allowed: a regular file; remove the link)") from None
        if not stat.S_ISREG(found):
            raise UnsafeFile(f"{path} is not a regular file ({file_kind(found)}); allowed: a regular file "
                             "(remove it)") from None
        raise exc from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise UnsafeFile(f"{path} is not a regular file ({file_kind(st.st_mode)}); allowed: a regular file "
                             "(remove it)")
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd


def file_kind(mode: int) -> str:
    """What a ``stat`` mode that is not a regular file is, in words, for one-line errors."""
    for test, name in ((stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
                       (stat.S_ISDIR, "a folder"), (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return name
    return "not a regular file"


def read_regular(path: str | os.PathLike, limit: int | None = None) -> bytes:
    """The bytes of the regular file at ``path``, read without following a link; a FIFO, a device
    or a link is ``UnsafeFile`` and a file over ``limit`` bytes too (nothing blocks, nothing
    unbounded is read). A missing file raises ``FileNotFoundError`` as ``open`` does."""
    fd = open_nofollow(path, os.O_RDONLY)
    with os.fdopen(fd, "rb") as fh:
        data = fh.read() if limit is None else fh.read(limit + 1)
    if limit is not None and len(data) > limit:
        raise UnsafeFile(f"{path}: larger than {limit} bytes; allowed: a file posbench wrote")
    return data


def refuse_links(folder: str | os.PathLike) -> None:
    """``UnsafeFile`` (one line) when ``folder`` is a symbolic link or holds one: files of a run
    folder are written in place, and a planted link would send a write outside ``results/``."""
    folder = Path(folder)
    if folder.is_symlink():
        raise UnsafeFile(f"{folder}: the run folder is a symbolic link; posbench does not follow links in a "
                         "run folder (allowed: a real folder; remove the link or pick another --run-id)")
    try:
        entries = sorted(os.scandir(folder), key=lambda e: e.name)
    except (FileNotFoundError, NotADirectoryError):
        return
    for entry in entries:
        if entry.is_symlink():
            raise UnsafeFile(f"{folder}: holds a symbolic link, {entry.name} -> {os.readlink(entry.path)}; "
                             "posbench does not follow links in a run folder (allowed: regular files; remove the "
                             "link or pick another --run-id)")


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
        raise UnsafeFile(f"{path} is a symbolic link; posbench does not follow links in a run folder "
                         "(allowed: a real folder; remove the link)")
    if not stat.S_ISDIR(mode):
        raise UnsafeFile(f"{path} is {file_kind(mode)}; allowed: a folder (remove it)")
    return path
