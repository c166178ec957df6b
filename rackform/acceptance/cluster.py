"""The work of the Pulumi validate stage, by the cluster's purpose.

Training: run the `smoke_train` role (host checks and the smoke job on every node at once) and
gather the nodes' reports into one. The same role is what `rackform configure` converges; here
it always runs anew (`smoke_train_force`) so a validation measures the cluster as it is now,
never an old report.

Inference: serving nodes never run the training smoke job, DCGM diagnostics or a storage write
test from `up`. Every serving node gets `validators.serving`: the GPU count, the driver branch,
uncorrectable ECC errors, pending or failed row remaps and the model mount, read-only and in
seconds. The nodes not yet in service (new to the stage, or not passed at its last run: the
provider passes `in_service`) also run the serving smoke job, which proves they can serve the
workload (`serving_plays`); a node in service never does (it would take the GPUs of a node
that serves traffic, and on an autoscaled fleet every membership change reruns this stage). A
node that joins an autoscaling group runs both itself before it completes its launch hook (it
never takes traffic otherwise). The reports are merged as for training.
"""

from __future__ import annotations

import json
import sys
import tempfile
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from rackform.acceptance import cliques, outliers
from rackform.acceptance.serving_plays import (
    SMOKE_DIR,
    jobs_of,
    serving_inventory,
    serving_playbook,
)
from rackform.plan.inventory import host_groups, inventory_hosts
from rackform.push.access import access_files
from rackform.push.retries import run


def _host_of(report_path: Path) -> str:
    return report_path.stem


def read_reports(report_dir: Path) -> dict[str, dict]:
    """Each node's report as the plays fetched it back: `<report_dir>/<run>/<host>.json`. A
    node with reports in two directories (a serving node's checks and its serving smoke job)
    has one report, with the checks of both."""
    out: dict[str, dict] = {}
    for p in sorted(report_dir.glob("*/*.json")):
        doc = json.loads(p.read_text(encoding="utf-8"))
        host = _host_of(p)
        if host in out:
            was = out[host]
            doc = {**doc, **was, "checks": [*was.get("checks", []), *doc.get("checks", [])]}
        out[host] = doc
    return out


def not_in_service(
    inventory: dict[str, Any],
    jobs: Mapping[str, Any],
    in_service: Iterable[str],
    groups: Mapping[str, Any] | None = None,
) -> list[str]:
    """The serving nodes the smoke job runs on: those of a node group with a job (a serving
    workload) that are not in service (passed at the last validation). Never a node of a group
    configured at boot (`groups`: the validation's expected groups): it ran the job in its own
    bootstrap and joined the inventory only on a pass, so it may be serving now."""
    serving = set(in_service)
    booted = {n for n, g in (groups or {}).items() if g.get("configured") == "boot"}
    of = host_groups(inventory, jobs)
    return sorted(h for h, g in of.items() if g in jobs and g not in booted and h not in serving)


def no_job_report(reports: dict[str, dict], new: list[str], smoke_dir: Path) -> None:
    """A failed `serving_smoke` check on each node of `new` whose job sent no report: a node
    that was to prove it can serve and said nothing proved nothing."""
    for host in new:
        if not (smoke_dir / f"{host}.json").is_file():
            reports.setdefault(host, {"checks": []}).setdefault("checks", []).append({
                "name": "serving_smoke",
                "status": "fail",
                "measured": None,
                "expected": "a report",
                "unit": "",
                "detail": "the serving smoke job sent no report (the run's log says why)",
            })  # fmt: skip


def merge_reports(
    expected_hosts: list[str],
    reports: dict[str, dict],
    rc: int,
    groups: Mapping[str, str] | None = None,
    outlier_fraction: float = outliers.DEFAULT_FRACTION,
    domains: Mapping[str, Sequence[str]] | None = None,
) -> dict[str, Any]:
    """One report for the cluster: every node's checks, named `<host>/<check>`, plus a
    `node_reports` check that fails when a node sent no report (a node that said nothing
    proved nothing). With `groups` (node -> its node group), each node's own figures against
    its group's median (`<host>/node_perf`, `outliers.node_checks`). With `domains` (each
    rack-scale NVLink domain's trays, as the plan puts them), each domain's trays compared
    (`<domain>/nvlink_domain_clique`, `cliques.domain_checks`)."""
    checks: list[dict[str, Any]] = []
    for host in sorted(reports):
        for c in reports[host].get("checks", []):
            checks.append({**c, "name": f"{host}/{c.get('name')}", "node": host})
    if groups is not None:
        for c in outliers.node_checks(reports, groups, outlier_fraction):
            checks.append({**c, "name": f"{c['node']}/{c['name']}"})
    for c in cliques.domain_checks(domains or {}, reports):
        checks.append({**c, "name": f"{c['domain']}/{c['name']}"})
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
    in_service: Iterable[str] = (),
    **options,
) -> dict[str, Any]:
    """The Validate stage's contract (`stages.ValidateProvider`): JSON in, the cluster's report out.
    `validation` (strict, thresholds) is judged by the stage; `options` are `ansible_run.run`'s.
    Training: the smoke_train role; inference: the serving checks on every node and the serving
    smoke job on those not `in_service` (`serving_plays`)."""
    options.setdefault("out", lambda line: print(line, file=sys.stderr))
    extra = {**options.pop("extravars", {}), "smoke_train_force": True}
    serving = group_vars.get("rackform_purpose") == "inference"
    expected = validation.get("expected", {})
    jobs = jobs_of(group_vars) if serving else {}
    new = not_in_service(inventory, jobs, in_service, expected.get("groups"))
    with (
        access_files(access) as files,
        tempfile.TemporaryDirectory(prefix="rackform-validate-") as d,
    ):
        reports_at = Path(d)
        if serving:
            book = reports_at / "serving.yml"
            plays = serving_playbook(reports_at, new)
            book.write_text(yaml.safe_dump(plays), encoding="utf-8")
            inv = serving_inventory(inventory, validation, jobs, new)
            result = run(inv, group_vars, playbook=book, **files, **options)
        else:
            result = run(
                inventory,
                group_vars,
                roles=("smoke_train",),
                report_dir=reports_at,
                extravars=extra,
                **files,
                **options,
            )
        reports = read_reports(reports_at)
        no_job_report(reports, new, reports_at / SMOKE_DIR)
    # Only training nodes are compared with their group's median: a serving node's smoke job
    # runs only while it is not in service, and is judged against the plan's figures.
    fraction = expected.get("outlier_fraction", outliers.DEFAULT_FRACTION)
    groups = None if serving else host_groups(inventory, expected.get("groups") or {})
    domains = expected.get("domains") or {}
    return merge_reports(inventory_hosts(inventory), reports, result.rc, groups, fraction, domains)
