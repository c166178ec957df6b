"""The nvidia_driver role's reboot under a local connection (the node bootstrap runs the roles on
the node itself, and Ansible's reboot module refuses a local connection): the role writes the
reboot request and ends the host's run cleanly, and the tasks after it do not run. Real
ansible-playbook over this machine's localhost; the request file is in a temporary directory
(this machine has no GPU, so the branch is entered through the role's own task file)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import yaml
from ansible.parsing.dataloader import DataLoader
from ansible.template import Templar, trust_as_template
from gpu_collection import COLLECTIONS_ROOT, ROLES_DIR

ROLE = ROLES_DIR / "nvidia_driver"


def _play(tmp_path: Path, tasks: list[dict], host: dict) -> subprocess.CompletedProcess:
    inventory = tmp_path / "inventory.json"
    inventory.write_text(json.dumps({"all": {"hosts": {"localhost": host}}}))
    book = tmp_path / "play.yml"
    book.write_text(yaml.safe_dump([{"hosts": "all", "gather_facts": False, "tasks": tasks}]))
    env = {**os.environ, "ANSIBLE_COLLECTIONS_PATH": str(COLLECTIONS_ROOT), "ANSIBLE_NOCOLOR": "1"}
    return subprocess.run(
        [str(Path(sys.executable).parent / "ansible-playbook"), "-i", str(inventory), str(book)],
        capture_output=True, text=True, env=env, timeout=300,
    )  # fmt: skip


def test_a_local_run_records_the_reboot_and_ends_the_hosts_run(tmp_path):
    request = tmp_path / "state" / "reboot-requested"
    after = tmp_path / "after"
    host = {
        "ansible_connection": "local",
        "ansible_python_interpreter": sys.executable,
        "nvidia_driver_reboot_request_file": str(request),
    }
    tasks = [
        {
            "name": "the role's local-reboot branch",
            "ansible.builtin.include_role": {
                "name": "rackform.gpu.nvidia_driver",
                "tasks_from": "reboot_local",
            },
        },
        {"name": "must not run", "ansible.builtin.copy": {"content": "x", "dest": str(after)}},
    ]
    done = _play(tmp_path, tasks, host)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    assert "failed=0" in done.stdout and "unreachable=0" in done.stdout
    assert request.read_text().startswith("rackform nvidia_driver: reboot")
    assert "needs a reboot to load the NVIDIA driver" in done.stdout
    assert not after.exists()  # the host's run ended at the request


def _templar(**variables) -> Templar:
    loader = DataLoader()
    v = {
        **loader.load_from_file(str(ROLE / "defaults" / "main.yml"), trusted_as_template=True),
        **loader.load_from_file(str(ROLE / "vars" / "main.yml"), trusted_as_template=True),
        **variables,
    }
    return Templar(loader=loader, variables=v)


def _local_branch_runs(**variables) -> bool:
    """Whether install.yml enters the local-reboot branch, by its own `when`."""
    tasks = yaml.safe_load((ROLE / "tasks" / "install.yml").read_text())
    (task,) = [t for t in tasks if t.get("ansible.builtin.import_tasks") == "reboot_local.yml"]
    expr = trust_as_template("{{ " + task["when"].strip() + " }}")
    return _templar(**variables).template(expr) is True


def _ansible_reboots(**variables) -> bool:
    """Whether install.yml's reboot (Ansible's, over SSH) runs, by its own `when`."""
    tasks = yaml.safe_load((ROLE / "tasks" / "install.yml").read_text())
    (task,) = [t for t in tasks if "ansible.builtin.reboot" in t]
    expr = trust_as_template("{{ " + task["when"].strip() + " }}")
    return _templar(**variables).template(expr) is True


def test_the_reboot_is_asked_for_locally_and_done_by_ansible_otherwise():
    needed = {"_nvidia_driver_reboot_needed": True, "ansible_check_mode": False}
    local = {"ansible_connection": "local"}
    assert _local_branch_runs(**needed, **local) and not _ansible_reboots(**needed, **local)
    for remote in ({"ansible_connection": "ssh"}, {}):  # unset: Ansible's default, ssh
        assert _ansible_reboots(**needed, **remote) and not _local_branch_runs(**needed, **remote)
    # Nothing to reboot for, reboots turned off, or check mode: neither.
    for extra in (
        {"_nvidia_driver_reboot_needed": False},
        {"nvidia_driver_reboot": False},
        {"ansible_check_mode": True},
    ):
        assert not _local_branch_runs(**{**needed, **local, **extra})
        assert not _ansible_reboots(**{**needed, **extra})
