"""Classes of bug looked for across every role (issue 57, part 6), each a static check over the
task files: a `creates:` marker carries every version its task's inputs carry (an unversioned one
skips a new version's work); every handler is one whose change-only trigger is enough, with the
reason, or the state it applies is checked by a task (a handler runs only on this run's change,
never on a drift); and tasks on the controller never become root there (the inventory's
ansible_become is for the nodes). One owner per file and typed comparisons have their own files
(test_role_owners.py, test_role_types.py)."""

from __future__ import annotations

import jinja2
import pytest
import yaml
from gpu_collection import ROLES_DIR, SITE
from jinja2 import nodes
from role_writes import ROLES, tasks

ENV = jinja2.Environment()


def _load(path):
    return yaml.safe_load(path.read_text(encoding="utf-8")) if path.exists() else None


def _names(text) -> set[str]:
    """The variables a value's templates read."""
    if isinstance(text, list):
        return set().union(*(_names(t) for t in text)) if text else set()
    if isinstance(text, dict):
        return set().union(*(_names(t) for t in text.values())) if text else set()
    if not isinstance(text, str) or "{" not in text:
        return set()
    return {n.name for n in ENV.parse(text).find_all(nodes.Name)}


def _reads(role: str, text) -> set[str]:
    """The role's public variables a value depends on, through its private ones."""
    private = {
        **(_load(ROLES_DIR / role / "vars" / "main.yml") or {}),
        **{k: v for os_name in ("Debian", "Ubuntu")
           for k, v in (_load(ROLES_DIR / role / "vars" / f"{os_name}.yml") or {}).items()},
    }  # fmt: skip
    seen: set[str] = set()
    todo = list(_names(text))
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        if name in private:
            todo += _names(private[name])
    return seen


def _task_files(role: str):
    base = ROLES_DIR / role
    return sorted([*base.glob("tasks/*.yml"), *base.glob("handlers/*.yml")])


def _creates_tasks():
    for role in ROLES:
        for path in _task_files(role):
            for task in tasks(_load(path)):
                module = next((k for k in task if "." in k), None)
                args = task.get(module) if module else None
                if isinstance(args, dict) and "creates" in args:
                    yield pytest.param(role, task, args, id=f"{role}/{path.name}: {task['name']}")


@pytest.mark.parametrize(("role", "task", "args"), list(_creates_tasks()))
def test_a_marker_carries_every_version_its_task_carries(role, task, args):
    inputs = {k: v for k, v in args.items() if k != "creates"}
    versions = {n for n in _reads(role, [inputs, task.get("vars", {})]) if n.endswith("_version")}
    missing = versions - _reads(role, args["creates"])
    assert not missing, (
        f"{role}: {task['name']!r} reads {sorted(missing)} but its creates: path does not: a new "
        "version would find the old one's marker and be skipped"
    )


def test_the_check_finds_an_unversioned_marker():
    # The EFA installer's unpack step before the fix: the tarball's name carries the version,
    # the unpacked script it was skipped for did not.
    old = {
        "src": "{{ _nccl_rdma_efa_dir }}/aws-efa-installer-{{ nccl_rdma_efa_installer_version }}.tar.gz",
        "creates": "{{ _nccl_rdma_efa_dir }}/aws-efa-installer/efa_installer.sh",
    }
    inputs = {k: v for k, v in old.items() if k != "creates"}
    versions = {n for n in _reads("nccl_rdma", inputs) if n.endswith("_version")}
    assert versions - _reads("nccl_rdma", old["creates"]) == {"nccl_rdma_efa_installer_version"}


# Every handler of every role, and why running it only on this run's change is enough, or the
# task that applies the state it stands for from the host itself. A new handler fails here
# until someone says which.
CHANGE_ONLY = {
    ("nccl_rdma", "Reload systemd for the memlock limit"): (
        "systemd reads its drop-in at every boot and every daemon-reload; only a run cut off "
        "between the write and the handler leaves the old limit until then"
    ),
    ("nccl_rdma", "Refresh the dynamic linker cache"): (
        "every package install's dpkg trigger runs ldconfig too; the file is the state"
    ),
    ("nccl_rdma", "Apply the NCCL sysctl settings"): (
        "systemd-sysctl applies the file at every boot; a runtime change by another tool is "
        "that tool's (not watched)"
    ),
    ("nvidia_driver", "Load the NVIDIA kernel modules"): (
        "nvidia-smi and nvidia-persistenced load the module on first use; a reboot, when the "
        "host needs one, is tasks/install.yml's task on the host's state"
    ),
    ("dcgm", "Restart dcgm-exporter"): (
        "the role then checks that it serves GPU metrics; its files are the state"
    ),
    ("dcgm", "Restart node_exporter"): "its arguments file is the state; read at each start",
    ("nvme_raid", "Rebuild the initramfs for the md array"): (
        "off by default; the array is assembled from mdadm.conf after the root filesystem is up"
    ),
    ("slurm", "Restart munge"): (
        "a node with another key cannot register: the role's wait for every node fails"
    ),
    ("slurm", "Restart slurmctld"): "the role waits until every node is registered and usable",
    ("slurm", "Restart slurmd"): "the role waits until every node is registered and usable",
    ("slurm", "Stop the removed spot agent"): "its unit is gone: it does not start again",
}
# What a drift must also trigger, applied by tasks on the host's state (not handlers).
FROM_STATE = {
    ("nvidia_driver", "tasks/install.yml", "Reboot for the NVIDIA driver"),
    ("nvidia_driver", "tasks/install.yml", "Rebuild the initramfs without nouveau (the blacklist changed, or nouveau is loaded)"),
}  # fmt: skip


def test_every_handler_is_one_a_change_alone_may_trigger():
    found = {
        (role, h["name"])
        for role in ROLES
        for h in _load(ROLES_DIR / role / "handlers" / "main.yml") or []
    }
    assert found == set(CHANGE_ONLY), (
        "handlers without a reason that this run's change alone may trigger them (a drift would "
        f"not): {sorted(found - set(CHANGE_ONLY))}; gone: {sorted(set(CHANGE_ONLY) - found)}"
    )
    for role, where, name in FROM_STATE:
        (task,) = [t for t in tasks(_load(ROLES_DIR / role / where)) if t.get("name") == name]
        # On what the probe found on the host (directly, or through the reboot decision).
        when = str(task["when"])
        assert "_nvidia_driver_probe" in when or "_nvidia_driver_reboot_needed" in when, name


def test_tasks_on_the_controller_never_become_root_there():
    # The inventory's ansible_become (a login user other than root) is for the nodes; a task
    # delegated to the controller would ask the controller's sudo.
    sources = [(f"{role}/{p.name}", p) for role in ROLES for p in _task_files(role)]
    delegated = []
    for where, path in [*sources, ("site.yml", SITE)]:
        data = _load(path) or []
        for play_or_task in data:
            for task in tasks(play_or_task.get("tasks", [play_or_task])):
                if task.get("delegate_to") == "localhost":
                    delegated.append((where, task))
    assert delegated, "the roles delegate tasks to the controller (scrape config, smoke archive)"
    wrong = [(w, t["name"]) for w, t in delegated if t.get("become") is not False]
    assert not wrong, wrong


def test_an_apt_source_module_that_needs_a_library_installs_it_where_missing():
    # ansible.builtin.deb822_repository needs python3-debian on the host, which minimal Debian
    # and Ubuntu images lack: without install_python_debian the task fails there, on the first
    # host that takes its branch (a GPU node's CUDA repository, the Lustre client's).
    found = []
    for role in ROLES:
        for path in _task_files(role):
            for task in tasks(_load(path) or []):
                args = task.get("ansible.builtin.deb822_repository")
                if args is not None:
                    found.append((role, task["name"], args.get("install_python_debian")))
    assert found, "no deb822_repository task found: the walk is broken"
    assert [f for f in found if f[2] is not True] == []
