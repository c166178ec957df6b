"""The work of the Pulumi validate stage: run the `smoke_train` role (host checks and the smoke
job on every node at once) and gather the nodes' reports into one.

The same role is what `rackform configure` converges; here it always runs anew
(`smoke_train_force`) so a validation measures the cluster as it is now, never an old report.
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path
from typing import Any

from rackform.hosts.runner import access_files, run
from rackform.plan.inventory import inventory_hosts


def _host_of(report_path: Path) -> str:
    return report_path.stem


def read_reports(report_dir: Path) -> dict[str, dict]:
    """Each node's report as smoke_train fetched it back: `<report_dir>/<run>/<host>.json`."""
    return {
        _host_of(p): json.loads(p.read_text(encoding="utf-8"))
        for p in sorted(report_dir.glob("*/*.json"))
    }


def merge_reports(expected_hosts: list[str], reports: dict[str, dict], rc: int) -> dict[str, Any]:
    """One report for the cluster: every node's checks, named `<host>/<check>`, plus a
    `node_reports` check that fails when a node sent no report (a node that said nothing
    proved nothing)."""
    checks: list[dict[str, Any]] = []
    for host in sorted(reports):
        for c in reports[host].get("checks", []):
            checks.append({**c, "name": f"{host}/{c.get('name')}", "node": host})
    missing = [h for h in expected_hosts if h not in reports]
    checks.append(
        {
            "name": "node_reports",
            "status": "fail" if missing or not expected_hosts else "pass",
            "measured": len(expected_hosts) - len(missing),
            "expected": len(expected_hosts),
            "unit": "nodes",
            "detail": f"no report from {', '.join(missing)} (ansible exit {rc})" if missing else "",
        }
    )
    return {"ansible_rc": rc, "nodes": reports, "checks": checks}


def validate_cluster(
    *,
    inventory: dict[str, Any],
    group_vars: dict[str, Any],
    validation: dict[str, Any],
    access: dict[str, str] | None = None,
    **options,
) -> dict[str, Any]:
    """The contract of rackform/stack/stages.py: JSON in, the cluster's report out.
    `validation` (strict, thresholds) is judged by the stage; `options` are `ansible_run.run`'s."""
    options.setdefault("out", lambda line: print(line, file=sys.stderr))
    extra = {**options.pop("extravars", {}), "smoke_train_force": True}
    with (
        access_files(access) as files,
        tempfile.TemporaryDirectory(prefix="rackform-validate-") as d,
    ):
        result = run(
            inventory,
            group_vars,
            roles=("smoke_train",),
            report_dir=Path(d),
            extravars=extra,
            **files,
            **options,
        )
        reports = read_reports(Path(d))
    return merge_reports(inventory_hosts(inventory), reports, result.rc)
