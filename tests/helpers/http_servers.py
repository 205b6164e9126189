"""Local HTTP servers for download tests: ``serving(Handler)`` yields its URL, then stops it;
``Trickle`` sends a byte every 0.05 s, ``Silent`` a few bytes, then nothing, ``Mute`` its headers
and nothing, ``BurstThenTrickle`` 2 MiB at once, then a byte every 0.05 s."""

import contextlib
import http.server
import threading
import time


class Quiet(http.server.BaseHTTPRequestHandler):
    def log_message(self, *a):
        pass


class Trickle(Quiet):
    """One byte every 0.05 s, for 100 s (a socket timeout never trips)."""

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
    """20 bytes of a response that claims WikiText-103's size, then 20 s of nothing."""

    def do_GET(self):
        self.send_response(200)
        self.send_header("Content-Length", "190229076")
        self.end_headers()
        self.wfile.write(b"PK" * 10)
        self.wfile.flush()
        time.sleep(20)


class Mute(Quiet):
    """Headers that claim WikiText-103's size, then 20 s without a byte of the body."""

    def do_GET(self):
        self.send_response(200)
        self.send_header("Content-Length", "190229076")
        self.end_headers()
        self.wfile.flush()
        time.sleep(20)


class BurstThenTrickle(Quiet):
    """2 MiB of a 3 MiB response at once, then a byte every 0.05 s: an average rate that stays
    high long after the source stopped sending."""

    def do_GET(self):
        self.send_response(200)
        self.send_header("Content-Length", str(3 * 2**20))
        self.end_headers()
        try:
            self.wfile.write(b"x" * 2**21)
            for _ in range(2000):
                self.wfile.write(b"x")
                self.wfile.flush()
                time.sleep(0.05)
        except (BrokenPipeError, ConnectionResetError):
            pass


@contextlib.contextmanager
def serving(handler: type[http.server.BaseHTTPRequestHandler]):
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    httpd.daemon_threads = True
    threading.Thread(target=httpd.serve_forever, args=(0.05,), daemon=True).start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}/w.zip"
    finally:
        httpd.shutdown()
        httpd.server_close()
