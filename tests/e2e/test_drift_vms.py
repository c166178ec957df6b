"""End to end: `rackform drift` on the testbed's two VMs, after test_configure_vms.py converged
them (the session's fixtures: tests/e2e/conftest.py). Run alone, it converges the two roles it
changes first.

Changes made by hand, as an operator would: node1's /etc/nccl.conf edited and its checkpoint
array unmounted; on node2 one RAID member failed with `mdadm --fail` (after
test_configure_vms.py node2's array is already broken: a drive was pulled off its PCI bus).
`rackform drift` names each change on its host and exits 3; `rackform configure` repairs node1
and refuses node2's array, naming it; drift then finds node1 clean and reports node2's array as
needing a person. (The dcgm exporter runs only on hosts with NVIDIA GPUs, which the VMs do not
have: a stopped exporter is drift of the dcgm role in check mode, not exercised here.)
"""

from __future__ import annotations

import json

import pytest
from vms import MOUNT, blueprint, cli, sh, shown

pytestmark = pytest.mark.slow

ROLES = ["--role", "nccl_rdma", "--role", "nvme_raid"]


def drift(bp, key) -> tuple[int, dict]:
    proc = cli("drift", bp, "--env", "wipe", *key, "--json")
    assert proc.returncode in (0, 3), shown(proc)
    return proc.returncode, json.loads(proc.stdout)


def on(doc: dict, host: str) -> list[dict]:
    return [i for i in doc["hosts"] if i["host"] == host]


def test_drift_names_hand_changes_and_configure_repairs_them(testbed, apt_repo, phases, tmp_path):
    bed = testbed
    bp = blueprint(bed, tmp_path)
    key = ["--private-key", bed.key, "--known-hosts", bed.known_hosts]
    if "NCCL_SOCKET_IFNAME" not in sh(bed, "node1", "cat /etc/nccl.conf", check=False):
        with phases("drift: converge nccl_rdma and nvme_raid first (this file run alone)"):
            proc = cli("configure", bp, *key, "--env", "wipe", *ROLES)
        assert proc.returncode == 0, shown(proc)

    sh(bed, "node1", f"echo NCCL_DEBUG=TRACE >> /etc/nccl.conf && umount {MOUNT}")
    member = sh(bed, "node2", "mdadm --detail /dev/md/checkpoints | grep -o '/dev/nvme[0-9]n1'"
                " | head -1", check=False).strip()  # fmt: skip
    if member:
        failed = sh(bed, "node2", f"mdadm /dev/md/checkpoints --fail {member} 2>&1; true")
        phases.notes.append(f"mdadm --fail {member} on node2: {failed.strip()[:120]}")

    with phases("drift: roles in check mode on both VMs (hand changes present)"):
        rc, doc = drift(bp, key)
    assert rc == 3 and doc["drifted"], doc
    node1 = on(doc, "node1")
    nccl = [i for i in node1 if i["role"] == "nccl_rdma" and i["kind"] == "repairable"]
    assert any("-NCCL_DEBUG=TRACE" in line for i in nccl for line in i["detail"]), node1
    raid1 = [i for i in node1 if i["role"] == "nvme_raid"]
    assert raid1 and all(i["kind"] == "repairable" for i in raid1), node1
    assert any(MOUNT in " ".join([i["task"], *i["detail"]]) for i in raid1), raid1
    node2 = on(doc, "node2")
    assert [i["kind"] for i in node2 if i["role"] == "nvme_raid"] == ["needs a person"], node2
    assert "not healthy" in node2[0]["detail"][0] or "broken" in node2[0]["detail"][0], node2
    assert not any(i["role"] == "nccl_rdma" for i in node2), node2  # node2 was not touched

    with phases("drift: configure repairs what it can"):
        fix = cli("configure", bp, *key, "--env", "wipe", *ROLES)
    assert fix.returncode == 2, shown(fix)
    assert "node2: nvme_raid :" in fix.stderr and "node1" not in fix.stderr, shown(fix)
    assert "NCCL_DEBUG=TRACE" not in sh(bed, "node1", "cat /etc/nccl.conf")
    sh(bed, "node1", f"findmnt {MOUNT}")

    with phases("drift: roles in check mode on both VMs (after configure)"):
        rc, doc = drift(bp, key)
    assert rc == 3, doc  # node2's array still needs a person
    assert on(doc, "node1") == [], doc
    assert {i["kind"] for i in doc["hosts"]} == {"needs a person"}, doc
    text = cli("drift", bp, "--env", "wipe", *key)
    assert text.returncode == 3 and "node2: nvme_raid" in text.stdout, shown(text)
    assert "NEEDS A PERSON" in text.stdout, shown(text)
