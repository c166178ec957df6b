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
    out: dict[str, Any] = {"ansible_rc": rc, "nodes": reports, "checks": checks}
    gang = slurm_allocation(expected_hosts, reports)
    if gang is not None:
        checks.append(gang[0])
        out["slurm"] = gang[1]
    return out


def slurm_allocation(
    expected_hosts: list[str], reports: dict[str, dict]
) -> tuple[dict[str, Any], dict[str, Any]] | None:
    """Where the smoke job ran through Slurm (a node's report names its job: validators.launch
    writes `slurm`), the `slurm_allocation` check and the job: every node's part ran in one
    job, allocated every node at once. None where no report names a job."""
    jobs = {h: r["slurm"] for h, r in sorted(reports.items()) if isinstance(r.get("slurm"), dict)}
    if not jobs:
        return None
    ids = sorted({str(j.get("job_id")) for j in jobs.values()})
    first = next(iter(jobs.values()))
    job = {k: first.get(k) for k in ("job_id", "partition", "nodelist", "nodes", "gpus_per_node")}
    outside = sorted(h for h in expected_hosts if h in reports and h not in jobs)
    if len(ids) > 1:
        why = "the nodes ran in different Slurm jobs: " + ", ".join(
            f"{h} in {j.get('job_id')}" for h, j in jobs.items()
        )
    elif outside:
        why = f"{', '.join(outside)} ran outside Slurm job {ids[0]}"
    elif first.get("nodes") != len(expected_hosts):
        why = f"Slurm job {ids[0]} was allocated {first.get('nodes')} nodes, not the cluster's"
    else:
        why = ""
    detail = (
        f"Slurm job {job['job_id']} in {job['partition'] or '?'}: {job['nodelist']}, "
        f"{job['gpus_per_node']} GPUs per node"
    )
    check = {
        "name": "slurm_allocation",
        "status": "fail" if why else "pass",
        "measured": first.get("nodes"),
        "expected": len(expected_hosts),
        "unit": "nodes",
        "op": "==",
        "detail": f"{why}; {detail}" if why else f"every node at once: {detail}",
    }
    return check, job


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
