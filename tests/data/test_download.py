"""The WikiText-103 download from the command line (issue 13's hardening): a file where the folder
should be, an unreachable source, mirrors tried in order, --url and --archive; 127.0.0.1 only."""

import os
import time

import pytest

from posbench.cli import app as cli
from posbench.data import download
from posbench.data.corpus import DataError
from posbench.data.download import DEADLINE_S, STALL_S, download_wikitext103
from tests.helpers.archives import wikitext_zip_bytes  # served by the `server` fixture (tests/conftest.py)
from tests.helpers.http_servers import BurstThenTrickle, Mute, Silent, Trickle, serving


def test_download_into_a_file_is_one_line(tmp_path, capsys):
    target = tmp_path / "data"
    target.write_text("a file")
    assert cli.main(["download", "wikitext-103", "--data", str(target)]) == cli.EXIT_USAGE
    err = capsys.readouterr().err
    assert (
        err == f"DataError: download: --data {target}: {target} is a file, not a folder; allowed: a folder "
        "(created when missing)\n"
    )


def test_offline_download_leaves_no_empty_folder(tmp_path, capsys):
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    data = tmp_path / "new" / "data"
    assert (
        cli.main(["download", "wikitext-103", "--data", str(data), "--url", f"http://127.0.0.1:{port}/w.zip"]) == cli.EXIT_USAGE
    )
    assert "cannot reach" in capsys.readouterr().err
    assert not data.exists()


def test_download_tries_mirrors_in_order(server, tmp_path, monkeypatch):
    import hashlib

    from posbench.data import download

    assert download.WIKITEXT103_MIRRORS[0] == download.WIKITEXT103_URL and len(download.WIKITEXT103_MIRRORS) > 1
    digest = hashlib.sha256(wikitext_zip_bytes()).hexdigest()
    monkeypatch.setattr(download, "WIKITEXT103_MIRRORS", (f"{server}/gone.zip", f"{server}/wikitext-103-v1.zip"))
    folder = download.download_wikitext103(tmp_path / "d", sha256=digest, quiet=True)
    assert sorted(p.name for p in folder.iterdir()) == ["wiki.test.tokens", "wiki.train.tokens", "wiki.valid.tokens"]
    # Every mirror failing: one line naming each source and why, and nothing left behind.
    with pytest.raises(download.DataError) as info:
        download.download_wikitext103(
            tmp_path / "e", urls=[f"{server}/gone.zip", f"{server}/wikitext-103-v1.zip"], sha256="0" * 64, quiet=True
        )
    msg = str(info.value)
    assert msg.startswith("download failed from every source (2): download failed: HTTP 404")
    assert "checksum mismatch" in msg and "--archive FILE" in msg and "\n" not in msg
    assert not (tmp_path / "e").exists()


def test_download_url_and_archive_from_the_command_line(server, tmp_path, capsys, monkeypatch):
    import hashlib

    from posbench.data import download

    monkeypatch.setattr(download, "WIKITEXT103_SHA256", hashlib.sha256(wikitext_zip_bytes()).hexdigest())
    monkeypatch.setattr(
        download.download_wikitext103, "__defaults__", (None, download.WIKITEXT103_SHA256)
    )  # the CLI uses the default checksum
    assert cli.main(["download", "wikitext-103", "--data", str(tmp_path / "a"), "--url", f"{server}/wikitext-103-v1.zip"]) == 0
    assert (tmp_path / "a" / "wikitext-103" / "wiki.valid.tokens").is_file()
    archive = tmp_path / "wikitext-103-v1.zip"
    archive.write_bytes(wikitext_zip_bytes())
    assert cli.main(["download", "wikitext-103", "--data", str(tmp_path / "b"), "--archive", str(archive)]) == 0
    assert (tmp_path / "b" / "wikitext-103" / "wiki.test.tokens").is_file() and archive.exists()
    archive.write_bytes(wikitext_zip_bytes() + b"tampered")
    capsys.readouterr()
    assert cli.main(["download", "wikitext-103", "--data", str(tmp_path / "c"), "--archive", str(archive)]) == cli.EXIT_USAGE
    last = capsys.readouterr().err.splitlines()[-1]  # after the progress lines
    assert last.startswith(f"DataError: download: checksum mismatch for {archive}: expected sha256")
    assert not (tmp_path / "c").exists() and archive.exists()


# --------------------------------------------------------------------------------------------------
# Every download is bounded (deadline, size cap, fetchable URL) and leaves no partial file,
# whatever ends it (issue 26: hangs and unbounded memory).


@pytest.fixture
def trickle():
    """A localhost server that sends one byte every 0.05 s, forever (a socket timeout never trips)."""
    with serving(Trickle) as url:
        yield url


def test_a_trickling_server_meets_the_deadline(trickle, tmp_path):
    dest = tmp_path / "w.zip.part"
    began = time.monotonic()
    with pytest.raises(DataError, match=r"took longer than 1 s"):
        download._fetch(trickle, dest, timeout=5, quiet=True, bound=download.limits(deadline_s=1.0))
    assert time.monotonic() - began < 10
    assert not dest.exists()


def test_an_endless_source_meets_the_size_cap(tmp_path):
    dest = tmp_path / "zero.part"
    with pytest.raises(DataError, match=r"sent more than 3000000 bytes"):
        download._fetch("file:///dev/zero", dest, timeout=5, quiet=True, bound=download.limits(max_bytes=3_000_000))
    assert not dest.exists()


def test_the_default_cap_bounds_dev_zero_through_the_public_call(tmp_path, monkeypatch):
    monkeypatch.setattr(download, "MAX_BYTES", 2_000_000)
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


# --------------------------------------------------------------------------------------------------
# Hardening round 5 (issue 56): the download's silence limit is stated where a user waits: in
# ``download --help`` and on the line each source starts with.


def test_the_help_states_the_silence_limit(capsys):
    with pytest.raises(SystemExit):
        cli.main(["download", "--help"])
    assert f"a source silent for {STALL_S:g} s, or too slow to finish within an hour" in capsys.readouterr().out
    assert DEADLINE_S == 3600


def test_each_source_starts_with_the_limit(tmp_path, capsys):
    (tmp_path / "not-a-zip").write_bytes(b"x" * 10)
    with pytest.raises(DataError):
        download_wikitext103(tmp_path / "data", url=(tmp_path / "not-a-zip").as_uri())
    assert f"(given up when silent for {STALL_S:g} s, or too slow to finish within 1 h" in capsys.readouterr().err


# --------------------------------------------------------------------------------------------------
# A download fails after a stretch without progress, or on a rate too slow to finish, and a full
# disk says so and leaves no partial file (posbench/data/download.py; issue 44, left from round 3).
# Local HTTP servers started by the test trickle or go silent; the limits are made short.


@pytest.fixture
def silent():
    with serving(Silent) as url:
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
        download._fetch(url, dest, timeout=30, quiet=True, bound=download.limits(stall_s=0.5))
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


# --------------------------------------------------------------------------------------------------
# Hardening round 6 (issue 67, left from round 3): a source that goes silent or trickles is cut
# within 30 s: a read waits at most STALL_S, and a window of WINDOW_S that brings fewer than
# WINDOW_BYTES fails, whatever the average rate so far. The servers' pace and the limits are
# scaled by SCALE so each test takes about a second.

SCALE = 0.05  # a byte every 0.05 s stands for a byte every second


def test_the_default_limits_cut_a_silent_or_trickling_source_within_30_s():
    # silence: the socket's timeout; a trickle: its window is judged at the first read after the
    # window ends, and a read comes within STALL_S or the source counts as silent
    assert download.STALL_S + download.WINDOW_S <= 30
    assert download.WINDOW_BYTES * 3600 / download.WINDOW_S < download.WIKITEXT103_BYTES  # a trickle could never finish


@pytest.mark.parametrize(
    "handler, message",
    [
        (Mute, r"^download: http://\S+ sent nothing for 0.75 s \(0 bytes so far\); stopped"),
        (Trickle, r"^download: http://\S+ sent \d+ bytes in [\d.]+ s \(fewer than 65536 per 0.5 s; \d+ bytes so far\); stopped$"),
        (
            BurstThenTrickle,
            r"^download: http://\S+ sent \d+ bytes in [\d.]+ s \(fewer than 65536 per 0.5 s; 2097\d+ bytes so far\)",
        ),
    ],
    ids=["silent-after-headers", "a-byte-a-second", "burst-then-trickle"],
)
def test_a_silent_or_trickling_source_is_cut_in_one_line(tmp_path, handler, message):
    bound = download.limits(stall_s=download.STALL_S * SCALE, window_s=download.WINDOW_S * SCALE)
    dest = tmp_path / "w.zip.part"
    with serving(handler) as url:
        started = time.monotonic()
        with pytest.raises(DataError, match=message) as info:
            download._fetch(url, dest, timeout=60, quiet=True, bound=bound)
        took = time.monotonic() - started
    assert url in str(info.value) and "\n" not in str(info.value) and not dest.exists()
    assert took < 30 * SCALE + 2  # 30 s scaled, with room for a busy machine


def test_the_public_call_cuts_a_trickle_with_the_module_limits(tmp_path, monkeypatch):
    monkeypatch.setattr(download, "WINDOW_S", 0.5)
    with serving(BurstThenTrickle) as url, pytest.raises(DataError, match=r"fewer than 65536 per 0.5 s"):
        download.download_wikitext103(tmp_path / "data", url=url, quiet=True)
    assert not (tmp_path / "data").exists()
