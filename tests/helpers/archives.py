"""A tiny WikiText-103 archive with the real layout (wikitext-103/wiki.<split>.tokens), the file
the download tests serve from the localhost ``server`` fixture (tests/conftest.py)."""
from __future__ import annotations

import io
import zipfile


def wikitext_zip_bytes() -> bytes:
    """The bytes of the archive: each split holds " = <split> = " and one line of text."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        for split in ("train", "valid", "test"):
            zf.writestr(f"wikitext-103/wiki.{split}.tokens", f" = {split} = \n the {split} text . \n")
    return buf.getvalue()
