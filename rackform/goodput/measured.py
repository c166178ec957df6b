"""What a cluster measured of itself, for its checkpoint interval and its simulation: the
checkpoint write speed its last validation measured (the saved statement's `checkpoint_write`
check: the slowest node's GB/s) and the failure rate in heal's audit log (`lifecycle.service`:
node-hours in service and the nodes heal took out)."""

from __future__ import annotations

from pathlib import Path

from rackform.evidence.statement import EvidenceError
from rackform.health.reported import load
from rackform.lifecycle.record import Store
from rackform.lifecycle.service import measure
from rackform.plan.interval import FailureRate, Measured

CHECK = "checkpoint_write"


def checkpoint_gbps(evidence: Path, stack: str) -> float | None:
    """The slowest checkpoint write speed in the statement at `evidence` (the cluster-wide
    job's `checkpoint_write`, or each node's `<node>/checkpoint_write` where the nodes ran
    their own); None where none ran. EvidenceError (one line) for a file that is not a
    statement, or is another stack's."""
    rep = load(evidence)
    if rep.stack != stack:
        raise EvidenceError(f"{evidence}: the statement is stack {rep.stack!r}'s, not {stack!r}")
    speeds = [
        float(c["measured"])
        for c in rep.checks
        if str(c.get("name", "")).rpartition("/")[2] == CHECK
        and isinstance(c.get("measured"), int | float)
        and not isinstance(c.get("measured"), bool)
        and c["measured"] > 0
    ]
    return min(speeds, default=None)


def failure_rate(store: Store, shares: FailureRate) -> FailureRate | None:
    """The stack's own rate (the classes' shares are the catalog's: heal's log does not
    class a failure as a paper does); None where the log has no node-hours in service."""
    s = measure(store.log.path, store.stack)
    if s.node_hours <= 0:
        return None
    return FailureRate(
        s.failures / s.node_hours,
        f"audit log {store.log.path}: {s.failures} failures in {s.node_hours:,.0f} "
        f"node-hours in service",
        shares.hardware,
        shares.software,
        shares.network,
        measured=True,
        failures=s.failures,
        node_hours=s.node_hours,
    )


def measured(
    stack: str, catalog: FailureRate, evidence: Path | None, store: Store | None
) -> Measured:
    """`evidence`: the cluster's saved validation statement; `store`: its lifecycle files."""
    gbps = None if evidence is None else checkpoint_gbps(evidence, stack)
    rate = None if store is None else failure_rate(store, catalog)
    source = f"measured in {evidence}" if gbps is not None else ""
    return Measured(gbps, source, rate)
