"""End to end: the rackform.gpu collection as an Ansible user takes it, without rackform. The
tarball `ansible-galaxy collection build` makes from the package is installed offline into a
collections path of the user's own; ANSIBLE_COLLECTIONS_PATH points there (never at the
package); the user's own inventory, ansible.cfg and playbook (`roles: [rackform.gpu.nvme_raid]`
with the variables a user sets: the node's drives by serial, the RAID level, the mount point)
converge node1 of the session's testbed with plain `ansible-playbook`: the first run converges
it (changed, or only ok where the earlier e2e files converged it already, which makes it the run
that changes nothing), and where it changed something a second run changes nothing. Every task
that ran came from the installed collection (ansible-playbook -vv prints each task's path).

It sorts after test_drift_vms.py and uses node1 only: the drift test leaves node1 repaired and
node2's array broken on purpose. Run alone, node1 is fresh and the first run builds its array.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from vms import MOUNT, sh, shown

from rackform.paths import collection

pytestmark = pytest.mark.slow

BIN = Path(sys.executable).parent
NODE = "node1"


@pytest.fixture(scope="module")
def installed(tmp_path_factory, phases) -> Path:
    """A collections path holding rackform.gpu, installed from the tarball built from the
    package, offline (ansible.posix and community.general: the `ansible` package's)."""
    base = tmp_path_factory.mktemp("user-collection")
    path = base / "collections"
    env = {**os.environ, "ANSIBLE_COLLECTIONS_PATH": str(path), "ANSIBLE_NOCOLOR": "1"}
    with phases("user playbook: ansible-galaxy collection build, then install --offline"):
        built = subprocess.run(
            [BIN / "ansible-galaxy", "collection", "build", "--output-path", base, collection()],
            capture_output=True, text=True, env=env, timeout=300,
        )  # fmt: skip
        assert built.returncode == 0, shown(built)
        (tarball,) = base.glob("rackform-gpu-*.tar.gz")
        done = subprocess.run(
            [BIN / "ansible-galaxy", "collection", "install", "--offline", "-p", path, tarball],
            capture_output=True, text=True, env=env, timeout=300,
        )  # fmt: skip
    assert done.returncode == 0, shown(done)
    assert (path / "ansible_collections" / "rackform" / "gpu" / "MANIFEST.json").is_file()
    return path


def user_project(d: Path, bed, node: str) -> Path:
    """The user's own directory: ansible.cfg, an inventory for `node`, and the playbook."""
    port = next(n.ssh_port for n in bed.nodes if n.name == node)
    serials = list(next(n.nvme_serials for n in bed.nodes if n.name == node))
    d.mkdir()
    (d / "ansible.cfg").write_text(
        "[defaults]\ninventory = inventory.yml\n\n[ssh_connection]\npipelining = True\n"
    )
    inventory = {
        "checkpoint_nodes": {
            "hosts": {node: {"ansible_host": "127.0.0.1", "ansible_port": port}},
            "vars": {
                "ansible_user": "root",
                "ansible_python_interpreter": "/usr/bin/python3",
                "ansible_ssh_private_key_file": bed.key,
                "ansible_ssh_common_args": (
                    f"-o UserKnownHostsFile={bed.known_hosts} -o StrictHostKeyChecking=yes"
                    " -o IdentitiesOnly=yes"
                ),
            },
        }
    }
    (d / "inventory.yml").write_text(yaml.safe_dump(inventory, sort_keys=False))
    playbook = [
        {
            "name": "Checkpoint storage on the GPU nodes",
            "hosts": "checkpoint_nodes",
            "vars": {
                "nvme_raid_devices": serials,
                "nvme_raid_level": 0,
                "nvme_raid_mount": MOUNT,
            },
            "roles": ["rackform.gpu.nvme_raid"],
        }
    ]
    (d / "checkpoints.yml").write_text(yaml.safe_dump(playbook, sort_keys=False))
    return d / "checkpoints.yml"


def play(playbook: Path, collections: Path) -> subprocess.CompletedProcess:
    """`ansible-playbook -vv PLAYBOOK` from the user's directory, with the installed collection."""
    env = {
        **os.environ,
        "ANSIBLE_COLLECTIONS_PATH": str(collections),
        "ANSIBLE_NOCOLOR": "1",
        "ANSIBLE_CONFIG": str(playbook.parent / "ansible.cfg"),
    }
    return subprocess.run(
        [BIN / "ansible-playbook", "-vv", playbook.name],
        cwd=playbook.parent, capture_output=True, text=True, env=env, timeout=1500,
        stdin=subprocess.DEVNULL,
    )  # fmt: skip


def recap(proc: subprocess.CompletedProcess, node: str) -> dict[str, int]:
    line = next((x for x in proc.stdout.splitlines() if x.startswith(node) and "ok=" in x), None)
    assert line is not None, shown(proc)
    return {k: int(v) for k, v in re.findall(r"(\w+)=(\d+)", line)}


def task_paths(proc: subprocess.CompletedProcess) -> set[str]:
    return {
        m.group(1).rsplit(":", 1)[0] for m in re.finditer(r"^task path: (\S+)", proc.stdout, re.M)
    }


def test_a_users_playbook_converges_node1_with_the_installed_collection(
    installed, testbed, apt_repo, phases, tmp_path
):
    bed = testbed
    playbook = user_project(tmp_path / "project", bed, NODE)
    role = installed / "ansible_collections" / "rackform" / "gpu" / "roles"

    with phases("user playbook: roles [rackform.gpu.nvme_raid] on node1 (first run)"):
        first = play(playbook, installed)
    assert first.returncode == 0, shown(first)
    counts = recap(first, NODE)
    assert counts["failed"] == 0 and counts["unreachable"] == 0 and counts["ok"] > 0, counts
    paths = task_paths(first)
    assert any(p.startswith(str(role / "nvme_raid")) for p in paths), sorted(paths)
    assert any(p.startswith(str(role / "host_bootstrap")) for p in paths), sorted(paths)
    # Besides the user's playbook (its fact gathering), only the installed collection ran.
    assert all(p.startswith(str(installed)) for p in paths - {str(playbook)}), sorted(paths)

    fstype, source = sh(bed, NODE, f"findmnt -n -o FSTYPE,SOURCE {MOUNT}").split()
    assert fstype == "xfs" and source.startswith("/dev/md"), (fstype, source)
    assert re.search(r"active raid0 (nvme\dn1\[\d\] ?){4}", sh(bed, NODE, "cat /proc/mdstat"))

    if counts["changed"] == 0:
        # node1 as the session's converge left it, with the same variables: this run is the one
        # that changes nothing, and another would only repeat it.
        return
    with phases("user playbook: the same again on node1 (changes nothing)"):
        second = play(playbook, installed)
    assert second.returncode == 0, shown(second)
    again = recap(second, NODE)
    assert again["changed"] == 0 and again["failed"] == 0, shown(second)
