"""What an inference cluster's validation evidence must hold: the serving smoke job's report from
every node, as a training cluster's holds its smoke job's. The read-only serving checks (GPU
count, driver, ECC, the model mount) prove hardware facts, not that a node can serve; a report
without the job's measured decode rate proves nothing about serving, whatever else passed.

The job reports, per node, in the validators' check format (measured, expected, unit, status):

    {"name": "decode_tokens_per_s", "status": "pass", "measured": 812.4, "expected": 640.0,
     "unit": "tokens/s", "op": ">=", "node": "srv-01"}
    {"name": "cost_per_mtok", "status": "not-run", "measured": 3.59, "expected": null,
     "unit": "USD per 1M output tokens", ...}

The Validate stage's merge names each `<host>/<name>` (`acceptance.cluster.merge_reports`).
A promotion of an inference blueprint needs `decode_tokens_per_s` passed on every node it
counts; `cost_per_mtok` (informational: a figure, never judged) is read where the job could price it, and otherwise
worked out from the node's price and the measured rate."""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Mapping
from typing import Any

DECODE_CHECK = "decode_tokens_per_s"
COST_CHECK = "cost_per_mtok"  # validators/serving_checks.py's name
COST = "cost_per_million_output_tokens"  # what `measured` calls the figure


def _by_node(report: Mapping[str, Any], name: str) -> dict[str, Mapping[str, Any]]:
    """Each node's check `name`, by host (the merged report's `<host>/<name>`)."""
    out: dict[str, Mapping[str, Any]] = {}
    for c in report.get("checks") or []:
        if not isinstance(c, Mapping):
            continue
        host = c.get("node")
        if isinstance(host, str) and c.get("name") == f"{host}/{name}":
            out[host] = c
    return out


def serving_problem(report: Mapping[str, Any], hosts: Iterable[str]) -> str | None:
    """Why `report` does not prove that each of `hosts` served (None: it does)."""
    decode = _by_node(report, DECODE_CHECK)
    missing = sorted(h for h in hosts if h not in decode)
    if not decode:
        return (
            f"no serving smoke job in the report (no {DECODE_CHECK} check): an inference "
            "cluster is promoted on the serving smoke job's evidence, not on a training job's "
            "or on the read-only serving checks alone; run `rackform up` with this rackform"
        )
    if missing:
        return f"no serving smoke job's {DECODE_CHECK} from {', '.join(missing)}"
    unproven = sorted(h for h, c in decode.items() if c.get("status") != "pass")
    if unproven:
        how = ", ".join(
            f"{h} ({decode[h].get('status')}: {decode[h].get('detail') or 'no detail'})"
            for h in unproven
        )
        return f"the serving smoke job's {DECODE_CHECK} did not pass on {how}"
    return None


def measured(report: Mapping[str, Any], node_usd_per_hour: float | None) -> dict[str, Any]:
    """What the serving smoke job measured, across the nodes: the median decode rate and the
    median cost per million output tokens (the job's, or from `node_usd_per_hour` and the
    measured rate where the job could not price it). Empty where nothing was measured."""
    rates = [
        float(c["measured"])
        for c in _by_node(report, DECODE_CHECK).values()
        if c.get("status") == "pass" and isinstance(c.get("measured"), int | float)
    ]
    if not rates:
        return {}
    rate = statistics.median(rates)
    costs = [
        float(c["measured"])
        for c in _by_node(report, COST_CHECK).values()
        if isinstance(c.get("measured"), int | float) and not isinstance(c.get("measured"), bool)
    ]
    cost, basis = None, None
    if costs:
        cost, basis = statistics.median(costs), "the serving smoke job's figure"
    elif node_usd_per_hour is not None and rate > 0:
        cost, basis = (
            node_usd_per_hour / (rate * 3600) * 1e6,
            "the measured rate at the plan's node price",
        )
    return {DECODE_CHECK: rate, COST: cost, "cost_from": basis, "nodes": len(rates)}
