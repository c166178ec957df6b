"""The plays an inference cluster's Validate stage runs, and what they are given.

Every serving node: the read-only serving checks (`validators.serving`: GPU count, driver branch,
uncorrectable ECC errors, row remaps, the model mount), in seconds, nothing written on the node.

Serving nodes not yet in service (`not_in_service`: new to the cluster, or not passed at the
last validation): the serving smoke job as well (`validators.serving_smoke`: the model loaded
from its mount, or a small stand-in written to node-local scratch, generation at the
workload's concurrency, TTFT, inter-token latency, tokens/s, MBU, peak memory and the cost per
million output tokens against what the plan expects). It takes the node's GPU for a minute or
more, so it never runs on a node that takes traffic. It runs in the node's smoke job
environment (`smoke_train_venv`: torch, which the site playbook's serving play installs and a
node image bakes), from a temporary directory it removes.

Both ship the validators as one zip application (PEP 441) that Ansible's `script` module copies
to a temporary directory and runs; the reports come back to the controller as
`<report_dir>/serving/<host>.json` and `<report_dir>/serving_smoke/<host>.json`."""

from __future__ import annotations

import copy
import zipfile
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from rackform.acceptance.argv import SERVING_DEADLINE_S, serving_job_argv
from rackform.catalog import load_catalog
from rackform.paths import validators_dir
from rackform.plan.inventory import group_name
from rackform.plan.serving_vars import SERVING_VAR

CHECKS_DIR, SMOKE_DIR = "serving", "serving_smoke"
# The inventory group of the nodes the smoke job runs on (a group, never their names as a host
# pattern: a node may be called `all`).
NEW_GROUP = "rackform_serving_new"
# The host variable that names a node's serving smoke job's arguments (its group's).
JOB_ARGS = "rackform_serving_job_args"
# Beyond the job's own deadline (and its backstop's grace): Ansible's bound on the task.
TASK_GRACE_S = 120


def validators_app(dest: Path, module: str, validators: Path | None = None) -> Path:
    """The validators (`validators_dir()`, as they ship to nodes) as one file Python runs: a zip
    application whose `__main__` is `module`'s `main`, exiting with its status."""
    src = validators or validators_dir()
    with zipfile.ZipFile(dest, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr("__main__.py", f"import sys\nfrom {module} import main\nsys.exit(main())\n")
        for path in sorted(src.rglob("*.py")):
            if "__pycache__" not in path.parts:
                z.write(path, (Path("validators") / path.relative_to(src)).as_posix())
    return dest


def checks_play(report_dir: Path, app: Path) -> dict[str, Any]:
    """The read-only serving checks on every node, each report kept on the controller."""
    args = (
        "--expect-gpus {{ rackform_serving_gpus | default(0) | int }}"
        " --driver-branch {{ nvidia_driver_branch | default('') | quote }}"
        " --mount {{ nvme_raid_mount | default('') | quote }}"
    )
    return {
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
                    "dest": f"{report_dir}/{CHECKS_DIR}/{{{{ inventory_hostname }}}}.json",
                    "mode": "0600",
                },
                "delegate_to": "localhost",
                "become": False,
            },
        ],
    }


def smoke_play(report_dir: Path, app: Path) -> dict[str, Any]:
    """The serving smoke job on the nodes of `NEW_GROUP`, each report kept on the controller.
    Exit 1 is a failed check and 3 a job its deadline's backstop stopped: both wrote their
    report, which says why; anything else fails the task."""
    work = "{{ _rackform_smoke_dir.path }}"
    cmd = (
        f"{app} --report {work}/report.json --no-table --scratch {work}"
        f" {{{{ {JOB_ARGS} | map('quote') | join(' ') }}}}"
    )
    return {
        "name": "Run the serving smoke job on the serving nodes not yet in service",
        "hosts": f"gpu_nodes:&{NEW_GROUP}",
        "gather_facts": False,
        "tasks": [
            {
                "name": "Make the job's scratch directory (the stand-in model, its report)",
                "ansible.builtin.tempfile": {"state": "directory", "prefix": "rackform-serving."},
                "register": "_rackform_smoke_dir",
            },
            {
                "name": "Run the serving smoke job, then keep its report and remove its scratch",
                "block": [
                    {
                        "name": "Run the serving smoke job",
                        "ansible.builtin.script": {
                            "cmd": cmd,
                            "executable": (
                                "{{ smoke_train_venv | default('/opt/rackform/venv') }}/bin/python"
                            ),
                        },
                        "timeout": int(SERVING_DEADLINE_S + TASK_GRACE_S),
                        "register": "_rackform_smoke",
                        "changed_when": False,
                        "failed_when": "_rackform_smoke.rc not in [0, 1, 3]",
                    },
                    {
                        "name": "Keep the job's report",
                        "ansible.builtin.fetch": {
                            "src": f"{work}/report.json",
                            "dest": f"{report_dir}/{SMOKE_DIR}/{{{{ inventory_hostname }}}}.json",
                            "flat": True,
                        },
                    },
                ],
                "always": [
                    {
                        "name": "Remove the job's scratch directory",
                        "ansible.builtin.file": {"path": work, "state": "absent"},
                    }
                ],
            },
        ],
    }


def serving_playbook(report_dir: Path, new: list[str]) -> list[dict[str, Any]]:
    """The Validate stage's playbook for a serving cluster: the checks on every node, the smoke
    job on `new` (the nodes not yet in service), with their validators apps in `report_dir`."""
    (report_dir / CHECKS_DIR).mkdir(exist_ok=True)
    plays = [
        checks_play(report_dir, validators_app(report_dir / "checks.pyz", "validators.serving"))
    ]
    if new:
        (report_dir / SMOKE_DIR).mkdir(exist_ok=True)
        app = validators_app(report_dir / "smoke.pyz", "validators.serving_smoke")
        plays.append(smoke_play(report_dir, app))
    return plays


def serving_inventory(
    inventory: dict[str, Any],
    validation: Mapping[str, Any],
    jobs: Mapping[str, Any],
    new: Iterable[str] = (),
) -> dict[str, Any]:
    """The inventory with each node group's GPUs per node (`rackform_serving_gpus`, what the
    serving checks expect), its serving smoke job's arguments (`JOB_ARGS`, from the plan's
    `rackform_serving_smoke` entry for the group: `jobs`) and the nodes the job runs on
    (`new`) as `NEW_GROUP`."""
    inv = copy.deepcopy(inventory)
    new = list(new)
    if new:
        inv["all"]["children"][NEW_GROUP] = {"hosts": {h: {} for h in new}}
    groups = inv["all"]["children"]["gpu_nodes"]["children"]
    for name, group in (validation.get("expected", {}).get("groups") or {}).items():
        if group_name(name) in groups:
            gvars = groups[group_name(name)].setdefault("vars", {})
            gvars["rackform_serving_gpus"] = group["gpus_per_node"]
    for name, entry in jobs.items():
        if group_name(name) in groups:
            gvars = groups[group_name(name)].setdefault("vars", {})
            gvars[JOB_ARGS] = serving_job_argv(entry, load_catalog())
    return inv


def jobs_of(group_vars: Mapping[str, Any]) -> dict[str, Any]:
    """The plan's serving smoke job entries by node group (empty: no serving workload)."""
    jobs = group_vars.get(SERVING_VAR)
    return dict(jobs) if isinstance(jobs, Mapping) else {}
