"""A tiny WikiText-103 archive with the real layout (wikitext-103/wiki.<split>.tokens), the file
the download tests serve from the localhost ``server`` fixture (tests/conftest.py)."""

from __future__ import annotations

import io
import zipfile


def wikitext_zip_bytes() -> bytes:
    """The bytes of the archive: each split holds " = <split> = " and one line of text. The same
    bytes at every call (a fixed date in each entry): the server fixture and a test's checksum
    each build them, and a clock crossing zip's 2-second step between the two made them differ."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        for split in ("train", "valid", "test"):
            entry = zipfile.ZipInfo(f"wikitext-103/wiki.{split}.tokens", date_time=(2020, 1, 1, 0, 0, 0))
            zf.writestr(entry, f" = {split} = \n the {split} text . \n")
    return buf.getvalue()
