"""One rack-scale NVLink domain's trays, compared: `nvlink_domain_clique`. Each tray's host
checks measure the cluster UUID and clique id its GPUs registered in (`gpu_fabric`,
validators/nvlink_domain.py, from `nvidia-smi -q`'s Fabric section); no tray sees the others,
so the comparison is made here, where the Validate stage holds every tray's report.

A pass: every tray the plan puts in the domain sent a report whose `gpu_fabric` passed, all of
them with the same cluster and clique. A tray in another clique is not in the domain's NVLink
partition, whatever its rack: it is named with its answer and the others', never outvoted
(where no clique holds most trays, each is named with its trays). A tray with no answer (no
report, no `gpu_fabric` in its report, or its GPUs not all registered) fails the domain too,
named with why."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

CHECK = "nvlink_domain_clique"
FABRIC = "gpu_fabric"  # the tray's own check, whose `measured` is its cluster and clique


def tray_answer(report: Mapping[str, Any] | None) -> tuple[str | None, str]:
    """The cluster and clique a tray's report measured, or None and why there is none."""
    if report is None:
        return None, "no report"
    fabric = next((c for c in report.get("checks") or [] if c.get("name") == FABRIC), None)
    if fabric is None:
        return None, f"no {FABRIC} in its report"
    measured = fabric.get("measured")
    if fabric.get("status") != "pass" or not isinstance(measured, str) or not measured:
        return None, f"{FABRIC} {fabric.get('status') or 'without a status'}"
    return measured, ""


def domain_check(name: str, trays: Sequence[str], reports: Mapping[str, Any]) -> dict[str, Any]:
    """`nvlink_domain_clique` for the domain `name` of `trays` (the plan's), from `reports`
    (node -> its report; a tray absent from it sent none)."""
    expected = f"every tray of {name} in one cluster and clique"
    base = {"name": CHECK, "domain": name, "expected": expected, "unit": "", "op": "=="}
    if not trays:
        return {**base, "status": "not-run", "measured": None, "detail": "the plan names no tray"}
    seen: dict[str, list[str]] = {}
    unknown: list[str] = []
    for tray in trays:
        answer, why = tray_answer(reports.get(tray))
        if answer is None:
            unknown.append(f"{tray} ({why})")
        else:
            seen.setdefault(answer, []).append(tray)
    measured = f"{len(seen)} cliques" if len(seen) != 1 else next(iter(seen))
    problems = []
    if len(seen) > 1:
        common = max(seen, key=lambda i: (len(seen[i]), i))
        if 2 * len(seen[common]) > sum(map(len, seen.values())):
            odd = "; ".join(f"{', '.join(t)}: {i}" for i, t in sorted(seen.items()) if i != common)
            problems.append(f"{odd} (the other {len(seen[common])} trays: {common})")
        else:  # no clique holds most trays: each one named with its trays
            each = "; ".join(f"{', '.join(t)}: {i}" for i, t in sorted(seen.items()))
            problems.append(f"{each} (no clique holds most of the trays)")
    if unknown:
        problems.append(f"no cluster and clique from {', '.join(unknown)}")
    if problems:
        return {**base, "status": "fail", "measured": measured, "detail": "; ".join(problems)}
    return {**base, "status": "pass", "measured": measured, "detail": f"{len(trays)} trays"}


def domain_checks(
    domains: Mapping[str, Sequence[str]], reports: Mapping[str, Any]
) -> list[dict[str, Any]]:
    """One `nvlink_domain_clique` per domain (`domains`: each rack-scale domain's trays, as
    the plan puts them), in the domains' names' order."""
    return [domain_check(d, domains[d], reports) for d in sorted(domains)]
