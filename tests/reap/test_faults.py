"""Prometheus that cannot answer (down, too slow, garbage, an error): one clear line, exit 3,
nothing decided or acted on. And the dcgm role's labels are the ones reap selects by."""

from __future__ import annotations

import http.server
import re
import subprocess
import sys
import time

import pytest
from blueprint_helpers import ROOT
from clusters import bare_metal
from gpu_collection import ROLES_DIR
from loopback import free_port, http_server

from rackform.reap import labels


def handler(body: bytes, status: int = 200, delay: float = 0.0):
    class H(http.server.BaseHTTPRequestHandler):
        def do_POST(self):
            time.sleep(delay)
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    return H


def reap(tmp_path, url, *extra):
    f = tmp_path / "bp.yaml"
    f.write_text(bare_metal("idle", action="notify"))
    return subprocess.run(
        [sys.executable, "-m", "rackform", "reap", str(f), "--prometheus", url,
         "--state-dir", str(tmp_path / "state"), "--apply", "--webhook", "http://127.0.0.1:9/x",
         *extra],
        capture_output=True, text=True, cwd=ROOT, timeout=60,
    )  # fmt: skip


def one_line(r, expected: str):
    assert r.returncode == 3, r.stdout + r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and expected in lines[0], r.stderr
    assert "nothing was decided or done" in lines[0]
    assert "Traceback" not in r.stderr and r.stdout == ""


def test_unreachable(tmp_path):
    r = reap(tmp_path, f"http://127.0.0.1:{free_port()}")
    one_line(r, "is unreachable")
    assert not (tmp_path / "state").exists()


def test_too_slow(tmp_path):
    with http_server(handler(b"{}", delay=3)) as port:
        r = reap(tmp_path, f"http://127.0.0.1:{port}", "--timeout", "0.5")
    one_line(r, "did not answer within 0.5 s")


@pytest.mark.parametrize(
    ("body", "status", "expected"),
    [
        (b"<html>hello</html>", 200, "not its query API's JSON"),
        (b'{"status": "success", "data": {"resultType": "matrix", "result": []}}', 200, "a matrix"),
        (b'{"status": "error", "error": "parse error"}', 400, "HTTP 400: parse error"),
    ],
)
def test_garbage(tmp_path, body, status, expected):
    with http_server(handler(body, status)) as port:
        r = reap(tmp_path, f"http://127.0.0.1:{port}")
    one_line(r, expected)


def test_not_a_url(tmp_path):
    r = reap(tmp_path, "prometheus:9090")
    assert r.returncode == 2 and "is not an http(s) URL" in r.stderr


def test_reap_selects_by_the_labels_the_dcgm_role_writes():
    template = (ROLES_DIR / "dcgm/templates/prometheus-scrape.yml.j2").read_text()
    written = re.findall(r"^\s+(\w+): \{\{", template.split("labels:", 1)[1], re.MULTILINE)
    assert tuple(written) == labels.SCRAPE_LABELS
    counters = (ROLES_DIR / "dcgm/defaults/main.yml").read_text()
    for metric in (labels.GPU_UTIL, labels.FB_USED, labels.XID_ERRORS, labels.ECC_DBE):
        assert f"- {metric}\n" in counters
