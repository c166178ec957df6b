"""The test servers' readiness wait: a server that answers 503 while it loads is not ready.

CI's stop 50 queried a Prometheus still opening its TSDB: its /-/ready had answered 503 and the
wait took any HTTP error for "it answers"."""

from __future__ import annotations

import http.server
import subprocess
import sys
import time

from loopback import http_server
from servers import _wait


def _server(first_codes: list[int], seen: list[float]):
    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            seen.append(time.monotonic())
            code = first_codes.pop(0) if first_codes else 200
            self.send_response(code)
            self.end_headers()

        def log_message(self, *args):
            pass

    return Handler


def _sleeper():
    return subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])


def test_the_wait_goes_on_through_service_unavailable(tmp_path):
    seen: list[float] = []
    proc = _sleeper()
    try:
        with http_server(_server([503, 503, 503], seen)) as port:
            _wait(f"http://127.0.0.1:{port}/-/ready", proc, tmp_path / "log", timeout=30)
    finally:
        proc.kill()
        proc.wait()
    assert len(seen) == 4  # three 503s, then the 200 it waited for


def test_a_server_asking_for_credentials_is_up(tmp_path):
    seen: list[float] = []
    proc = _sleeper()
    try:
        with http_server(_server([401], seen)) as port:
            _wait(f"http://127.0.0.1:{port}/redfish/v1/", proc, tmp_path / "log", timeout=30)
    finally:
        proc.kill()
        proc.wait()
    assert len(seen) == 1
