"""Fetching WikiText-103 into a data folder (the one corpus too large to ship or commit).

The archive is Salesforce's ``wikitext-103-v1.zip`` (Merity et al. 2016, CC BY-SA). Its size and
SHA-256 are the ones published with the Hugging Face ``wikitext`` dataset; the MD5 that torchtext
uses (9ddaacaf6af0710eda8c456decff7832) names the same file.
"""
from __future__ import annotations

import hashlib
import sys
import urllib.error
import urllib.request
import zipfile
from pathlib import Path

from .data import DataError

WIKITEXT103_URL = "https://s3.amazonaws.com/research.metamind.io/wikitext/wikitext-103-v1.zip"
WIKITEXT103_SHA256 = "242ba0f20b329cfdf1ccc61e9e9e5b59becf189db7f7a81cd2a0e2fc31539590"
WIKITEXT103_BYTES = 190_229_076
SPLIT_FILES = ("wiki.train.tokens", "wiki.valid.tokens", "wiki.test.tokens")


def _log(quiet: bool, msg: str) -> None:
    if not quiet:
        print(msg, file=sys.stderr)


def _fetch(url: str, dest: Path, timeout: float, quiet: bool) -> tuple[str, int]:
    """Stream ``url`` into ``dest``; returns (sha256 hex, bytes). Network failures -> DataError."""
    h, size = hashlib.sha256(), 0
    try:
        with urllib.request.urlopen(url, timeout=timeout) as resp, open(dest, "wb") as out:
            total = int(resp.headers.get("Content-Length") or 0)
            next_report = 0.0
            for block in iter(lambda: resp.read(1 << 20), b""):
                out.write(block)
                h.update(block)
                size += len(block)
                if total and size / total >= next_report:
                    _log(quiet, f"download: {size / 2**20:.0f} / {total / 2**20:.0f} MiB")
                    next_report += 0.1
    except urllib.error.HTTPError as e:
        dest.unlink(missing_ok=True)
        raise DataError(f"download failed: HTTP {e.code} {e.reason} for {url}") from None
    except (urllib.error.URLError, OSError) as e:
        dest.unlink(missing_ok=True)
        reason = getattr(e, "reason", e)
        raise DataError(
            f"download failed: cannot reach {url} ({reason}); are you offline? Fetch the zip by "
            f"hand and unzip its wiki.*.tokens into {dest.parent}"
        ) from None
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


def download_wikitext103(
    dest,
    url: str = WIKITEXT103_URL,
    sha256: str | None = WIKITEXT103_SHA256,
    *,
    timeout: float = 60.0,
    keep_archive: bool = False,
    quiet: bool = False,
) -> Path:
    """Download and unpack WikiText-103 into ``dest/wikitext-103/``; returns that folder.

    Skips the download when all three ``wiki.*.tokens`` files are already there. The archive's
    SHA-256 is checked against ``sha256`` (pass None to skip the check; the computed value is
    printed either way). Offline, HTTP errors and a checksum mismatch raise a one-line DataError,
    and a mismatching archive is deleted.
    """
    folder = Path(dest).expanduser() / "wikitext-103"
    if all((folder / f).is_file() for f in SPLIT_FILES):
        _log(quiet, f"download: WikiText-103 already in {folder}")
        return folder
    folder.mkdir(parents=True, exist_ok=True)
    archive = folder / Path(url.split("?")[0]).name
    _log(quiet, f"download: {url} -> {archive}")
    digest, size = _fetch(url, archive, timeout, quiet)
    _log(quiet, f"download: {size} bytes, sha256 {digest}")
    if sha256 is not None and digest != sha256.lower():
        archive.unlink(missing_ok=True)
        raise DataError(
            f"download: checksum mismatch for {url}: expected sha256 {sha256}, got {digest} "
            f"({size} bytes); the file was removed"
        )
    _extract(archive, folder)
    if not keep_archive:
        archive.unlink(missing_ok=True)
    return folder
