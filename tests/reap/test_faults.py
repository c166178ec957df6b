"""Prometheus that cannot answer (down, too slow, garbage, an error, refusing credentials, an
untrusted certificate): one clear line, exit 3, nothing decided or acted on. Prometheus behind
TLS and basic auth answers with the credentials from the environment. And the dcgm role's
labels are the ones reap selects by."""

from __future__ import annotations

import http.server
import json
import os
import re
import subprocess
import sys
import time

import pytest
from blueprint_helpers import ROOT
from clusters import bare_metal, history
from gpu_collection import ROLES_DIR
from loopback import free_port, http_server
from servers import Web, prometheus

from rackform.telemetry import labels
from rackform.telemetry.prometheus import Prometheus


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


@pytest.fixture(scope="module")
def guarded_prometheus(tmp_path_factory):
    """A real Prometheus behind its own web config: TLS (a self-signed CA) and basic auth."""
    tmp = tmp_path_factory.mktemp("authprom")
    web = Web.make(tmp / "tls", "reaper", "prom-s3cret")
    with prometheus(history("llm-idle-a", 2), tmp / "prom", web=web) as url:
        yield url, web


def reap_env(tmp_path, url, env: dict, *extra):
    f = tmp_path / "bp.yaml"
    f.write_text(bare_metal("llm-idle-a"))
    environ = {k: v for k, v in os.environ.items() if not k.startswith("RACKFORM_PROMETHEUS")}
    return subprocess.run(
        [sys.executable, "-m", "rackform", "reap", str(f), "--prometheus", url, "--json",
         "--state-dir", str(tmp_path / "state"), *extra],
        capture_output=True, text=True, cwd=ROOT, timeout=60, env={**environ, **env},
    )  # fmt: skip


def test_prometheus_behind_tls_and_basic_auth(guarded_prometheus, tmp_path):
    url, web = guarded_prometheus
    creds = {"RACKFORM_PROMETHEUS_USER": web.user, "RACKFORM_PROMETHEUS_PASSWORD": web.password}
    ok = reap_env(tmp_path, url, creds, "--prometheus-ca", str(web.cert))
    assert ok.returncode == 0, ok.stderr
    assert json.loads(ok.stdout)["clusters"][0]["verdict"] == "idle"
    # The CA from the environment works the same.
    ok = reap_env(tmp_path, url, {**creds, "RACKFORM_PROMETHEUS_CA": str(web.cert)})
    assert ok.returncode == 0, ok.stderr

    no_creds = reap_env(tmp_path, url, {}, "--prometheus-ca", str(web.cert))
    assert no_creds.returncode == 3
    assert "refused the query without credentials (set RACKFORM_PROMETHEUS_TOKEN" in no_creds.stderr
    wrong = {**creds, "RACKFORM_PROMETHEUS_PASSWORD": "nope"}
    bad = reap_env(tmp_path, url, wrong, "--prometheus-ca", str(web.cert))
    assert bad.returncode == 3 and "with the credentials given (HTTP 401)" in bad.stderr
    assert "nope" not in bad.stderr and web.password not in no_creds.stderr + bad.stderr
    untrusted = reap_env(tmp_path, url, creds)  # the system's CAs do not know this one
    assert untrusted.returncode == 3 and "CERTIFICATE_VERIFY_FAILED" in untrusted.stderr


def test_a_bearer_token_is_sent_as_the_authorization_header():
    # Prometheus itself takes no bearer tokens (a proxy in front of it does): a loopback server
    # records the header the client sends and answers an empty vector.
    seen = []

    class H(http.server.BaseHTTPRequestHandler):
        def do_POST(self):
            seen.append(self.headers.get("Authorization"))
            self.send_response(200)
            self.end_headers()
            self.wfile.write(b'{"status":"success","data":{"resultType":"vector","result":[]}}')

        def log_message(self, *args):
            pass

    with http_server(H) as port:
        url = f"http://127.0.0.1:{port}"
        Prometheus(url, environ={"RACKFORM_PROMETHEUS_TOKEN": "tok-123"}).query("up", time.time())
    assert seen == ["Bearer tok-123"]
