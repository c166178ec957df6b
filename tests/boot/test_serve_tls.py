"""The boot server over TLS where the site gives a certificate (here a self-signed one made by
the test): the node's fetch and report verify it against the CA bundle its user data carries,
a node that does not trust it sends nothing, plain HTTP to the TLS port gets no answer, and
connections that never shake hands are closed for room like idle ones."""

from __future__ import annotations

import json
import socket
import ssl
import threading
import time

import pytest
from boothelp import KEY, call, self_signed, settings_in
from planhelp import BARE_METAL, write_blueprint

from rackform.blueprint.loader import load_effective
from rackform.boot.controller import BootError, check_bind, listed_groups, prepare, serve, tls_of
from rackform.boot.credentials import node_token
from rackform.boot.node import log as node_log
from rackform.boot.node import report as node_report
from rackform.boot.reports import PASSED
from rackform.boot.serve import BootServer, Tls, running
from rackform.engine import compile_effective

NODES = ["gpu-node-07.rack-3", "gpu-node-08.rack-3"]
A = NODES[0]
PASSING = [{"name": "gpu_count", "status": "pass", "measured": 8, "expected": 8}]


@pytest.fixture(autouse=True)
def _log(tmp_path, monkeypatch):
    monkeypatch.setattr(node_log, "LOG", tmp_path / "bootstrap.log")


@pytest.fixture
def site(tmp_path) -> Tls:
    cert, key = self_signed(tmp_path / "tls")
    return Tls(cert, key, cert)


@pytest.fixture
def boot(tmp_path, site):
    path = tmp_path / "artifact.tar.gz"
    path.write_bytes(b"an artifact" * 100_000)  # more than one TLS record
    server = BootServer(path, NODES, tmp_path / "reports", KEY, tls=site.context())
    with running(server, "127.0.0.1") as url:
        yield url, server, tmp_path / "reports"


def report(sha: str) -> dict:
    return {"artifact": sha, "outcome": "configured", "error": "", "checks": PASSING}


def test_a_node_fetches_and_reports_over_tls_verifying_the_sites_ca(boot, site):
    url, server, reports = boot
    assert url.startswith("https://127.0.0.1:")
    status, body, _ = call(url, f"/artifact/{server.sha256}", node=A, ca=site.ca_text())
    assert status == 200 and body == server.served[server.sha256].data
    to = {"url": url, "token": node_token(KEY, A), "node": A, "ca": site.ca_text()}
    assert node_report.send_report(to, report(server.sha256), tries=1)
    assert json.loads((reports / f"{A}.json").read_text())["outcome"] == "configured"


def test_a_node_that_does_not_trust_the_certificate_sends_nothing(boot):
    url, server, reports = boot
    to = {"url": url, "token": node_token(KEY, A), "node": A}  # no CA: the system's trust
    assert not node_report.send_report(to, report(server.sha256), tries=2, backoff_s=(0.05, 0.05))
    assert "CERTIFICATE_VERIFY_FAILED" in node_log.LOG.read_text()
    assert not (reports / f"{A}.json").exists()


def test_plain_http_to_the_tls_port_gets_no_answer_and_the_server_goes_on(boot, site, capfd):
    url, server, _ = boot
    host, port = url.removeprefix("https://").split(":")
    with socket.create_connection((host, int(port)), timeout=10) as s:
        s.sendall(b"GET /artifact/x HTTP/1.1\r\nHost: x\r\n\r\n")
        answer = b""
        try:
            while chunk := s.recv(4096):
                answer += chunk
        except ConnectionResetError:
            pass
    assert not answer.startswith(b"HTTP/")
    assert call(url, f"/artifact/{server.sha256}", node=A, ca=site.ca_text())[0] == 200
    assert "Traceback" not in capfd.readouterr().err


def test_connections_that_never_shake_hands_are_closed_for_room(tmp_path, site):
    path = tmp_path / "artifact.tar.gz"
    path.write_bytes(b"an artifact")
    server = BootServer(
        path, NODES, tmp_path / "reports", KEY, tls=site.context(), max_connections=4
    )
    with running(server, "127.0.0.1") as url:
        host, port = url.removeprefix("https://").split(":")
        held = [socket.create_connection((host, int(port))) for _ in range(12)]
        try:
            t = time.monotonic()
            to = {"url": url, "token": node_token(KEY, A), "node": A, "ca": site.ca_text()}
            assert node_report.send_report(to, report(server.sha256), tries=1)
            print(f"a report over TLS through 12 silent connections at a cap of 4: "
                  f"{time.monotonic() - t:.1f} s")  # fmt: skip
        finally:
            for s in held:
                s.close()
    assert server.evicted >= 8


def test_a_round_over_tls_hands_the_nodes_the_ca_and_an_https_url(tmp_path, site):
    plan = compile_effective(load_effective(write_blueprint(tmp_path, BARE_METAL)))
    round_ = prepare(plan, tmp_path / "round", listed_groups(plan))
    sent: list[bool] = []

    def nodes_boot(url, written):
        def post():
            for path in written:
                held = settings_in(path.read_text())
                assert held["url"] == url and url.startswith("https://")
                assert held["ca"] == site.ca_text()
                sent.append(
                    node_report.send_report(held, report(round_.pinned[path.name]), tries=1)
                )

        threading.Thread(target=post).start()

    judged = serve(round_, "127.0.0.1", 0, 5, tls=site, listening=nodes_boot, poll_s=0.1)
    assert sent == [True, True] and judged.names(PASSED) == ["n1", "n2"]


def test_tls_options_go_together_and_the_url_is_https(tmp_path, site):
    assert tls_of(None, None, None) is None
    assert tls_of(site.cert, site.key, None) == Tls(site.cert, site.key)
    for bad in ((site.cert, None, None), (None, site.key, None), (None, None, site.cert)):
        with pytest.raises(BootError):
            tls_of(*bad)
    with pytest.raises(BootError, match="https://"):
        check_bind("0.0.0.0", "http://10.0.0.9:8443", site)
    check_bind("0.0.0.0", "https://10.0.0.9:8443", site)
    wrong = Tls(site.cert, tmp_path / "tls" / "cert.pem")  # not its key
    with pytest.raises(ssl.SSLError):
        wrong.context()
