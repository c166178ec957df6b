"""The audit log's incremental view (rackform/lifecycle/audit_view.py): the decisions read only what
was appended since the last run, and get what reading the whole log would give, however the
log grew (several stacks with hyphens interleaved, lines a kill cut) and whatever happened to
the cache beside it (hand-edited, stale, for a rotated log)."""

from __future__ import annotations

import json
import os
import random

import pytest

from rackform.lifecycle import audit_view
from rackform.lifecycle.audit import STANDING, AuditLog

STACKS = ["gpu-train-a-prod", "gpu-train-a-staging", "infer-b-dev"]
ACTIONS = ["stop", "terminate", "notify"]


def whole_scan(log: AuditLog, stack: str, action: str, since: float) -> tuple:
    """What the decisions read before the view: every entry, each time (the specification)."""
    acted = None
    for e in log.entries():
        if e.get("stack") != stack or e.get("action") != action or e.get("ts", 0) < since:
            continue
        if e.get("event") == "action":
            acted = e if e.get("state") in ("started", "done", "partial") else None
    warned = None
    for e in log.entries():
        if e.get("stack") != stack or e.get("action") != action:
            continue
        if e.get("event") == "warn" and e.get("state") == "sent":
            warned = warned or e
        elif e.get("event") in ("withdrawn", "action"):
            warned = None
    return acted, warned


def entry(rng: random.Random, ts: float) -> dict:
    event = rng.choice(["warn", "warn", "withdrawn", "action", "note"])
    state = {
        "warn": rng.choice(["sent", "sent", "failed"]),
        "action": rng.choice(["started", "done", "partial", "failed"]),
    }.get(event, "")
    return {"ts": ts, "stack": rng.choice(STACKS), "action": rng.choice(ACTIONS),
            "event": event, "state": state, "run": f"r{rng.randrange(1000)}"}  # fmt: skip


def cut(log: AuditLog, rng: random.Random) -> None:
    """A run killed in the middle of its write: part of a line, no newline."""
    with log.path.open("ab") as f:
        f.write(json.dumps(entry(rng, 0))[: rng.randrange(1, 40)].encode())


def agrees(log: AuditLog, since: float) -> None:
    for stack in [*STACKS, "never-seen"]:
        for action in ACTIONS:
            assert (log.acted_since(stack, action, since), log.warning(stack, action)) == (
                whole_scan(log, stack, action, since)
            ), (stack, action)


@pytest.mark.parametrize("seed", range(6))
def test_the_view_gives_what_reading_the_whole_log_gives(tmp_path, seed):
    rng = random.Random(seed)
    log = AuditLog(tmp_path / "audit.jsonl")
    ts = 1_000_000.0
    agrees(log, ts)  # no log yet
    for _ in range(12):  # runs, each appending some entries, and the decisions reading between
        for _ in range(rng.randrange(0, 15)):
            ts += rng.uniform(1, 600)
            log.append(entry(rng, ts))
        if rng.random() < 0.3:
            cut(log, rng)
        agrees(log, ts - rng.uniform(0, 3000))


def test_a_run_reads_only_what_was_appended_since_the_last(tmp_path, monkeypatch):
    log = AuditLog(tmp_path / "audit.jsonl")
    for i in range(500):
        log.append({"ts": i, "stack": STACKS[i % 3], "action": "stop", "event": "warn",
                    "state": "sent"})  # fmt: skip
    starts: list[int] = []
    real = audit_view.scan

    def counted(path, offset):
        starts.append(offset)
        return real(path, offset)

    monkeypatch.setattr(audit_view, "scan", counted)
    assert log.warning(STACKS[0], "stop")["ts"] == 0
    size = log.path.stat().st_size
    log.append({"ts": 600, "stack": STACKS[0], "action": "stop", "event": "withdrawn"})
    assert log.warning(STACKS[0], "stop") is None
    assert log.warning(STACKS[1], "stop")["ts"] == 1  # no new line: nothing read
    assert starts == [0, size, log.path.stat().st_size]


def test_a_line_being_written_waits_and_a_cut_one_is_passed_over(tmp_path):
    log = AuditLog(tmp_path / "audit.jsonl")
    log.append({"ts": 1, "stack": "a-b", "action": "stop", "event": "warn", "state": "sent"})
    line = json.dumps({"ts": 2, "stack": "a-b", "action": "stop", "event": "withdrawn"})
    with log.path.open("ab") as f:
        f.write(line.encode())  # whole JSON, its newline not yet written
    assert log.warning("a-b", "stop")["ts"] == 1  # not read before its newline
    with log.path.open("ab") as f:
        f.write(b"\n")
    assert log.warning("a-b", "stop") is None  # read once whole
    with log.path.open("ab") as f:
        f.write(b'{"ts": 3, "stack": "a-b", "act')  # a kill mid-write
    log.append({"ts": 4, "stack": "a-b", "action": "stop", "event": "warn", "state": "sent"})
    assert log.warning("a-b", "stop")["ts"] == 4


def standing_cache(log: AuditLog):
    return log.path.with_name(f"{log.path.name}.{STANDING.name}.json")


@pytest.mark.parametrize(
    "spoil",
    [
        lambda c: c.write_text("{not json"),
        lambda c: c.write_text(json.dumps({"version": 1})),
        lambda c: c.write_text(json.dumps({**json.loads(c.read_text()), "offset": 10**9})),
        lambda c: c.write_text(json.dumps({**json.loads(c.read_text()), "offset": "12"})),
        lambda c: c.write_text(json.dumps({**json.loads(c.read_text()), "version": 0})),
    ],
    ids=["not-json", "fields-missing", "offset-past-the-end", "offset-not-a-number", "version"],
)
def test_a_cache_that_cannot_be_trusted_is_rebuilt_from_the_log(tmp_path, spoil):
    log = AuditLog(tmp_path / "audit.jsonl")
    log.append({"ts": 5, "stack": "x-1", "action": "stop", "event": "action", "state": "done"})
    assert log.acted_since("x-1", "stop", 0)["ts"] == 5
    spoil(standing_cache(log))
    assert log.acted_since("x-1", "stop", 0)["ts"] == 5
    assert json.loads(standing_cache(log).read_text())["offset"] == log.path.stat().st_size


def test_a_log_edited_cut_or_rotated_by_hand_is_read_again(tmp_path):
    log = AuditLog(tmp_path / "audit.jsonl")
    log.append({"ts": 5, "stack": "x-1", "action": "stop", "event": "action", "state": "done"})
    log.append({"ts": 6, "stack": "x-1", "action": "stop", "event": "warn", "state": "sent"})
    assert log.warning("x-1", "stop")["ts"] == 6
    # Edited in place, the same length: the last action marked failed, the warning withdrawn.
    text = log.path.read_text()
    edited = text.replace('"state": "done"', '"state": "fail"').replace(
        '"event": "warn"', '"event": "note"'
    )
    assert len(edited) == len(text)
    with log.path.open("r+") as f:  # in place: same inode, same size
        f.write(edited)
    assert log.acted_since("x-1", "stop", 0) is None and log.warning("x-1", "stop") is None
    # Cut short by hand: the last line gone.
    log.path.write_text(edited.splitlines(keepends=True)[0])
    assert log.warning("x-1", "stop") is None
    # Rotated: moved aside, a new log begun (another inode, which may be the same size).
    os.rename(log.path, tmp_path / "audit.jsonl.1")
    log.append({"ts": 9, "stack": "x-1", "action": "stop", "event": "warn", "state": "sent"})
    assert log.acted_since("x-1", "stop", 0) is None
    assert log.warning("x-1", "stop")["ts"] == 9


def test_a_cache_that_cannot_be_written_costs_a_longer_read_not_a_wrong_answer(tmp_path):
    d = tmp_path / "ro"
    d.mkdir()
    log = AuditLog(d / "audit.jsonl")
    log.append({"ts": 5, "stack": "x-1", "action": "stop", "event": "action", "state": "done"})
    os.chmod(d, 0o500)
    try:
        if os.access(d, os.W_OK):  # root writes anyway: make the cache a directory instead
            os.chmod(d, 0o700)
            standing_cache(log).mkdir()
        assert log.acted_since("x-1", "stop", 0)["ts"] == 5
        assert log.acted_since("x-1", "stop", 6) is None
    finally:
        os.chmod(d, 0o700)
    assert not list(d.glob("*.tmp"))
