"""Performance outliers: each node's own figures against the median of its node group, so a slow
node (a noisy neighbour, a GPU trained down, a tired drive) is named at `up`, not averaged into
the cluster's MFU. Figures, each from the node's own report:

- the smoke job's self-measure (the validators' `node_perf`, `metrics.node_perf`): its slowest
  device's matrix multiply, its slowest GPU's host to device copies, an all-reduce among its
  own ranks;
- the host checks' direct-IO write to the checkpoint array (`storage_write_ceiling`).

A node whose figure is below `fraction` (the blueprint's `lifecycle.health.outlier_fraction`)
of its group's median, for any figure, fails `node_perf`, named with every figure that is
low; a figure only one node of the group has is compared with nothing (not run, said so).
Heal reads the same check: a node that fails it is `suspect` (its `performance` action)."""

from __future__ import annotations

import math
import statistics
from collections import defaultdict
from collections.abc import Mapping
from typing import Any

# (the figure, what it is, its unit)
FIGURES = (
    ("matmul_tflops", "matmul", "TFLOPS"),
    ("h2d_gbps", "host to device", "GB/s"),
    ("local_busbw_gbps", "all-reduce within the node", "GB/s"),
    ("storage_write_gbps", "checkpoint array write", "GB/s"),
)
DEFAULT_FRACTION = 0.8  # the health policy's default (`lifecycle.health`)
CHECK = "node_perf"


def _number(v: Any) -> float | None:
    """A figure: a positive, finite number (no bool, no NaN, no string)."""
    ok = isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v) and v > 0
    return float(v) if ok else None


def figures(report: Mapping[str, Any]) -> dict[str, float]:
    """The node's own figures from its report (each one measured, positive and finite)."""
    perf = (report.get("metrics") or {}).get("node_perf") or {}
    out = {k: n for k, _, _ in FIGURES[:3] if (n := _number(perf.get(k))) is not None}
    for c in report.get("checks") or []:
        if c.get("name") == "storage_write_ceiling" and (n := _number(c.get("measured"))):
            out["storage_write_gbps"] = n
    return out


def node_checks(
    reports: Mapping[str, Mapping[str, Any]],
    groups: Mapping[str, str],
    fraction: float = DEFAULT_FRACTION,
) -> list[dict[str, Any]]:
    """One `node_perf` check per node that sent a report (`groups`: node -> its node group; a
    node it does not name is a group of its own), in name order."""
    figs = {h: figures(r) for h, r in reports.items()}
    members: dict[str, list[str]] = defaultdict(list)
    for h in sorted(figs):
        members[groups.get(h, h)].append(h)
    out = []
    for h in sorted(figs):
        group = groups.get(h, h)
        peers = members[group]
        lines, ratios, low = [], [], []
        for key, what, unit in FIGURES:
            if key not in figs[h]:
                continue
            values = [figs[p][key] for p in peers if key in figs[p]]
            if len(values) < 2:
                continue
            median = statistics.median(values)
            ratio = figs[h][key] / median
            ratios.append(ratio)
            line = (
                f"{what} {figs[h][key]:.4g} {unit} = {ratio:.2f} x the median of node group"
                f" {group} ({median:.4g}, {len(values)} nodes)"
            )
            lines.append(line)
            if ratio < fraction:
                low.append(line)
        out.append(_check(h, fraction, ratios, low or lines, bool(low), len(peers)))
    return out


def _check(node: str, fraction: float, ratios, lines, slow: bool, peers: int) -> dict[str, Any]:
    base = {"name": CHECK, "node": node, "expected": fraction, "unit": "x group median"}
    if not ratios:
        why = (
            "the only node of its group in this run: no median to compare with"
            if peers < 2
            else "no figure of its own that another node of its group also measured"
        )
        return {**base, "status": "not-run", "measured": None, "op": "", "detail": why}
    detail = "; ".join(lines)
    if slow:
        detail = f"slower than its group: {detail}"
    return {
        **base,
        "status": "fail" if slow else "pass",
        "measured": round(min(ratios), 3),
        "op": ">=",
        "detail": detail,
    }
