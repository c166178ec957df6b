"""Each node's own credential for a round (rackform/boot/credentials.py), tried the ways the
security review (issue 57) says one node could pass for another: a forged signature, node A's
credential posting for node B, what one node's user data holds used for another, an altered
report, a replayed one, and an earlier round's token. Real rounds of the controller where a
round is in play, the real boot server on loopback, the real node script's signing."""

from __future__ import annotations

import json
import os
import stat
import threading

import pytest
from boothelp import KEY, call, raw, settings_in, signed_post
from planhelp import BARE_METAL, write_blueprint

from rackform.blueprint.loader import load_effective
from rackform.boot.controller import listed_groups, prepare, serve, write_user_data
from rackform.boot.credentials import claim, key_from_text, new_key, node_token
from rackform.boot.node import log as node_log
from rackform.boot.node import report as node_report
from rackform.boot.reports import MISSING, PASSED
from rackform.boot.serve import BootServer, running
from rackform.engine import compile_effective

NODES = ["gpu-node-07.rack-3", "gpu-node-08.rack-3"]
A, B = NODES
PASSING = [{"name": "gpu_count", "status": "pass", "measured": 8, "expected": 8}]


@pytest.fixture(autouse=True)
def _log(tmp_path, monkeypatch):
    monkeypatch.setattr(node_log, "LOG", tmp_path / "bootstrap.log")


@pytest.fixture
def boot(tmp_path):
    path = tmp_path / "artifact.tar.gz"
    path.write_bytes(b"an artifact")
    server = BootServer(path, NODES, tmp_path / "reports", KEY)
    with running(server, "127.0.0.1") as url:
        yield url, server.sha256, tmp_path / "reports"


def body(node: str, sha: str, outcome: str = "configured") -> bytes:
    return json.dumps(
        {"node": node, "artifact": sha, "outcome": outcome, "error": "", "checks": PASSING}
    ).encode()


def _round(tmp_path, out="round"):
    plan = compile_effective(load_effective(write_blueprint(tmp_path, BARE_METAL)))
    return prepare(plan, tmp_path / out, listed_groups(plan))


def test_each_node_has_its_own_token_and_no_user_data_holds_the_key(tmp_path):
    round_ = _round(tmp_path)
    paths = write_user_data(round_, "http://10.0.0.254:8080")
    texts = {p.name: p.read_text() for p in paths}
    tokens = {n: settings_in(t)["token"] for n, t in texts.items()}
    assert sorted(tokens) == ["n1", "n2"] and len(set(tokens.values())) == 2
    key = (round_.out / "key").read_text().strip()
    assert stat.S_IMODE(os.stat(round_.out / "key").st_mode) == 0o600
    for node, text in texts.items():
        assert key not in text
        assert [n for n, t in tokens.items() if t in text] == [node]  # its own, no other's
    assert key not in repr(round_)


def test_what_one_nodes_user_data_holds_cannot_report_for_another(tmp_path):
    # Whoever reads n1's user data (a container on n1, the provisioning network) posts, with
    # what it holds, a passing report for n2: refused, and n2 stays missing.
    round_ = _round(tmp_path)
    sent: dict[str, bool] = {}

    def nodes_boot(url, written):
        held = settings_in((round_.out / "user-data" / "n1").read_text())
        report = {"artifact": round_.pinned["n2"], "outcome": "configured", "error": ""}
        report["checks"] = PASSING

        def post():
            forged = {**held, "node": "n2"}
            sent["n2"] = node_report.send_report(forged, report, tries=1)
            sent["n1"] = node_report.send_report(
                held, {**report, "artifact": round_.pinned["n1"]}, tries=1
            )

        threading.Thread(target=post).start()

    judged = serve(round_, "127.0.0.1", 0, 1.0, listening=nodes_boot, poll_s=0.1)
    assert sent == {"n2": False, "n1": True}
    assert judged.names(PASSED) == ["n1"] and judged.names(MISSING) == ["n2"]
    assert not (round_.reports / "n2.json").exists()
    assert "the controller refused the report (403 " in node_log.LOG.read_text()


def test_an_earlier_rounds_token_is_refused(tmp_path):
    first = _round(tmp_path)
    old = settings_in(write_user_data(first, "http://x:1")[0].read_text())
    second = _round(tmp_path)  # the same directory: a new key
    assert (second.out / "key").read_text() != first.key.hex() + "\n"
    sent: list[bool] = []

    def nodes_boot(url, written):
        report = {"artifact": second.pinned["n1"], "outcome": "configured", "error": ""}
        sent.append(
            node_report.send_report({**old, "url": url}, {**report, "checks": PASSING}, tries=1)
        )

    judged = serve(second, "127.0.0.1", 0, 0.5, listening=nodes_boot, poll_s=0.1)
    assert sent == [False] and judged.names(MISSING) == ["n1", "n2"]


def test_a_forged_signature_is_refused(boot):
    url, sha, reports = boot
    for token in (node_token(new_key(), A), "0" * 64, node_token(KEY, B)):
        status, why, _ = call(url, f"/report/{A}", data=body(A, sha), node=A, token=token)
        assert status == 403, why
        assert call(url, f"/artifact/{sha}", node=A, token=token)[0] == 403
    assert not reports.exists() or not list(reports.iterdir())


def test_node_as_credential_does_not_report_for_node_b(boot):
    url, sha, reports = boot
    # Signed by A (its own, valid signature), for B's URL, naming B in the body.
    status, why, _ = call(url, f"/report/{B}", data=body(B, sha), node=A)
    assert status == 403 and f"{A}'s credential reports for {A} only".encode() in why
    # A's token, claiming to be B: the signature is not B's.
    status, why, _ = call(url, f"/report/{B}", data=body(B, sha), node=B, token=node_token(KEY, A))
    assert status == 403, why
    # B's URL, A's body, A's signature: the URL's node is not the signer's either.
    assert call(url, f"/report/{B}", data=body(A, sha), node=A)[0] == 403
    assert not (reports / f"{B}.json").exists()
    # An unknown node's credential: none of the round's.
    assert call(url, f"/artifact/{sha}", node="gpu-node-99", token="0" * 64)[0] == 403


def test_an_altered_report_does_not_match_its_signature(boot):
    # What someone on the way of a plain-HTTP report could do: keep the signature, change the
    # body (the outcome), or send it to another path.
    url, sha, reports = boot
    good = signed_post(A, f"/report/{A}", body(A, sha, "failed"))
    head, _, _ = good.partition(b"\r\n\r\n")
    passing = body(A, sha, "configured")
    length = f"Content-Length: {len(body(A, sha, 'failed'))}".encode()
    altered = head.replace(length, f"Content-Length: {len(passing)}".encode())
    answer = raw(url, altered + b"\r\n\r\n" + passing)
    assert answer.startswith(b"HTTP/1.1 403 ") and b"altered" in answer
    assert not (reports / f"{A}.json").exists()
    assert raw(url, good).startswith(b"HTTP/1.1 200 ")
    assert json.loads((reports / f"{A}.json").read_text())["outcome"] == "failed"


def test_a_replayed_report_changes_nothing(boot):
    url, sha, reports = boot
    sent = signed_post(A, f"/report/{A}", body(A, sha, "failed"))
    assert raw(url, sent).startswith(b"HTTP/1.1 200 ")
    path = reports / f"{A}.json"
    before = (path.read_bytes(), path.stat().st_mtime_ns, path.stat().st_ino)
    for _ in range(3):  # the same bytes again, as someone who saw them would send them
        assert raw(url, sent).startswith(b"HTTP/1.1 200 ")
    assert (path.read_bytes(), path.stat().st_mtime_ns, path.stat().st_ino) == before
    # A different report of A's own (a pass after a fail) this round: refused, the first stays.
    answer = raw(url, signed_post(A, f"/report/{A}", body(A, sha, "configured")))
    assert answer.startswith(b"HTTP/1.1 409 ")
    assert json.loads(path.read_text())["outcome"] == "failed"


def test_credentials_parse_and_keys_read_back():
    token = node_token(KEY, A)
    assert len(token) == 64 and token != node_token(KEY, B) and token != node_token(new_key(), A)
    good = claim(node_report.authorization(A, token, "GET", "/x"))
    assert (good.node, good.error) == (A, "")
    for bad in ("", "Bearer x", f"Rackform-Node {A}", f"Rackform-Node ../x:{'0' * 64}"):
        assert claim(bad).error
    assert key_from_text(KEY.hex() + "\n") == KEY
    with pytest.raises(ValueError):
        key_from_text("abcd")
    with pytest.raises(ValueError):
        node_token(KEY, "../x")
