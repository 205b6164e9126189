"""Every download is bounded (deadline, size cap, fetchable URL) and leaves no partial file,
whatever ends it (issue 26: hangs and unbounded memory)."""

import time

import pytest

from posbench.data import download
from posbench.data.corpus import DataError
from tests.helpers.http_servers import Trickle, serving


@pytest.fixture
def trickle():
    """A localhost server that sends one byte every 0.05 s, forever (a socket timeout never trips)."""
    with serving(Trickle) as url:
        yield url


def test_a_trickling_server_meets_the_deadline(trickle, tmp_path):
    dest = tmp_path / "w.zip.part"
    began = time.monotonic()
    with pytest.raises(DataError, match=r"took longer than 1 s"):
        download._fetch(trickle, dest, timeout=5, quiet=True, deadline_s=1.0)
    assert time.monotonic() - began < 10
    assert not dest.exists()


def test_an_endless_source_meets_the_size_cap(tmp_path):
    dest = tmp_path / "zero.part"
    with pytest.raises(DataError, match=r"sent more than 3000000 bytes"):
        download._fetch("file:///dev/zero", dest, timeout=5, quiet=True, max_bytes=3_000_000)
    assert not dest.exists()


def test_the_default_cap_bounds_dev_zero_through_the_public_call(tmp_path, monkeypatch):
    monkeypatch.setattr(download, "MAX_BYTES", 2_000_000)
    monkeypatch.setattr(download._fetch, "__defaults__", (download.DEADLINE_S, 2_000_000))
    with pytest.raises(DataError, match="sent more than 2000000 bytes"):
        download.download_wikitext103(tmp_path / "d", url="file:///dev/zero", quiet=True)
    assert not (tmp_path / "d").exists()  # the folders it made are gone with the partial file


@pytest.mark.parametrize("url", ["", "   ", "ftp://example.org/w.zip", "not a url", "javascript:alert(1)"])
def test_a_url_posbench_does_not_fetch_is_one_line(url, tmp_path):
    with pytest.raises(DataError) as err:
        download.download_wikitext103(tmp_path / "d", url=url, quiet=True)
    assert "allowed: https://..." in str(err.value) and "\n" not in str(err.value)
    assert not (tmp_path / "d").exists()


def test_ctrl_c_leaves_no_partial_file(tmp_path, monkeypatch):
    dest = tmp_path / "zero.part"
    calls = {"n": 0}
    real = time.monotonic

    def interrupt():
        calls["n"] += 1
        if calls["n"] > 3:
            raise KeyboardInterrupt
        return real()

    monkeypatch.setattr(download.time, "monotonic", interrupt)
    with pytest.raises(KeyboardInterrupt):
        download._fetch("file:///dev/zero", dest, timeout=5, quiet=True)
    assert not dest.exists()
