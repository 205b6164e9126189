"""A download fails after a stretch without progress, or on a rate too slow to finish, and a full
disk says so and leaves no partial file (posbench/data/download.py; issue 44, left from round 3).
Local HTTP servers started by the test trickle or go silent; the limits are made short."""

import os
import time

import pytest

from posbench.data import download
from posbench.data.corpus import DataError
from tests.helpers.http_servers import Silent, Trickle, serving


@pytest.fixture
def silent():
    with serving(Silent) as url:
        yield url


@pytest.fixture
def trickle():
    with serving(Trickle) as url:
        yield url


@pytest.mark.parametrize(
    "source, message",
    [
        ("silent", r"sent nothing for 0.5 s \(20 bytes so far\); stopped, the partial file was removed"),
        ("trickle", r"KiB/s .*too slow to finish 190229076 bytes within 3600 s; stopped"),  # a byte every 0.05 s
    ],
)
def test_a_silent_or_too_slow_source_fails_once_the_stall_limit_passed(request, tmp_path, source, message):
    url, dest = request.getfixturevalue(source), tmp_path / "w.zip.part"
    started = time.monotonic()
    with pytest.raises(DataError, match=message):
        download._fetch(url, dest, timeout=30, quiet=True, stall_s=0.5)
    assert time.monotonic() - started < 10 and not dest.exists()


def test_the_public_call_uses_the_stall_limit_and_leaves_nothing(silent, tmp_path, monkeypatch):
    monkeypatch.setattr(download, "STALL_S", 0.5)
    with pytest.raises(DataError, match=r"sent nothing for 0.5 s"):
        download.download_wikitext103(tmp_path / "data", url=silent, quiet=True)
    assert not (tmp_path / "data").exists()


def test_a_full_disk_says_so_and_removes_the_partial_file(tmp_path):
    if not os.path.exists("/dev/full"):
        pytest.skip("no /dev/full here")
    dest = tmp_path / "w.zip.part"
    os.symlink("/dev/full", dest)  # every write fails with ENOSPC, as on a full disk
    with pytest.raises(DataError) as info:
        download._fetch("file:///dev/zero", dest, timeout=5, quiet=True)
    assert str(info.value).startswith(
        f"download: no space left on {tmp_path} after 0 bytes of file:///dev/zero; the partial file was removed"
    )
    assert "offline" not in str(info.value) and not os.path.lexists(dest)
