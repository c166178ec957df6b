"""End to end: `rackform drift` on the testbed's two VMs, after test_configure_vms.py converged
them (the session's fixtures: tests/e2e/conftest.py). Run alone, or after files that left the
VMs otherwise, it converges the two roles it changes first where they are missing.

Changes made by hand, as an operator would: node1's /etc/nccl.conf edited and its checkpoint
array unmounted; on node2 one RAID member failed (its drive pulled off the PCI bus: md refuses
`mdadm --fail` on RAID0; after test_configure_vms.py node2's array is broken that way already).
`rackform drift --role nccl_rdma --role nvme_raid` (the roles the changes are in) names each
change on its host and exits 3; `rackform configure` repairs node1 and refuses node2's array,
naming it; drift then finds node1 clean and reports node2's array as needing a person. (The dcgm
exporter runs only on hosts with NVIDIA GPUs, which the VMs do not have: a stopped exporter is
drift of the dcgm role in check mode, not exercised here.)
"""

from __future__ import annotations

import json

import pytest
from vms import MOUNT, blueprint, cli, sh, shown

pytestmark = pytest.mark.slow

ROLES = ["--role", "nccl_rdma", "--role", "nvme_raid"]
# node2's first drive pulled off the PCI bus, then a read so md notices (as in
# test_configure_vms.py's last phase).
DRIVE = "/dev/disk/by-id/nvme-QEMU_NVMe_Ctrl_RFTB02N1"
PULL_DRIVE = (
    f"d=$(basename $(readlink -f {DRIVE}))"
    " && echo 1 > /sys/block/$d/device/device/remove"
    " && (dd if=/dev/md/checkpoints of=/dev/null bs=1M count=64 iflag=direct || true)"
)


def drift(bp, key) -> tuple[int, dict]:
    proc = cli("drift", bp, "--env", "wipe", *ROLES, *key, "--json")
    assert proc.returncode in (0, 3), shown(proc)
    return proc.returncode, json.loads(proc.stdout)


def on(doc: dict, host: str) -> list[dict]:
    return [i for i in doc["hosts"] if i["host"] == host]


def test_drift_names_hand_changes_and_configure_repairs_them(testbed, apt_repo, phases, tmp_path):
    bed = testbed
    bp = blueprint(bed, tmp_path)
    key = ["--private-key", bed.key, "--known-hosts", bed.known_hosts]
    # What this test starts from: node1 converged by the two roles, node2 with an array (whole,
    # or broken by test_configure_vms.py). Another file may have left either otherwise (or none
    # ran before this one): the roles converge what is missing, first.
    fresh = [
        node
        for node, ready in (
            ("node1", f"grep -q NCCL_SOCKET_IFNAME /etc/nccl.conf && findmnt {MOUNT}"),
            ("node2", "cat /sys/block/md*/md/array_state"),
        )
        if not sh(bed, node, f"({ready}) >/dev/null 2>&1 && echo ready", check=False).strip()
    ]
    if fresh:
        with phases(f"drift: converge nccl_rdma and nvme_raid first on {', '.join(fresh)}"):
            proc = cli("configure", bp, *key, "--env", "wipe", *ROLES, "--limit", ",".join(fresh))
        assert proc.returncode == 0, shown(proc)

    sh(bed, "node1", f"echo NCCL_DEBUG=TRACE >> /etc/nccl.conf && umount {MOUNT}")
    # A RAID0 member fails: md refuses `mdadm --fail` on RAID0 ("Device or resource busy": no
    # redundancy, so no faulty state for a member), so its drive leaves the PCI bus, as a dead
    # drive does. After test_configure_vms.py node2's array is broken that way already.
    state = sh(bed, "node2", f"cat /sys/block/md*/md/array_state; ls {DRIVE}", check=False)
    if "broken" not in state and DRIVE in state:
        sh(bed, "node2", PULL_DRIVE)
    with phases("drift: nccl_rdma and nvme_raid in check mode on both VMs (hand changes present)"):
        rc, doc = drift(bp, key)
    assert rc == 3 and doc["drifted"], doc
    node1 = on(doc, "node1")
    nccl = [i for i in node1 if i["role"] == "nccl_rdma" and i["kind"] == "repairable"]
    assert any("-NCCL_DEBUG=TRACE" in line for i in nccl for line in i["detail"]), node1
    raid1 = [i for i in node1 if i["role"] == "nvme_raid"]
    assert raid1 and all(i["kind"] == "repairable" for i in raid1), node1
    assert any(i["task"].startswith("Mount the array") for i in raid1), raid1
    node2 = on(doc, "node2")
    raid2 = [i for i in node2 if i["role"] == "nvme_raid"]
    assert [i["kind"] for i in raid2] == ["needs a person"], node2
    assert "is not healthy (state broken" in raid2[0]["detail"][0], node2
    assert not any(i["role"] == "nccl_rdma" for i in node2), node2  # node2 was not touched

    with phases("drift: configure repairs what it can"):
        fix = cli("configure", bp, *key, "--env", "wipe", *ROLES)
    assert fix.returncode == 2, shown(fix)
    assert "node2: nvme_raid :" in fix.stderr and "node1" not in fix.stderr, shown(fix)
    assert "NCCL_DEBUG=TRACE" not in sh(bed, "node1", "cat /etc/nccl.conf")
    sh(bed, "node1", f"findmnt {MOUNT}")

    with phases("drift: nccl_rdma and nvme_raid in check mode on both VMs (after configure)"):
        after = cli("drift", bp, "--env", "wipe", *ROLES, *key)
    assert after.returncode == 3, shown(after)  # node2's array still needs a person
    items = [line.strip() for line in after.stdout.splitlines() if line.startswith("  node")]
    assert items and all(line.startswith("node2: nvme_raid : ") for line in items), shown(after)
    assert all("(NEEDS A PERSON: configure cannot repair it)" in line for line in items)
    assert f"{len(items)} difference(s); {len(items)} need a person" in after.stdout
