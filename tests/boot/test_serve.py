"""The controller's boot server, on loopback with real sockets: the artifact only by its digest,
a node's signature on every request, a report written whole for a known node and refused
(nothing written) in every other case. Forged, replayed and other nodes' reports:
test_credentials.py; malformed requests and idle connections: test_serve_limits.py; TLS:
test_serve_tls.py."""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import resource
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from boothelp import KEY, call, raw

from rackform.boot.credentials import node_token
from rackform.boot.node import report as node_report
from rackform.boot.reports import FAILED, MAX_REPORT_BYTES, MISSING, PASSED, STALE, judge
from rackform.boot.serve import BootServer, open_files, running

NODES = ["gpu-node-07.rack-3", "gpu-node-08.rack-3", "n_1"]
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def artifact(tmp_path) -> Path:
    path = tmp_path / "artifact.tar.gz"
    path.write_bytes(os.urandom(3 * 1024 * 1024 + 17))  # larger than one socket buffer
    return path


@pytest.fixture
def boot(tmp_path, artifact):
    server = BootServer(artifact, NODES, tmp_path / "reports", KEY)
    with running(server, "127.0.0.1") as url:
        yield url, server, tmp_path / "reports"


def report(node, sha, outcome="configured", checks=None, **extra) -> bytes:
    if checks is None:
        checks = [{"name": "gpu_count", "status": "pass", "measured": 8, "expected": 8}]
    doc = {"node": node, "artifact": sha, "outcome": outcome, "checks": checks, **extra}
    return json.dumps(doc).encode()


def written(reports: Path) -> list[str]:
    return sorted(p.name for p in reports.iterdir()) if reports.exists() else []


def test_the_artifact_is_served_by_its_digest_and_matches_it(boot, artifact):
    url, server, _ = boot
    status, body, headers = call(url, f"/artifact/{server.sha256}", node=NODES[0])
    assert status == 200
    assert hashlib.sha256(body).hexdigest() == server.sha256
    assert body == artifact.read_bytes()
    assert int(headers["Content-Length"]) == len(body)


def test_any_other_digest_or_path_is_not_found(boot):
    url, server, _ = boot
    other = hashlib.sha256(b"an older artifact").hexdigest()
    n = NODES[0]
    assert call(url, f"/artifact/{other}", node=n)[0] == 404
    assert call(url, f"/artifact/{server.sha256[:12]}", node=n)[0] == 404
    assert call(url, "/", node=n)[0] == 404
    assert call(url, f"/artifact/{server.sha256}", data=b"{}", node=n)[0] == 405  # a POST
    assert call(url, f"/report/{n}", node=n)[0] == 405  # a GET


def test_no_credential_is_401_and_a_wrong_one_403_and_nothing_is_written(boot):
    url, server, reports = boot
    n, body = NODES[0], report(NODES[0], server.sha256)
    status, _, headers = call(url, f"/artifact/{server.sha256}")
    assert status == 401 and headers["WWW-Authenticate"] == "Rackform-Node"
    wrong = node_token(KEY, n)[:-1] + "0"
    assert call(url, f"/artifact/{server.sha256}", node=n, token=wrong)[0] == 403
    assert call(url, f"/report/{n}", data=body)[0] == 401
    assert call(url, f"/report/{n}", data=body, node=n, token=wrong)[0] == 403
    # The token itself as a bearer token (what the old protocol sent) is no credential.
    bearer = {"Authorization": f"Bearer {node_token(KEY, n)}"}
    assert call(url, f"/report/{n}", data=body, headers=bearer)[0] == 401
    bad = (f"Rackform-Node {n}", f"Rackform-Node {n}:xyz", "Rackform-Node :" + "0" * 64)
    for malformed in bad:
        headers = {"Authorization": malformed}
        assert call(url, f"/report/{n}", data=body, headers=headers)[0] == 401
    assert written(reports) == []


@pytest.mark.parametrize(
    "body",
    [
        b"{not json",
        b"\xff\xfe",
        b"[]",
        b'{"node": "gpu-node-07.rack-3"}',
        report(NODES[0], "abc"),  # not a sha256
        report(NODES[0], "0" * 64, outcome="fine"),
        report(NODES[0], "0" * 64, checks="all good"),
        report(NODES[0], "0" * 64, checks=[{"name": "x", "status": "pass"}]),
        # A pass without a figure, a not-run without a reason: the validators' rules.
        report(
            NODES[0],
            "0" * 64,
            checks=[{"name": "x", "status": "pass", "measured": None, "expected": 1}],
        ),
        report(
            NODES[0],
            "0" * 64,
            checks=[{"name": "x", "status": "not-run", "measured": None, "expected": 1}],
        ),
        b'{"node": "gpu-node-07.rack-3", "artifact": "' + b"0" * 64 + b'", "outcome":'
        b' "configured", "checks": [{"name": "x", "status": "pass", "measured": NaN,'
        b' "expected": 1}]}',
    ],
)
def test_a_malformed_report_is_refused_and_nothing_written(boot, body):
    url, _, reports = boot
    status, why, _ = call(url, f"/report/{NODES[0]}", data=body, node=NODES[0])
    assert status == 400, why
    assert written(reports) == []


def test_an_oversize_body_is_refused_before_it_is_read(boot):
    url, server, reports = boot
    big = report(NODES[0], server.sha256, error="x" * MAX_REPORT_BYTES)
    status, why, _ = call(url, f"/report/{NODES[0]}", data=big, node=NODES[0])
    assert status == 413 and str(MAX_REPORT_BYTES).encode() in why
    assert written(reports) == []


def test_a_post_without_a_length_is_refused(boot):
    url, _, reports = boot
    auth = node_report.authorization(
        NODES[0], node_token(KEY, NODES[0]), "POST", f"/report/{NODES[0]}"
    )
    request = (
        f"POST /report/{NODES[0]} HTTP/1.1\r\nHost: x\r\nAuthorization: {auth}\r\n"
        "Transfer-Encoding: chunked\r\n\r\n"
    )
    assert raw(url, request.encode()).startswith(b"HTTP/1.1 411 ")
    assert written(reports) == []


def test_a_report_naming_another_node_than_its_url_is_refused(boot):
    url, server, reports = boot
    body = report(NODES[1], server.sha256)
    status, why, _ = call(url, f"/report/{NODES[0]}", data=body, node=NODES[0])
    assert status == 400 and NODES[1].encode() in why
    assert written(reports) == []


@pytest.mark.parametrize("node", ["gpu-node-99", "../x", "..%2Fx", ".", "x/../../y", ""])
def test_an_unknown_node_or_a_path_is_refused(boot, node):
    url, server, reports = boot
    status, why, _ = call(url, f"/report/{node}", data=report(node, server.sha256), node=NODES[0])
    assert status == 404, why
    assert written(reports) == []
    assert not (reports.parent / "x.json").exists()


def test_a_node_list_with_a_path_in_it_is_refused(tmp_path, artifact):
    with pytest.raises(ValueError, match=r"\.\./x"):
        BootServer(artifact, ["ok-1", "../x"], tmp_path / "r", KEY)
    with pytest.raises(ValueError, match="the round's key"):
        BootServer(artifact, ["ok-1"], tmp_path / "r", b"")


def test_names_with_hyphens_dots_and_underscores_report(boot):
    url, server, reports = boot
    for node in NODES:
        assert call(url, f"/report/{node}", data=report(node, server.sha256), node=node)[0] == 200
    assert written(reports) == sorted(f"{n}.json" for n in NODES)
    saved = json.loads((reports / "gpu-node-07.rack-3.json").read_text())
    assert saved["node"] == "gpu-node-07.rack-3" and saved["artifact"] == server.sha256


def test_a_report_is_taken_once_a_round_and_written_whole(boot):
    # The same report again (a retry whose answer was lost) changes nothing; another one is
    # refused and the first stays (a new round takes a new report).
    url, server, reports = boot
    node = NODES[0]
    first = report(node, server.sha256, outcome="failed", error="raid: 3 of 4 drives")
    assert call(url, f"/report/{node}", data=first, node=node)[0] == 200
    held = (reports / f"{node}.json").read_bytes()
    assert call(url, f"/report/{node}", data=first, node=node)[:2] == (200, b"recorded already\n")
    status, why, _ = call(url, f"/report/{node}", data=report(node, server.sha256), node=node)
    assert status == 409 and b"reported this round already" in why
    assert written(reports) == [f"{node}.json"]  # no temporary file left beside it
    assert (reports / f"{node}.json").read_bytes() == held


def test_many_nodes_at_once_all_fetch_and_report(tmp_path, artifact):
    nodes = [f"node-{i:03d}" for i in range(200)]
    server = BootServer(artifact, nodes, tmp_path / "reports", KEY)

    async def node(host, port, name):
        token, path = node_token(KEY, name), f"/artifact/{server.sha256}"
        head = (
            f"Host: x\r\nAuthorization: {node_report.authorization(name, token, 'GET', path)}\r\n"
        )
        r, w = await asyncio.open_connection(host, port)
        w.write(f"GET {path} HTTP/1.1\r\n{head}\r\n".encode())
        got = await r.read()
        w.close()
        ok = hashlib.sha256(got.partition(b"\r\n\r\n")[2]).hexdigest() == server.sha256
        body, path = report(name, server.sha256), f"/report/{name}"
        head = f"Authorization: {node_report.authorization(name, token, 'POST', path, body)}\r\n"
        r, w = await asyncio.open_connection(host, port)
        w.write(
            f"POST {path} HTTP/1.1\r\n{head}Content-Length: {len(body)}\r\n\r\n".encode() + body
        )
        answer = await r.read()
        w.close()
        return ok and answer.startswith(b"HTTP/1.1 200 ")

    async def all_nodes(host, port):
        return await asyncio.gather(*(node(host, port, n) for n in nodes))

    with running(server, "127.0.0.1") as url:
        host, port = url.removeprefix("http://").split(":")
        assert all(asyncio.run(all_nodes(host, int(port))))
    assert written(tmp_path / "reports") == [f"{n}.json" for n in nodes]


def test_a_client_that_sends_nothing_does_not_hold_up_another(boot):
    url, server, _ = boot
    host, port = url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port))) as idle:
        idle.sendall(b"GET /artif")  # and never more
        assert call(url, f"/artifact/{server.sha256}", node=NODES[0])[0] == 200


def test_the_open_files_limit_is_raised_up_to_the_hard_limit_and_no_further():
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    assert open_files(min(soft, 64)) == soft  # enough already: left as it is
    if hard == resource.RLIM_INFINITY:
        pytest.skip("no hard limit on open files here")
    with pytest.raises(OSError, match=f"hard limit is {hard}"):
        open_files(hard + 1)
    assert resource.getrlimit(resource.RLIMIT_NOFILE) == (soft, hard)


def test_the_command_serves_until_it_is_told_to_stop(tmp_path, artifact):
    (tmp_path / "nodes.txt").write_text("\n".join(NODES) + "\n")
    (tmp_path / "key").write_text(KEY.hex() + "\n")
    argv = [sys.executable, "-m", "rackform.boot.serve", "--artifact", str(artifact)]
    argv += ["--nodes", str(tmp_path / "nodes.txt"), "--reports", str(tmp_path / "r")]
    argv += ["--key-file", str(tmp_path / "key"), "--bind", "127.0.0.1"]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    with subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env) as p:
        try:
            line = p.stdout.readline().decode()
            assert line.startswith("listening on http://127.0.0.1:"), line
            url = line.split()[-1]
            sha = hashlib.sha256(artifact.read_bytes()).hexdigest()
            body = report(NODES[1], sha)
            assert call(url, f"/report/{NODES[1]}", data=body, node=NODES[1])[0] == 200
            p.send_signal(signal.SIGTERM)
            assert p.wait(timeout=30) == 0
            assert "{200: 1}" in p.stderr.read().decode()
        finally:
            p.kill()
    assert written(tmp_path / "r") == [f"{NODES[1]}.json"]


def test_what_the_server_writes_the_wait_reads(boot):
    # One parser: a report the server took is one the wait judges, stale ones included (the
    # server takes a report of another artifact so that the wait can name the node).
    url, server, reports = boot
    old = hashlib.sha256(b"last week's artifact").hexdigest()
    fail = {"name": "row_remap", "status": "fail", "measured": 1, "expected": 0}
    sent = [
        report(NODES[0], server.sha256),
        report(NODES[1], server.sha256, outcome="failed", checks=[fail], error="checks failed"),
        report(NODES[2], old),
    ]
    for node, body in zip(NODES, sent, strict=True):
        assert call(url, f"/report/{node}", data=body, node=node)[0] == 200
    judged = judge([*NODES, "gpu-node-09.rack-3"], reports, server.sha256)
    assert judged.names(PASSED) == [NODES[0]]
    assert judged.names(FAILED) == [NODES[1]] and "row_remap: measured 1" in judged.lines()[0]
    assert judged.names(STALE) == [NODES[2]]
    assert judged.names(MISSING) == ["gpu-node-09.rack-3"]


def test_each_node_groups_artifact_is_served_by_its_own_digest(tmp_path, artifact):
    other = tmp_path / "other.tar.gz"
    other.write_bytes(b"another node group's artifact")
    server = BootServer([artifact, other, artifact], NODES, tmp_path / "reports", KEY)
    assert list(server.served) == [
        hashlib.sha256(p.read_bytes()).hexdigest() for p in (artifact, other)
    ]
    with running(server, "127.0.0.1") as url:
        for path in (artifact, other):
            sha = hashlib.sha256(path.read_bytes()).hexdigest()
            status, body, _ = call(url, f"/artifact/{sha}", node=NODES[2])
            assert status == 200 and body == path.read_bytes()
        assert call(url, f"/artifact/{hashlib.sha256(b'x').hexdigest()}", node=NODES[2])[0] == 404
    assert all(s.file.closed for s in server.served.values())
