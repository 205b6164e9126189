"""Fetching WikiText-103 into a data folder (the one corpus too large to ship or commit): Salesforce's
``wikitext-103-v1.zip`` (Merity et al. 2016, CC BY-SA), checked against the SHA-256 published with
the Hugging Face ``wikitext`` dataset (torchtext's MD5 9ddaacaf6af0710eda8c456decff7832 names it too).
"""

from __future__ import annotations

import errno
import hashlib
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
import zipfile
from dataclasses import dataclass, replace
from pathlib import Path

from posbench.data.corpus import DataError

WIKITEXT103_URL = "https://s3.amazonaws.com/research.metamind.io/wikitext/wikitext-103-v1.zip"
# Tried in order; the same archive (same SHA-256) from each. The second is the dataset author's
# own host. More can be given with --url, or a copy fetched by hand with --archive.
WIKITEXT103_MIRRORS = (
    WIKITEXT103_URL,
    "https://wikitext.smerity.com/wikitext-103-v1.zip",
)
WIKITEXT103_SHA256 = "242ba0f20b329cfdf1ccc61e9e9e5b59becf189db7f7a81cd2a0e2fc31539590"
WIKITEXT103_BYTES = 190_229_076
SPLIT_FILES = ("wiki.train.tokens", "wiki.valid.tokens", "wiki.test.tokens")


def _log(quiet: bool, msg: str) -> None:
    if not quiet:
        print(msg, file=sys.stderr)


# Bounds of one source: a server that trickles a byte every few seconds never trips a socket
# timeout, and ``file:///dev/zero`` never ends, so every download has a deadline and a size cap.
# A read that waits STALL_S fails (the socket's timeout), and so does a window of WINDOW_S that
# brought fewer than WINDOW_BYTES (a trickle); each window is judged at the first read after it
# ends, and reads come at least every STALL_S, so a source is cut within WINDOW_S + STALL_S (25 s)
# of going silent or trickling. Once STALL_S have passed, a source whose rate could not finish the
# archive within the deadline fails too.
DEADLINE_S = 3600.0
STALL_S = 15.0
WINDOW_S = 10.0
WINDOW_BYTES = 64 * 1024  # 6.5 KiB/s: a tenth of the rate that finishes the archive in the hour
MAX_BYTES = 2 * WIKITEXT103_BYTES
SCHEMES = ("https", "http", "file")


@dataclass(frozen=True)
class Limits:
    """The bounds of one source (the module's constants above; tests shorten them)."""

    stall_s: float
    window_s: float
    window_bytes: int
    deadline_s: float
    max_bytes: int


def limits(**changes) -> Limits:
    """The module's limits as they stand now, with ``changes`` (``stall_s=0.5``...)."""
    return replace(Limits(STALL_S, WINDOW_S, WINDOW_BYTES, DEADLINE_S, MAX_BYTES), **changes)


def check_url(url: str) -> str:
    """``url`` when it can be fetched (a scheme of ``SCHEMES`` and a place), else a DataError line."""
    parts = urllib.parse.urlsplit(url.strip()) if isinstance(url, str) else None
    if parts is None or parts.scheme not in SCHEMES or not (parts.netloc or parts.path):
        raise DataError(
            f"download: --url {url!r} is not a URL posbench fetches; allowed: {', '.join(s + '://...' for s in SCHEMES)}"
        )
    return url.strip()


def _too_slow(url: str, size: int, total: int, elapsed: float, deadline_s: float) -> str | None:
    """Why a source whose average rate cannot finish within ``deadline_s`` is given up, or None."""
    expected = total or WIKITEXT103_BYTES
    rate = size / elapsed
    if rate > 0 and elapsed + (expected - size) / rate <= deadline_s:
        return None
    return (
        f"download: {url} sends {rate / 1024:.1f} KiB/s ({size} bytes in {elapsed:.0f} s): too slow to "
        f"finish {expected} bytes within {deadline_s:.0f} s; stopped"
    )


class _Progress:
    """The bytes of the current window: a window that ends with fewer than ``window_bytes`` is a
    trickle (one line naming the URL and what came)."""

    def __init__(self, url: str, bound: Limits, now: float):
        self.url, self.bound = url, bound
        self.start, self.bytes = now, 0

    def add(self, n: int, size: int, now: float) -> None:
        self.bytes += n
        if now - self.start < self.bound.window_s:
            return
        if self.bytes < self.bound.window_bytes:
            raise DataError(
                f"download: {self.url} sent {self.bytes} bytes in {now - self.start:.1f} s (fewer than "
                f"{self.bound.window_bytes} per {self.bound.window_s:g} s; {size} bytes so far); stopped"
            )
        self.start, self.bytes = now, 0


def _fetch(url: str, dest: Path, timeout: float, quiet: bool, bound: Limits | None = None) -> tuple[str, int]:
    """Stream ``url`` into ``dest``; returns (sha256 hex, bytes). Network failures, a source that
    breaks a bound of ``bound`` (default ``limits()``: silent for ``stall_s``, fewer than
    ``window_bytes`` in a window, past ``deadline_s``, more than ``max_bytes``, too slow to finish),
    and a full disk -> DataError; whatever ends the fetch (Ctrl-C too) removes the partial file."""
    bound = bound or limits()
    h, size = hashlib.sha256(), 0
    silence = min(timeout, bound.stall_s)
    started = time.monotonic()
    try:
        with urllib.request.urlopen(url, timeout=silence) as resp, open(dest, "wb") as out:
            total = int(resp.headers.get("Content-Length") or 0)
            if total > bound.max_bytes:
                raise DataError(f"download: {url} is {total} bytes, more than the {bound.max_bytes} allowed")
            next_report = 0.0
            progress = _Progress(url, bound, time.monotonic())
            read = getattr(resp, "read1", resp.read)  # what has arrived, not a full MiB: a slow source still checks the clock
            while block := read(1 << 20):
                out.write(block)
                h.update(block)
                size += len(block)
                if size > bound.max_bytes:
                    raise DataError(
                        f"download: {url} sent more than {bound.max_bytes} bytes (the archive is {WIKITEXT103_BYTES}); stopped"
                    )
                now = time.monotonic()
                elapsed = now - started
                if elapsed > bound.deadline_s:
                    raise DataError(f"download: {url} took longer than {bound.deadline_s:.0f} s ({size} bytes so far); stopped")
                progress.add(len(block), size, now)
                slow = _too_slow(url, size, total, elapsed, bound.deadline_s) if elapsed > bound.stall_s else None
                if slow:
                    raise DataError(slow)
                if total and size / total >= next_report:
                    _log(quiet, f"download: {size / 2**20:.0f} / {total / 2**20:.0f} MiB")
                    next_report += 0.1
    except urllib.error.HTTPError as e:
        dest.unlink(missing_ok=True)
        raise DataError(f"download failed: HTTP {e.code} {e.reason} for {url}") from None
    except DataError:  # a ValueError too: our own line, not "cannot reach"
        dest.unlink(missing_ok=True)
        raise
    except (urllib.error.URLError, OSError, ValueError) as e:
        dest.unlink(missing_ok=True)
        if isinstance(e, TimeoutError):  # the socket's own timeout after connecting: the source went silent
            raise DataError(
                f"download: {url} sent nothing for {silence:g} s ({size} bytes so far); stopped, the partial file was removed"
            ) from None
        if getattr(e, "errno", None) in (errno.ENOSPC, errno.EDQUOT):
            raise DataError(
                f"download: no space left on {dest.parent} after {size} bytes of {url}; the "
                "partial file was removed (free space there, or pass --data another folder)"
            ) from None
        reason = getattr(e, "reason", e)
        raise DataError(
            f"download failed: cannot reach {url} ({reason}); are you offline? Fetch the zip by "
            f"hand and unzip its wiki.*.tokens into {dest.parent}"
        ) from None
    except BaseException:  # our own DataError, Ctrl-C, SIGTERM: no partial file stays behind
        dest.unlink(missing_ok=True)
        raise
    return h.hexdigest(), size


def _extract(archive: Path, folder: Path) -> None:
    """Write the three split files (by base name, so no archive path escapes ``folder``)."""
    try:
        with zipfile.ZipFile(archive) as zf:
            members = {Path(n).name: n for n in zf.namelist() if Path(n).name in SPLIT_FILES}
            missing = [f for f in SPLIT_FILES if f not in members]
            if missing:
                raise DataError(f"download: {archive.name} lacks {', '.join(missing)}")
            for name, member in members.items():
                tmp = folder / (name + ".part")
                with zf.open(member) as src, open(tmp, "wb") as out:
                    while block := src.read(1 << 20):
                        out.write(block)
                tmp.replace(folder / name)  # whole files only: a crash leaves no truncated split
    except zipfile.BadZipFile as e:
        raise DataError(f"download: {archive} is not a valid zip ({e})") from None


def _sha256_file(path: Path) -> tuple[str, int]:
    h, size = hashlib.sha256(), 0
    try:
        with open(path, "rb") as fh:
            while block := fh.read(1 << 20):
                h.update(block)
                size += len(block)
    except OSError as e:
        raise DataError(f"download: cannot read {path}: {e.strerror or e}") from None
    return h.hexdigest(), size


def _check(digest: str, size: int, sha256: str | None, source: str) -> None:
    if sha256 is not None and digest != sha256.lower():
        raise DataError(f"download: checksum mismatch for {source}: expected sha256 {sha256}, got {digest} ({size} bytes)")


def _target_folder(dest) -> Path:
    """``dest/wikitext-103``; a DataError when ``dest`` (or that folder) is an existing file."""
    dest = Path(dest).expanduser()
    for path in (dest, dest / "wikitext-103"):
        if path.exists() and not path.is_dir():
            raise DataError(f"download: --data {dest}: {path} is a file, not a folder; allowed: a folder (created when missing)")
    return dest / "wikitext-103"


def download_wikitext103(
    dest,
    url: str | None = None,
    sha256: str | None = WIKITEXT103_SHA256,
    *,
    urls: list[str] | None = None,
    archive: str | Path | None = None,
    timeout: float = 60.0,
    quiet: bool = False,
) -> Path:
    """Download and unpack WikiText-103 into ``dest/wikitext-103/`` (nothing to do when its three
    ``wiki.*.tokens`` are there); returns that folder. Sources, first that works: ``archive`` (left
    in place), ``url``/``urls``, then ``WIKITEXT103_MIRRORS``; each is checked against ``sha256``
    (None skips it), a mismatch deleted. A failure is one DataError naming every source and why,
    leaving no folder it created."""
    folder = _target_folder(dest)
    if all((folder / f).is_file() for f in SPLIT_FILES):
        _log(quiet, f"download: WikiText-103 already in {folder}")
        return folder
    created = [p for p in (folder.parent, folder) if not p.exists()]  # removed again on failure
    try:
        try:
            folder.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise DataError(f"download: cannot create {folder}: {e.strerror or e}") from None
        if archive is not None:
            archive = Path(archive).expanduser()
            if not archive.is_file():
                raise DataError(f"download: --archive {archive}: no such file; allowed: a downloaded wikitext-103-v1.zip")
            digest, size = _sha256_file(archive)
            _log(quiet, f"download: {archive}: {size} bytes, sha256 {digest}")
            _check(digest, size, sha256, str(archive))
            _extract(archive, folder)
            return folder
        given = ([url] if url is not None else []) + list(urls or [])
        sources = [check_url(u) for u in given] or list(WIKITEXT103_MIRRORS)
        failures = []
        for source in sources:
            target = folder / ((Path(urllib.parse.urlsplit(source).path).name or "wikitext-103-v1.zip") + ".part")
            _log(
                quiet,
                f"download: {source} -> {target} (given up when silent for {STALL_S:g} s, or too slow to finish "
                f"within {DEADLINE_S / 3600:g} h, or when {WINDOW_S:g} s bring less than {WINDOW_BYTES // 1024} KiB; "
                "Ctrl-C stops it)",
            )
            try:
                digest, size = _fetch(source, target, timeout, quiet)
                _log(quiet, f"download: {size} bytes, sha256 {digest}")
                _check(digest, size, sha256, source)
            except DataError as e:
                target.unlink(missing_ok=True)
                failures.append(str(e) + ("; the file was removed" if "checksum" in str(e) else ""))
                continue
            _extract(target, folder)
            target.unlink(missing_ok=True)
            return folder
        if len(failures) == 1:
            raise DataError(failures[0])
        raise DataError(
            f"download failed from every source ({len(failures)}): "
            + "; ".join(failures)
            + "; fetch the zip by hand and pass --archive FILE"
        )
    except BaseException:
        for path in reversed(created):  # only folders this call made, and only when empty
            try:
                path.rmdir()
            except OSError:
                pass
        raise
