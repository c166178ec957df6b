"""Node-hours in service and failures from an audit log as it comes: samples heal wrote,
lines merged out of order, a gap where heal did not run, a hand-edited line, hyphenated node
names, other stacks' entries."""

from __future__ import annotations

import json

import pytest

from rackform.goodput.measured import failure_rate
from rackform.lifecycle.audit import AuditLog
from rackform.lifecycle.record import Store
from rackform.lifecycle.service import measure, record
from rackform.plan.interval import FailureRate

STACK = "llm-train-a-prod"
T0 = 1_764_000_000.0


def sample(ts: float, n: int, stack: str = STACK) -> dict:
    return {"ts": ts, "stack": stack, "event": "in-service", "in_service": n, "nodes": 4}


def write(path, entries) -> None:
    path.write_text("".join(e if isinstance(e, str) else json.dumps(e) + "\n" for e in entries))


def test_samples_integrate_to_node_hours(tmp_path):
    # Every five minutes for ten hours: four nodes in service, then three from hour 5.
    log = [sample(T0 + i * 300, 4 if i < 60 else 3) for i in range(121)]
    write(tmp_path / "a.log", log)
    s = measure(tmp_path / "a.log", STACK)
    assert s.node_hours == pytest.approx(4 * 5 + 3 * 5)
    assert (s.samples, s.failures, s.gaps, s.skipped) == (121, 0, 0, 0)


def test_a_held_out_log(tmp_path):
    entries = [
        sample(T0 + 3600, 3),
        sample(T0, 4),  # out of order: an hour earlier than the line above
        {"ts": T0 + 1800, "stack": STACK, "event": "heal", "kind": "heal",
         "nodes": {"gpu-node-07": "reboot", "gpu-node-12": "reset"}},
        '{"ts": 1764003600, "stack": "llm-train-a-prod", "event": "in-se\n',  # cut by a kill
        "# edited by hand: node 3 was moved to rack b\n",
        {"ts": "yesterday", "stack": STACK, "event": "in-service", "in_service": 4},
        {"ts": T0 + 5400, "stack": STACK, "event": "ticket", "kind": "heal",
         "node": "gpu-node-07", "action": "reboot", "why": "reboot failed 2 times"},
        {"ts": T0 + 5500, "stack": STACK, "event": "ticket", "kind": "heal",
         "node": "ib-leaf-3-node-2", "action": "drain", "why": "fabric port down"},
        {"ts": T0 + 5600, "stack": STACK, "event": "replace", "node": "gpu-node-12", "ok": True},
        sample(T0 + 7200, 4),
        sample(T0 + 7200 + 7 * 3600, 4),  # heal stopped for seven hours: a gap, not counted
        sample(T0 + 7200 + 8 * 3600, 4),
        sample(T0 + 900, 2, stack="other-cluster-prod"),
    ]  # fmt: skip
    write(tmp_path / "a.log", entries)
    s = measure(tmp_path / "a.log", STACK)
    # T0..T0+1h: 4 nodes; +1h..+2h: 3; the 7 h gap: nothing; the last hour: 4.
    assert s.node_hours == pytest.approx(4 + 3 + 4)
    # Two remediated, one drained for a person from the start, one replaced; the ticket after
    # gpu-node-07's failed reboots is the same failure, not another.
    assert s.failures == 4
    assert (s.samples, s.gaps, s.skipped) == (5, 1, 3)


def test_no_log_and_no_samples(tmp_path):
    s = measure(tmp_path / "missing.log", STACK)
    assert (s.node_hours, s.failures, s.samples) == (0, 0, 0)
    shares = FailureRate(1.5e-4, "catalog", 0.75, 0.15, 0.10)
    assert failure_rate(Store(tmp_path, STACK), shares) is None


def test_heals_samples_give_the_clusters_rate(tmp_path):
    store = Store(tmp_path, STACK)
    record(store.log, STACK, 4, 4)
    entries = [json.loads(x) for x in store.log.path.read_text().splitlines()]
    assert entries[0]["event"] == "in-service" and entries[0]["in_service"] == 4
    # Then a year of samples, hourly, four nodes, and three failures.
    log = AuditLog(tmp_path / f"{STACK}.log")
    lines = [sample(T0 + h * 3600, 4) for h in range(8761)]
    lines += [
        {"ts": T0 + 99 * 3600, "stack": STACK, "event": "heal", "nodes": {f"n-{i}": "reboot"}}
        for i in range(3)
    ]
    write(log.path, lines)
    shares = FailureRate(1.5e-4, "catalog", 0.75, 0.15, 0.10)
    r = failure_rate(store, shares)
    assert r.measured and (r.failures, r.node_hours) == (3, pytest.approx(4 * 8760))
    assert r.per_node_hour == pytest.approx(3 / 35_040)
    assert (r.hardware, r.software, r.network) == (0.75, 0.15, 0.10)
    assert "3 failures in 35,040 node-hours in service" in r.source
