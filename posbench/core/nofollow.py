"""Opening a file that must be a regular file: never through a symbolic link, never a FIFO or a
device (``open_nofollow``, ``read_regular``); anything else is one line (``UnsafeFile``).
"""

from __future__ import annotations

import os
import stat

from posbench.core.outcome import PosbenchError


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
            raise UnsafeFile(
                f"{path} is a symbolic link; posbench does not follow links in a run folder "
                "(allowed: a regular file; remove the link)"
            ) from None
        if not stat.S_ISREG(found):
            raise UnsafeFile(f"{path} is not a regular file ({file_kind(found)}); allowed: a regular file (remove it)") from None
        raise exc from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise UnsafeFile(f"{path} is not a regular file ({file_kind(st.st_mode)}); allowed: a regular file (remove it)")
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd


def file_kind(mode: int) -> str:
    """What a ``stat`` mode that is not a regular file is, in words, for one-line errors."""
    for test, name in (
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISDIR, "a folder"),
        (stat.S_ISSOCK, "a socket"),
    ):
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
