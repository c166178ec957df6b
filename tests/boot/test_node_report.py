"""A node that has a controller to report to: the real node script (its roles and checks
injected, as tests/boot/test_node.py drives it) posts its outcome to the real boot server on
loopback, and the controller's wait (rackform/boot/reports.py) judges what the server took."""

from __future__ import annotations

import hashlib
import json
import socket
import threading
import time
from pathlib import Path

import pytest
from boothelp import KEY
from loopback import free_port

from rackform.boot.credentials import node_token
from rackform.boot.node import log as node_log
from rackform.boot.node import report as node_report
from rackform.boot.node.machine import Bootstrap, Paths
from rackform.boot.node.report import report_to, send_report
from rackform.boot.reports import FAILED, MISSING, PASSED, wait
from rackform.boot.serve import BootServer, running

SHA = "ab" * 32
NODES = ["gpu-node-07.rack-3", "gpu-node-08.rack-3", "n_1"]
PASSING = [{"name": "gpu_count", "status": "pass", "measured": 8, "expected": 8}]
FAST = (0.05, 0.2)  # the waits between tries, short for the test


@pytest.fixture(autouse=True)
def _log(tmp_path, monkeypatch):
    monkeypatch.setattr(node_log, "LOG", tmp_path / "bootstrap.log")


def artifact(tmp_path: Path) -> Path:
    """A file whose digest is SHA's stand-in: the server serves it; the node's root is named by
    its digest, as the user data unpacks it."""
    path = tmp_path / "artifact.tar.gz"
    path.write_bytes(b"an artifact")
    return path


def node(tmp_path: Path, name: str | None, url: str, sha: str, *, checks=PASSING, roles=None):
    """A node's disk under tmp_path/<name>, told to report to `url`, and its Bootstrap."""
    disk = tmp_path / (name or "unnamed")
    root = disk / "opt" / sha
    root.mkdir(parents=True)
    paths = Paths(
        status=disk / "bootstrap.json",
        state=disk / "bootstrap-state.json",
        reboot_request=disk / "reboot-requested",
        unit=disk / "rackform-bootstrap.service",
        report_to=disk / "report.json",
    )
    to = {"url": url, "token": node_token(KEY, name or socket.gethostname())}
    to |= {"node": name} if name else {}
    paths.report_to.write_text(json.dumps(to))
    return Bootstrap(
        root,
        {"vars": {}, "aws": None},
        paths=paths,
        roles=roles or (lambda: None),
        checks=lambda: checks,
        system=lambda argv: pytest.fail(f"ran {argv}"),
        report_backoff_s=FAST,
    )


@pytest.fixture
def boot(tmp_path):
    """The boot server for NODES, and its artifact's digest."""
    path = artifact(tmp_path)
    server = BootServer(path, NODES, tmp_path / "reports", KEY)
    with running(server, "127.0.0.1") as url:
        yield url, server.sha256, tmp_path / "reports"


def test_a_configured_node_reports_and_the_wait_names_it_passed(tmp_path, boot):
    url, sha, reports = boot
    assert node(tmp_path, NODES[0], url, sha).run() == 0
    judged = wait(NODES[:1], reports, sha, deadline_s=5, poll_s=0.1)
    assert judged.names(PASSED) == [NODES[0]] and judged.validated
    saved = json.loads((reports / f"{NODES[0]}.json").read_text())
    assert saved == {
        "node": NODES[0],
        "artifact": sha,
        "outcome": "configured",
        "error": "",
        "checks": PASSING,
    }
    assert f"reported configured to {url} as {NODES[0]}" in node_log.LOG.read_text()


def test_a_node_whose_checks_fail_is_named_failed_with_the_check(tmp_path, boot):
    url, sha, reports = boot
    bad = [{"name": "gpu_count", "status": "fail", "measured": 7, "expected": 8, "unit": "GPUs"}]
    assert node(tmp_path, NODES[1], url, sha, checks=bad).run() == 1
    judged = wait(NODES[1:2], reports, sha, deadline_s=5, poll_s=0.1)
    assert judged.names(FAILED) == [NODES[1]]
    (line,) = judged.lines()
    assert "serving checks failed: gpu_count" in line
    assert "gpu_count: measured 7 GPUs, expected 8 GPUs" in line


def test_a_node_whose_roles_fail_reports_failed_with_the_error(tmp_path, boot):
    url, sha, reports = boot

    def broken():
        raise OSError("apt mirror unreachable")

    assert node(tmp_path, NODES[2], url, sha, roles=broken).run() == 1
    saved = json.loads((reports / f"{NODES[2]}.json").read_text())
    assert saved["outcome"] == "failed" and "apt mirror unreachable" in saved["error"]
    (line,) = wait(NODES[2:], reports, sha, deadline_s=5, poll_s=0.1).lines()
    assert line.startswith(f"{NODES[2]}: failed: configuration failed: apt mirror unreachable")


def test_a_node_that_never_reports_is_named_missing_at_the_deadline(tmp_path, boot):
    url, sha, reports = boot
    assert node(tmp_path, NODES[0], url, sha).run() == 0
    judged = wait(NODES, reports, sha, deadline_s=0.3, poll_s=0.1)
    assert judged.names(PASSED) == NODES[:1]
    assert judged.names(MISSING) == NODES[1:] and not judged.validated
    assert all("no report after" in line for line in judged.lines())


def test_the_node_tries_again_until_the_server_is_up(tmp_path):
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    path = artifact(tmp_path)
    sha = hashlib.sha256(path.read_bytes()).hexdigest()
    bootstrap = node(tmp_path, NODES[0], url, sha)
    bootstrap.report_backoff_s = (0.2, 0.4)
    codes: list[int] = []
    runner = threading.Thread(target=lambda: codes.append(bootstrap.run()))
    runner.start()
    # The node's first tries find nothing listening; the server comes up a little later.
    deadline = time.monotonic() + 10
    while "trying again" not in (node_log.LOG.read_text() if node_log.LOG.exists() else ""):
        assert time.monotonic() < deadline, "the node did not try"
        time.sleep(0.02)
    server = BootServer(path, NODES, tmp_path / "reports", KEY)
    with running(server, "127.0.0.1", port):
        runner.join(timeout=30)
    assert codes == [0]
    log = node_log.LOG.read_text()
    assert "Connection refused" in log and f"reported configured to {url}" in log
    assert wait(NODES[:1], tmp_path / "reports", sha, 0).validated


def test_a_report_that_cannot_be_sent_is_logged_and_the_node_stays_configured(tmp_path):
    url = f"http://127.0.0.1:{free_port()}"  # nothing listens
    bootstrap = node(tmp_path, NODES[0], url, SHA)
    assert bootstrap.run() == 0
    assert json.loads(bootstrap.paths.status.read_text())["configured"] is True
    log = node_log.LOG.read_text()
    assert log.count("trying again") == node_report.REPORT_TRIES - 1
    assert f"could not report to {url}" in log and f"after {node_report.REPORT_TRIES} tries" in log


def test_a_refused_report_is_not_sent_again(tmp_path, boot):
    url, sha, reports = boot
    bootstrap = node(tmp_path, NODES[0], url, sha)
    to = json.loads(bootstrap.paths.report_to.read_text())
    bootstrap.paths.report_to.write_text(json.dumps({**to, "token": node_token(KEY, NODES[1])}))
    assert bootstrap.run() == 0
    log = node_log.LOG.read_text()
    assert "the controller refused the report (403 wrong signature" in log
    assert "trying again" not in log and not (reports / f"{NODES[0]}.json").exists()


def test_a_later_run_finds_the_end_and_reports_again(tmp_path, boot):
    # The first report never arrived (no controller yet): a rerun of the script sends it.
    url, sha, reports = boot
    lost = node(tmp_path, NODES[0], f"http://127.0.0.1:{free_port()}", sha)
    assert lost.run() == 0
    to = {"url": url, "token": node_token(KEY, NODES[0]), "node": NODES[0]}
    lost.paths.report_to.write_text(json.dumps(to))
    lost.roles = lambda: pytest.fail("ran the roles again")
    assert lost.run() == 0
    assert wait(NODES[:1], reports, sha, 0).validated


def test_without_a_report_file_nothing_is_posted(tmp_path):
    bootstrap = node(tmp_path, NODES[0], "http://127.0.0.1:1", SHA)
    bootstrap.paths.report_to.unlink()
    assert bootstrap.run() == 0
    assert "report" not in node_log.LOG.read_text()


def test_the_name_falls_back_to_the_host_name(tmp_path):
    path = tmp_path / "report.json"
    path.write_text(json.dumps({"url": "http://c:8080/", "token": "t" * 64}))
    assert report_to(path) == {
        "url": "http://c:8080",
        "token": "t" * 64,
        "node": socket.gethostname(),
        "vars": {},
        "ca": "",
    }
    assert report_to(tmp_path / "none.json") is None
    path.write_text("{not json")
    assert report_to(path) is None and "unreadable" in node_log.LOG.read_text()


def test_send_report_waits_longer_each_time_up_to_the_longest(tmp_path):
    waits: list[float] = []
    to = {"url": f"http://127.0.0.1:{free_port()}", "token": "t" * 64, "node": "n1"}
    report = {"artifact": SHA, "outcome": "configured", "error": "", "checks": PASSING}
    assert not send_report(to, report, tries=6, backoff_s=(5, 30), sleep=waits.append)
    assert waits == [5, 10, 20, 30, 30]


def test_what_a_refusing_server_says_is_logged_as_printable_text(tmp_path):
    # Whatever answers at the report's address chooses its words: escape codes and line
    # breaks in them reach the node's log escaped, never as a terminal's commands or a
    # forged log line.
    import http.server

    from loopback import http_server

    class Refusing(http.server.BaseHTTPRequestHandler):
        def do_POST(self):
            self.rfile.read(int(self.headers["Content-Length"]))
            self.send_response(400)
            self.end_headers()
            self.wfile.write(b"\x1b[2Jno\nreported configured to http://x as everyone")

        def log_message(self, *args):
            pass

    with http_server(Refusing) as port:
        bootstrap = node(tmp_path, NODES[0], f"http://127.0.0.1:{port}/report", SHA)
        assert bootstrap.run() == 0
    log = node_log.LOG.read_text()
    assert "\x1b" not in log and "as everyone" in log
    assert "(400 \\x1b[2Jno\\nreported configured to http://x as everyone)" in log
    forged = [line for line in log.splitlines() if "rackform-bootstrap: reported" in line]
    assert forged == [] and all(" rackform-bootstrap: " in line for line in log.splitlines())
