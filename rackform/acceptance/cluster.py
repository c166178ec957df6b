"""The work of the Pulumi validate stage, by the cluster's purpose.

Training: run the `smoke_train` role (host checks and the smoke job on every node at once) and
gather the nodes' reports into one. The same role is what `rackform configure` converges; here
it always runs anew (`smoke_train_force`) so a validation measures the cluster as it is now,
never an old report.

Inference: serving nodes never run the training smoke job, DCGM diagnostics or a storage write
test from `up` (they would take the GPUs and disks of a fleet that serves traffic, and on an
autoscaled fleet every membership change reruns this stage). A serving node's validation is
`validators.serving`: the GPU count, the driver branch, uncorrectable ECC errors, pending or
failed row remaps and the model mount, read-only and in seconds. A node that joins an
autoscaling group runs these itself before it completes its launch hook (it never takes traffic
otherwise); this stage runs the same module over every current serving
node (the validators packed as one zip application, which Ansible's `script` module copies to
a temporary directory and runs: nothing is installed or written on the node) and merges the
reports as for training.
"""

from __future__ import annotations

import copy
import json
import sys
import tempfile
import zipfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from rackform.acceptance import cliques, outliers
from rackform.paths import validators_dir
from rackform.plan.inventory import group_name, host_groups, inventory_hosts
from rackform.push.access import access_files
from rackform.push.retries import run


def _host_of(report_path: Path) -> str:
    return report_path.stem


def read_reports(report_dir: Path) -> dict[str, dict]:
    """Each node's report as smoke_train fetched it back: `<report_dir>/<run>/<host>.json`."""
    return {
        _host_of(p): json.loads(p.read_text(encoding="utf-8"))
        for p in sorted(report_dir.glob("*/*.json"))
    }


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
    **options,
) -> dict[str, Any]:
    """The Validate stage's contract (`stages.ValidateProvider`): JSON in, the cluster's report out.
    `validation` (strict, thresholds) is judged by the stage; `options` are `ansible_run.run`'s.
    Training: the smoke_train role; inference: the serving checks (`serving_playbook`)."""
    options.setdefault("out", lambda line: print(line, file=sys.stderr))
    extra = {**options.pop("extravars", {}), "smoke_train_force": True}
    with (
        access_files(access) as files,
        tempfile.TemporaryDirectory(prefix="rackform-validate-") as d,
    ):
        reports_at = Path(d)
        if group_vars.get("rackform_purpose") == "inference":
            (reports_at / "serving").mkdir()
            book = reports_at / "serving.yml"
            app = serving_app(reports_at / "validators.pyz")
            book.write_text(yaml.safe_dump(serving_playbook(reports_at, app)), encoding="utf-8")
            inv = with_expected_gpus(inventory, validation)
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
    # Serving nodes measure nothing of themselves (no job): only training nodes are compared.
    serving = group_vars.get("rackform_purpose") == "inference"
    expected = validation.get("expected", {})
    fraction = expected.get("outlier_fraction", outliers.DEFAULT_FRACTION)
    groups = None if serving else host_groups(inventory, expected.get("groups") or {})
    domains = expected.get("domains") or {}
    return merge_reports(inventory_hosts(inventory), reports, result.rc, groups, fraction, domains)


def serving_app(dest: Path, validators: Path | None = None) -> Path:
    """The validators (`validators_dir()`, as they ship to nodes) as one file Python runs: a zip
    application (PEP 441) whose `__main__` is validators.serving's, exiting with its status."""
    src = validators or validators_dir()
    with zipfile.ZipFile(dest, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr(
            "__main__.py", "import sys\nfrom validators.serving import main\nsys.exit(main())\n"
        )
        for path in sorted(src.rglob("*.py")):
            if "__pycache__" not in path.parts:
                z.write(path, (Path("validators") / path.relative_to(src)).as_posix())
    return dest


def serving_playbook(report_dir: Path, app: Path) -> list[dict[str, Any]]:
    """The read-only play a serving cluster's validation runs: the serving checks on each node
    (`app`, the `serving_app`, copied to Ansible's temporary directory and run there), its
    report kept on the controller as `<report_dir>/serving/<host>.json`."""
    args = (
        "--expect-gpus {{ rackform_serving_gpus | default(0) | int }}"
        " --driver-branch {{ nvidia_driver_branch | default('') | quote }}"
        " --mount {{ nvme_raid_mount | default('') | quote }}"
    )
    return [
        {
            "name": "Validate the serving nodes (read-only: no job, no diagnostics, no writes)",
            "hosts": "gpu_nodes",
            "gather_facts": False,
            "tasks": [
                {
                    "name": "Run the serving checks",
                    "ansible.builtin.script": {
                        "cmd": f"{app} {args}",
                        "executable": "{{ ansible_python_interpreter | default('python3') }}",
                    },
                    "register": "_rackform_serving",
                    "changed_when": False,
                    # 1 is a failed check, which the report says; anything else is an error.
                    "failed_when": "_rackform_serving.rc not in [0, 1]",
                },
                {
                    "name": "Keep the node's report",
                    "ansible.builtin.copy": {
                        "content": "{{ _rackform_serving.stdout | from_json | to_json }}",
                        "dest": f"{report_dir}/serving/{{{{ inventory_hostname }}}}.json",
                        "mode": "0600",
                    },
                    "delegate_to": "localhost",
                    "become": False,
                },
            ],
        }
    ]


def with_expected_gpus(inventory: dict[str, Any], validation: dict[str, Any]) -> dict[str, Any]:
    """The inventory with each node group's GPUs per node (`rackform_serving_gpus`), what the
    serving checks expect on its nodes."""
    inv = copy.deepcopy(inventory)
    groups = inv["all"]["children"]["gpu_nodes"]["children"]
    for name, group in (validation.get("expected", {}).get("groups") or {}).items():
        if group_name(name) in groups:
            gvars = groups[group_name(name)].setdefault("vars", {})
            gvars["rackform_serving_gpus"] = group["gpus_per_node"]
    return inv
