"""The controller's wait for the nodes' reports: every expected node named as passed, failed
(with what failed), stale (another artifact) or missing, by the deadline; and the report's check
records held to the validators' own rules."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from rackform.boot.reports import (
    FAILED,
    MISSING,
    PASSED,
    STALE,
    Report,
    ReportError,
    judge,
    parse,
    wait,
)
from rackform.evidence.verdict import NOTHING_PASSED
from validators import report as vr

SHA = "a" * 64
OLD = "b" * 64
NODES = ["gpu-node-07.rack-3", "gpu-node-08.rack-3", "gpu-node-09.rack-3", "gpu-node-10.rack-3"]
GOOD = ({"name": "gpu_count", "status": "pass", "measured": 8, "expected": 8, "unit": "GPUs"},)


def put(directory, node, artifact=SHA, outcome="configured", checks=GOOD, error=""):
    directory.mkdir(exist_ok=True)
    text = Report(node, artifact, outcome, error, tuple(checks)).to_json()
    (directory / f"{node}.json").write_text(text)


def test_each_node_is_named_passed_failed_stale_or_missing(tmp_path):
    put(tmp_path, NODES[0])
    bad = {"name": "gpu_count", "status": "fail", "measured": 7, "expected": 8, "unit": "GPUs"}
    put(
        tmp_path,
        NODES[1],
        outcome="failed",
        checks=[GOOD[0] | {"name": "ecc"}, bad],
        error="serving checks failed: gpu_count",
    )
    put(tmp_path, NODES[2], artifact=OLD)
    judged = judge(NODES, tmp_path, SHA)
    assert judged.names(PASSED) == [NODES[0]]
    assert judged.names(FAILED) == [NODES[1]]
    assert judged.names(STALE) == [NODES[2]]
    assert judged.names(MISSING) == [NODES[3]]
    assert not judged.validated and judged.complete is False
    failed, stale, missing = judged.lines()
    assert failed.startswith(f"{NODES[1]}: failed: serving checks failed: gpu_count")
    assert "gpu_count: measured 7 GPUs, expected 8 GPUs" in failed  # verdict's words
    assert "/var/log/rackform-bootstrap.log" in failed
    assert "WARNING" in stale and OLD[:12] in stale and SHA[:12] in stale
    assert "configure it in full" in stale
    assert missing.startswith(f"{NODES[3]}: no report") and "rackform up" in missing


def test_every_node_passed_is_validated(tmp_path):
    for n in NODES:
        put(tmp_path, n)
    judged = judge(NODES, tmp_path, SHA)
    assert judged.validated and judged.complete and judged.lines() == []


@pytest.mark.parametrize(
    "checks",
    [
        (),  # nothing ran: proves nothing
        ({"name": "x", "status": "not-run", "measured": None, "expected": 1, "detail": "no GPU"},),
    ],
)
def test_a_node_that_says_configured_with_no_passed_check_did_not_pass(tmp_path, checks):
    put(tmp_path, NODES[0], checks=checks)
    judged = judge(NODES[:1], tmp_path, SHA)
    assert judged.names(FAILED) == [NODES[0]] and not judged.validated
    assert NOTHING_PASSED in judged.lines()[0]


def test_a_node_that_says_failed_with_passing_checks_did_not_pass(tmp_path):
    put(tmp_path, NODES[0], outcome="failed", error="configuration failed: exit 2")
    (line,) = judge(NODES[:1], tmp_path, SHA).lines()
    assert "configuration failed: exit 2" in line


def test_a_file_the_server_did_not_write_is_a_failure_not_a_pass(tmp_path):
    (tmp_path / f"{NODES[0]}.json").write_text("{half a rep")
    judged = judge(NODES[:1], tmp_path, SHA)
    assert judged.names(FAILED) == [NODES[0]] and "unreadable" in judged.lines()[0]
    # Nor a report filed under another node's name.
    put(tmp_path, NODES[1])
    (tmp_path / f"{NODES[0]}.json").write_text((tmp_path / f"{NODES[1]}.json").read_text())
    assert judge(NODES[:1], tmp_path, SHA).names(FAILED) == [NODES[0]]


def test_an_expired_deadline_returns_promptly_naming_the_missing_nodes(tmp_path):
    put(tmp_path, NODES[0])
    t = time.monotonic()
    judged = wait(NODES, tmp_path, SHA, deadline_s=0.6, poll_s=0.1)
    took = time.monotonic() - t
    assert 0.6 <= took < 1.5
    assert judged.names(MISSING) == NODES[1:] and judged.waited_s >= 0.6
    assert all(
        line.startswith(f"{n}: no report after ")
        for n, line in zip(NODES[1:], judged.lines(), strict=True)
    )


def test_the_wait_ends_once_every_node_has_reported(tmp_path):
    now = [0.0]
    slept = []

    def sleep(s):
        slept.append(s)
        now[0] += s
        if now[0] >= 3:  # the last node's report arrives at 3 s
            put(tmp_path, NODES[3], outcome="failed", error="raid")

    for n in NODES[:3]:
        put(tmp_path, n)
    judged = wait(NODES, tmp_path, SHA, deadline_s=600, poll_s=1, clock=lambda: now[0], sleep=sleep)
    assert judged.complete and judged.names(FAILED) == [NODES[3]]
    assert slept == [1, 1, 1] and judged.waited_s == 3


def test_the_wait_refuses_a_name_that_is_no_node():
    with pytest.raises(ReportError, match=r"\.\./x"):
        wait(["ok", "../x"], Path("/nonexistent"), SHA, deadline_s=0)


def test_records_the_validators_write_are_reports(tmp_path):
    checks = [
        vr.compare("gpu_count", 8, 8, "GPUs", "=="),
        vr.compare("nccl_busbw", 350.5, 300.0, "GB/s"),
        vr.not_run("ib_links", "no InfiniBand on this node"),
        vr.failed("ecc", "3 uncorrectable errors", measured=3, expected=0),
    ]
    doc = vr.make(checks)
    raw = json.dumps({"node": "n1", "artifact": SHA, "outcome": "failed", **doc}).encode()
    assert [c["name"] for c in parse(raw, "n1").checks] == [c.name for c in checks]


@pytest.mark.parametrize(
    "record",
    [
        {"name": "x", "status": "pass", "measured": None, "expected": 1},
        {"name": "x", "status": "not-run", "measured": None, "expected": 1},
        {"name": "x", "status": "maybe", "measured": 1, "expected": 1},
        {"name": "x", "status": "pass", "measured": 1},
        "gpu_count: pass",
    ],
)
def test_records_the_validators_refuse_are_refused_here_too(record):
    with pytest.raises(vr.ReportError):
        vr.checks_of({"checks": [record]})
    raw = json.dumps({"node": "n1", "artifact": SHA, "outcome": "configured", "checks": [record]})
    with pytest.raises(ReportError):
        parse(raw.encode(), "n1")


def test_each_node_is_judged_against_its_own_groups_artifact(tmp_path):
    # Two node groups, two artifacts: the same report passes for one node and is stale for a
    # node of the other group.
    put(tmp_path, NODES[0], artifact=SHA)
    put(tmp_path, NODES[1], artifact=SHA)
    put(tmp_path, NODES[2], artifact=OLD)
    pinned = {NODES[0]: SHA, NODES[1]: OLD, NODES[2]: OLD}
    judged = wait(NODES[:3], tmp_path, pinned, deadline_s=0)
    assert judged.names(PASSED) == [NODES[0], NODES[2]]
    assert judged.names(STALE) == [NODES[1]]
    with pytest.raises(KeyError):
        wait(NODES, tmp_path, pinned, deadline_s=0)  # a node without its artifact
