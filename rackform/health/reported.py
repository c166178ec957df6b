"""The node's last validation report as `rackform heal` evidence: the Validate stage's signed
statement (the stack's `evidence` output, saved with `pulumi stack output evidence --json` and
given as `--evidence FILE`). A node that failed `node_perf` there (slower than its node group's
median: `acceptance.outliers`) is a `performance` fault; a node that failed any other
check of its own, a `validation` fault. A check that did not run says nothing.

A report says how a node was then. Where rackform re-validated the node since (heal's or a
rolling change's batch passed: the stack's audit log), the report is older than what is known
of it and is not read for that node.

The statement is read, not verified: heal names and drains, promotion is what trusts
(`evidence.statement` verifies against promotion-keys.yaml); the statement's stack must
be the cluster's."""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from rackform.acceptance.outliers import CHECK as NODE_PERF
from rackform.blueprint.schema.health import HealthPolicy
from rackform.evidence.signing import SigningError, payload
from rackform.evidence.statement import PREDICATE_TYPE, EvidenceError, from_file
from rackform.health.verdict import Evidence
from rackform.lifecycle.audit_view import Fold, view
from rackform.lifecycle.record import DONE, VALIDATED, Store

SERIES = "rackform validation report"


@dataclass(frozen=True)
class Reported:
    stack: str
    source: str  # the file it came from
    at: float  # validated_at, unix time
    checks: tuple[dict[str, Any], ...]


def load(path: Path) -> Reported:
    """One saved envelope's statement; EvidenceError (one line naming the file) otherwise."""
    env = from_file(path)
    try:
        st = json.loads(payload(env))
        pred = st["predicate"]
        if st.get("predicateType") != PREDICATE_TYPE:
            raise ValueError(st.get("predicateType"))
        at = datetime.fromisoformat(pred["validated_at"]).timestamp()
        checks = tuple(c for c in pred["report"]["checks"] if isinstance(c, dict))
        return Reported(str(pred["stack"]), str(path), at, checks)
    except (KeyError, TypeError, ValueError, SigningError) as exc:
        raise EvidenceError(
            f"{path}: not a rackform validation statement ({type(exc).__name__}: {exc})"
        ) from None


def _validated(state: dict, e: dict) -> None:
    """Per node, when rackform last re-validated it and the batch passed (heal or rollout)."""
    if e.get("event") != "batch" or e.get("status") not in (VALIDATED, DONE):
        return
    ts = e.get("ts")
    for node in e.get("nodes") or []:
        if isinstance(node, str) and isinstance(ts, int | float):
            state[node] = max(ts, state.get(node, ts))


REVALIDATED = Fold("revalidated", dict, _validated)


def revalidated(store: Store | None) -> dict[str, float]:
    return {} if store is None or not store.log.path.exists() else view(store.log.path, REVALIDATED)


def evidence(
    rep: Reported, policy: HealthPolicy, since: dict[str, float] | None = None
) -> dict[str, list[Evidence]]:
    """Each node's faults in the report, unless rackform re-validated it after (`since`)."""
    out: dict[str, list[Evidence]] = {}
    for c in rep.checks:
        node = c.get("node")
        if not isinstance(node, str) or not node or c.get("status") != "fail":
            continue
        if (since or {}).get(node, float("-inf")) >= rep.at:
            continue
        name = str(c.get("name", "")).split("/", 1)[-1]
        perf = name == NODE_PERF
        fault, action = (
            ("performance", policy.actions.performance)
            if perf
            else ("validation", policy.actions.validation)
        )
        detail = f"{name} failed in the validation of {_when(rep.at)}: {c.get('detail') or ''}"
        out.setdefault(node, []).append(
            Evidence(fault, detail.rstrip(": "), action, SERIES, c.get("measured"), rep.at)
        )
    return out


def _when(ts: float) -> str:
    return datetime.fromtimestamp(ts).astimezone().isoformat(timespec="seconds")
