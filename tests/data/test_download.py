"""The WikiText-103 download from the command line (issue 13's hardening): a file where the folder
should be, an unreachable source, mirrors tried in order, --url and --archive; 127.0.0.1 only."""

import pytest

from posbench.cli import app as cli
from tests.helpers.archives import wikitext_zip_bytes  # served by the `server` fixture (tests/conftest.py)


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
