"""A download fails after a stretch without progress, or on a rate too slow to finish, and a full
disk says so and leaves no partial file (posbench/data/download.py; issue 44, left from round 3).
Local HTTP servers started by the test trickle or go silent; the limits are made short."""
import http.server
import os
import threading
import time

import pytest

from posbench.data import download
from posbench.data.corpus import DataError


def serve(handler):
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    httpd.daemon_threads = True
    threading.Thread(target=httpd.serve_forever, args=(0.05,), daemon=True).start()
    return httpd, f"http://127.0.0.1:{httpd.server_address[1]}/w.zip"


class Quiet(http.server.BaseHTTPRequestHandler):
    def log_message(self, *a):
        pass


class Trickle(Quiet):
    """One byte every 0.05 s for a long time: never silent, far too slow."""

    def do_GET(self):
        self.send_response(200)
        self.end_headers()
        try:
            for _ in range(2000):
                self.wfile.write(b"x")
                self.wfile.flush()
                time.sleep(0.05)
        except (BrokenPipeError, ConnectionResetError):
            pass


class Silent(Quiet):
    """A few bytes, then nothing (a connection that stays open)."""

    def do_GET(self):
        self.send_response(200)
        self.send_header("Content-Length", str(download.WIKITEXT103_BYTES))
        self.end_headers()
        self.wfile.write(b"PK" * 10)
        self.wfile.flush()
        time.sleep(20)


@pytest.fixture
def server(request):
    httpd, url = serve(request.param)
    yield url
    httpd.shutdown()
    httpd.server_close()


@pytest.mark.parametrize("server", [Silent], indirect=True)
def test_a_silent_server_fails_after_the_stall_limit(server, tmp_path):
    dest = tmp_path / "w.zip.part"
    started = time.monotonic()
    with pytest.raises(DataError, match=r"sent nothing for 0.5 s \(20 bytes so far\); stopped, the partial file"):
        download._fetch(server, dest, timeout=30, quiet=True, stall_s=0.5)
    assert time.monotonic() - started < 10 and not dest.exists()


@pytest.mark.parametrize("server", [Trickle], indirect=True)
def test_a_trickle_too_slow_to_finish_fails_once_the_stall_limit_passed(server, tmp_path):
    dest = tmp_path / "w.zip.part"
    started = time.monotonic()
    with pytest.raises(DataError, match=r"KiB/s .*too slow to finish 190229076 bytes within 3600 s; stopped"):
        download._fetch(server, dest, timeout=30, quiet=True, stall_s=0.5)
    assert time.monotonic() - started < 10 and not dest.exists()


@pytest.mark.parametrize("server", [Silent], indirect=True)
def test_the_public_call_uses_the_stall_limit_and_leaves_nothing(server, tmp_path, monkeypatch):
    monkeypatch.setattr(download, "STALL_S", 0.5)
    with pytest.raises(DataError, match=r"sent nothing for 0.5 s"):
        download.download_wikitext103(tmp_path / "data", url=server, quiet=True)
    assert not (tmp_path / "data").exists()


def test_a_full_disk_says_so_and_removes_the_partial_file(tmp_path):
    if not os.path.exists("/dev/full"):
        pytest.skip("no /dev/full here")
    dest = tmp_path / "w.zip.part"
    os.symlink("/dev/full", dest)  # every write fails with ENOSPC, as on a full disk
    with pytest.raises(DataError) as info:
        download._fetch("file:///dev/zero", dest, timeout=5, quiet=True)
    assert str(info.value).startswith(f"download: no space left on {tmp_path} after 0 bytes of file:///dev/zero; "
                                      "the partial file was removed")
    assert "offline" not in str(info.value) and not os.path.lexists(dest)
