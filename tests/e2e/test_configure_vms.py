"""End to end: two Debian VMs under QEMU, each with four emulated NVMe drives, converged by
`rackform configure` with every role, as a user would run it.

The session's one converge from the bare image is the `converged` fixture's
(tests/e2e/conftest.py): every role, Slurm and torch included, with the smoke job through Slurm,
after check mode and safe mode on the fresh VMs. This file shows what it did, on real (virtual)
hosts: check mode changing nothing on a fresh VM; a drive holding a filesystem refused in safe
mode, naming the drive and what it holds, with nothing on it lost; an md RAID0 with XFS aligned
to the stripe, mounted with noatime, in fstab by UUID and in mdadm.conf, still mounted after a
power cycle; /etc/nccl.conf, the env file, memlock limits and sysctl in place; nvidia_driver and
dcgm skipping GPU-less hosts with their message; the smoke job's reports from both VMs, signed
as promotion evidence.

Then, from the converged state (the `configured` scenario): a second converge with changed=0;
an mkfs cut short, a converge interrupted by a killed controller or a power cut; check mode
with a changed setting; declared GPU nodes failing in preflight; a RAID0 member failing. Each is
a test of its own, so a failure in one hides none of the others.

Each phase's time is printed when the session's tests end and again in pytest's closing summary,
where the tail of a CI log shows it.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from vms import DIRTY, DIRTY_SERIAL, MOUNT, ROOT, cli, sh, shown, summary

from rackform.testbed import lifecycle

pytestmark = pytest.mark.slow

MKFS_TASK = "nvme_raid : Make the filesystem, aligned to the stripe"
# node1's array undone, as on a host never converged: no array, no signatures, no fstab line.
RESET_ARRAY = (
    f"umount {MOUNT}; mdadm --stop /dev/md/checkpoints; for d in /dev/nvme?n1; do"
    " mdadm --zero-superblock $d 2>/dev/null; wipefs -aq $d; done;"
    f" sed -i '\\#{MOUNT}#d' /etc/fstab; sed -i '/^ARRAY/d' /etc/mdadm/mdadm.conf;"
    # A stopped array can leave its /dev/md/<name> link behind, pointing at no device (seen in
    # CI after a reboot): the role must not take it for the array.
    " mkdir -p /dev/md; ln -sfn ../md99 /dev/md/checkpoints; true"
)


def interrupted(args: list, task: str, then=None) -> str:
    """Run `rackform ARGS`, and as `task` starts: run `then` (a power cut, say), and kill the
    controller (the whole process group: rackform, ansible-playbook, its SSH sessions). What it
    printed until then."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "rackform", *map(str, args)],
        cwd=ROOT,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    seen = []
    try:
        for line in proc.stdout:
            seen.append(line)
            if line.startswith(task):
                if then is not None:
                    then()
                break
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=60)
    return "".join(seen)


def changed_tasks(stdout: str) -> dict[str, list[str]]:
    """Role -> the tasks that reported a change on some host, from configure's live display."""
    out: dict[str, list[str]] = {}
    task = ""
    for line in stdout.splitlines():
        if " : " in line and not line.startswith(" "):
            task = line
        elif line.strip().endswith("changed") or ": changed (" in line:
            role = task.split(" : ")[0].removeprefix("handler ")
            out.setdefault(role, []).append(task)
    return out


def on_both(check) -> dict:
    """`check(node)` on both VMs at the same time (each SSH command costs a second or two under
    TCG); an assertion in either fails the test."""
    with ThreadPoolExecutor(max_workers=2) as pool:
        return dict(zip(("node1", "node2"), pool.map(check, ("node1", "node2")), strict=True))


# The fresh VMs and the first converge: run by the session's `converged` fixture
# (tests/e2e/conftest.py), the one converge from the bare image that every scenario starts from.


def test_check_mode_on_a_fresh_vm_says_what_it_would_do_and_changes_nothing(converged):
    proc = converged.check
    assert proc.returncode == 0, shown(proc)
    assert "would create RAID 0 /dev/md/checkpoints" in proc.stdout
    assert "+NCCL_SOCKET_IFNAME=priv0" in proc.stdout  # the diff of /etc/nccl.conf
    # A run over part of the cluster rewrites no cluster-wide file (/etc/hosts lists every
    # node) from its partial view, and runs no job that must span every node.
    assert "this run covers 1 of the cluster's 2 nodes (--limit)" in proc.stdout, shown(proc)
    assert "/etc/hosts" not in "".join(line for line in proc.stdout.splitlines() if "+++" in line)
    assert "limited to node1" in proc.stdout.splitlines()[0]
    assert converged.unchanged, "check mode changed a host"


def test_safe_mode_refuses_a_drive_that_holds_data_and_loses_none_of_it(converged):
    refused = converged.refused
    assert refused.returncode != 0, shown(refused)
    refusal = [line for line in refused.stderr.splitlines() if DIRTY_SERIAL in line]
    assert refusal, shown(refused)
    assert "node2: nvme_raid : Refuse drives that are in use or hold data" in refusal[0]
    assert "ext4 filesystem" in refusal[0] and "keepme" in refusal[0]
    assert "nvme_raid_allow_wipe" in refusal[0]
    assert converged.kept.returncode == 0 and ": OK" in converged.kept.stdout, converged.kept


def test_every_role_converges_from_the_bare_image(converged, phases, tmp_path):
    bed, proc = converged.bed, converged.first
    assert proc.returncode == 0, shown(proc)
    first = summary(proc.stdout)
    assert set(first) == {"node1", "node2"} and all(r["changed"] > 0 for r in first.values())
    for node in ("node1", "node2"):
        assert (
            f"{node}: nvidia_driver skipped on {node}: no NVIDIA GPU on its PCI bus" in proc.stdout
        )
        assert f"{node}: dcgm skipped on {node}: no NVIDIA GPU with a loaded driver" in proc.stdout
    # What the roles made, after the power cycle of the freeze: the array back from fstab.
    on_both(lambda n: (check_array(bed, n), check_fabric(bed, n)))
    on_both(lambda n: sh(bed, n, "test -b /dev/md/checkpoints"))
    # The wipe environment wiped node2's drive that held data.
    assert 'TYPE="ext4"' not in sh(bed, "node2", f"blkid -p {DIRTY} || true")
    phases.notes.append(check_smoke_reports(converged.reports))
    sign_and_verify_node_reports(converged.reports, converged.blueprint, tmp_path)


@pytest.fixture(scope="module")
def configured(converged, phases, tmp_path_factory):
    """The converged VMs for the scenarios below, which change them (faults included); the
    controller's temporary files (the validators archive among them) go to a directory of
    their own, so the last can tell that no run left one behind."""
    converged.use(phases, "configure")
    controller_tmp = tmp_path_factory.mktemp("controller-tmp")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("TMPDIR", str(controller_tmp))
        yield converged, controller_tmp


def test_a_second_converge_changes_nothing(configured, phases):
    converged, _ = configured
    # The smoke job does not run again either: its report for the same job is there.
    with phases("configure (second converge)"):
        proc = cli("configure", *converged.converge, "--env", "wipe")
    assert proc.returncode == 0, shown(proc)
    assert all(r["changed"] == 0 for r in summary(proc.stdout).values()), shown(proc)


def test_an_mkfs_cut_short_is_made_again(configured, phases):
    # node1's XFS gets its superblock marked "in progress", the state a power cut 2 s into
    # mkfs.xfs leaves (blkid still says xfs; the mount says "Structure needs cleaning"). The
    # role sees its own unfinished work and makes the filesystem again.
    converged, _ = configured
    bed = converged.bed
    sh(bed, "node1", f"umount {MOUNT} && xfs_db -x -c 'sb 0' -c 'write -d inprogress 1'"
                     " /dev/md/checkpoints >/dev/null && blkid -s TYPE -o value /dev/md/checkpoints"
                     f" | grep -qx xfs && ! mount {MOUNT} 2>/dev/null")  # fmt: skip
    with phases("an mkfs cut short on node1: configure makes the filesystem again"):
        redo = cli("configure", *converged.converge, "--env", "wipe", "--limit", "node1",
                   "--role", "nvme_raid")  # fmt: skip
    assert redo.returncode == 0, shown(redo)
    assert "whose mkfs never finished" in redo.stdout, shown(redo)
    check_array(bed, "node1")


@pytest.mark.parametrize("how", ["controller killed", "power cut"])
def test_a_converge_interrupted_as_mkfs_starts_finishes_when_run_again(configured, phases, how):
    # As nvme_raid starts making the filesystem on a fresh array of node1, the controller is
    # killed, or the VM's power is cut; a rerun, unchanged, finishes the work.
    converged, _ = configured
    bed = converged.bed
    nvme_raid_node1 = [*converged.converge, "--env", "wipe", "--limit", "node1",
                       "--role", "nvme_raid"]  # fmt: skip
    sh(bed, "node1", RESET_ARRAY)
    with phases(f"nvme_raid interrupted as mkfs starts on node1 ({how}), then run again"):
        cut = None if how == "controller killed" else lambda: lifecycle.reboot_and_wait(
            bed, ["node1"], power_cut=True)  # fmt: skip
        seen = interrupted(["configure", *nvme_raid_node1], MKFS_TASK, cut)
        again = cli("configure", *nvme_raid_node1)
    assert MKFS_TASK in seen, seen
    assert again.returncode == 0, shown(again)
    check_array(bed, "node1")


def test_check_mode_reports_a_changed_setting_and_gpu_roles_fail_in_preflight(configured, phases):
    # Check mode on a converged host with a changed setting: reported, not applied; and
    # declared GPU nodes without GPUs fail in preflight, saying why (environment `gpu`).
    # Neither changes a host, so the three runs go at once: the check on node1, the two GPU
    # roles on node2 (each VM has one emulated CPU; this keeps the two equally busy).
    converged, controller_tmp = configured
    bed, bp, key = converged.bed, converged.blueprint, converged.key
    conf = sh(bed, "node1", "sha256sum /etc/nccl.conf")
    with phases("at once: --check --diff with a changed NCCL setting (node1); GPU roles on a host"
                " declared with GPUs (node2, preflight failures)"):  # fmt: skip
        with ThreadPoolExecutor(max_workers=3) as pool:
            check = pool.submit(cli, "configure", *converged.converge, "--env", "wipe",
                                "--role", "nccl_rdma", "--role", "smoke_train", "--check",
                                "--diff", "--limit", "node1",
                                "-x", "nccl_rdma_nccl_settings={NCCL_DEBUG: INFO}")  # fmt: skip
            gpu = ["--env", "gpu", "--limit", "node2"]
            drv = pool.submit(cli, "configure", bp, *key, *gpu, "--role", "nvidia_driver")
            dcgm = pool.submit(cli, "configure", bp, *key, *gpu, "--role", "dcgm")
        proc, drv, dcgm = check.result(), drv.result(), dcgm.result()
    assert proc.returncode == 0, shown(proc)
    assert "+NCCL_DEBUG=INFO" in proc.stdout
    # Check mode reports what a real run would: the installed torch is no change.
    assert changed_tasks(proc.stdout).get("smoke_train", []) == [], shown(proc)
    assert sh(bed, "node1", "sha256sum /etc/nccl.conf") == conf

    for proc, task, text in (
        (drv, "nvidia_driver : Preflight | The host has an NVIDIA GPU", "has no NVIDIA GPU on its PCI bus"),
        (dcgm, "dcgm : Preflight | The host has NVIDIA GPUs with the driver loaded", "has no NVIDIA GPU with a loaded driver"),
    ):  # fmt: skip
        assert proc.returncode == 2, shown(proc)
        assert f"rackform configure: node2: {task}: node2 {text}" in proc.stderr, shown(proc)

    # No run (the converge, check mode, failures) left smoke_train's validators archive on the
    # controller.
    for tmp in (controller_tmp, converged.controller_tmp):
        assert not list(tmp.glob("*.validators.tar.gz")), tmp


def test_a_failed_raid0_member_is_named_with_its_array(configured, phases):
    # A RAID0 member fails (its NVMe drive is pulled off the PCI bus): md marks the array
    # broken, and configure says so by array and member, with what to do, instead of failing
    # at the mount. (The last of this scenario: node2's array is gone for good.)
    converged, _ = configured
    bed, bp, key = converged.bed, converged.blueprint, converged.key
    with phases("a RAID0 member fails on node2: configure names the array and the member"):
        sh(bed, "node2",
           "d=$(basename $(readlink -f /dev/disk/by-id/nvme-QEMU_NVMe_Ctrl_RFTB02N1))"
           " && echo 1 > /sys/block/$d/device/device/remove"
           " && (dd if=/dev/md/checkpoints of=/dev/null bs=1M count=64 iflag=direct || true)")  # fmt: skip
        broken = cli("configure", bp, *key, "--env", "wipe", "--limit", "node2",
                     "--role", "nvme_raid")  # fmt: skip
    assert broken.returncode == 2, shown(broken)
    assert "node2: nvme_raid :" in broken.stderr and "is not healthy (state broken" in broken.stderr
    assert "its data is lost" in broken.stderr, shown(broken)
    # The host checks shipped with the smoke job: the mount is there, the array is not.
    out = sh(bed, "node2", "cd /opt/rackform/smoke && /opt/rackform/venv/bin/python -m"
             f" validators.hostcheck --expect-mount {MOUNT} --storage-probe-mb 0 --no-table"
             " --json /tmp/hostcheck.json >/dev/null; cat /tmp/hostcheck.json", check=False)  # fmt: skip
    mount = next(c for c in json.loads(out)["checks"] if c["name"] == "checkpoint_mount")
    # Never a pass: the array under the mount is broken (or the kernel dropped the mount).
    assert mount["status"] == "fail", mount
    assert "not healthy" in mount["detail"] or "not a mounted" in mount["detail"], mount


def check_array(bed: lifecycle.Testbed, node: str) -> None:
    """RAID0 over four NVMe drives, XFS aligned to the stripe, mounted noatime, in fstab by
    UUID and in mdadm.conf."""
    md = sh(bed, node, "cat /proc/mdstat")
    assert re.search(r"md\d+ : active raid0 (nvme\dn1\[\d\] ?){4}", md), md
    fstype, source, options = sh(bed, node, f"findmnt -n -o FSTYPE,SOURCE,OPTIONS {MOUNT}").split()
    assert fstype == "xfs" and source.startswith("/dev/md") and "noatime" in options.split(",")
    uuid = sh(bed, node, f"blkid -s UUID -o value {source}").strip()
    assert f"UUID={uuid} {MOUNT} xfs noatime,nofail 0 0" in sh(bed, node, "cat /etc/fstab")
    md_uuid = re.search(r"MD_UUID=(\S+)", sh(bed, node, f"mdadm --detail --export {source}")).group(
        1
    )
    assert re.search(
        rf"^ARRAY /dev/md/checkpoints metadata=1.2 UUID={md_uuid} name=any:checkpoints$",
        sh(bed, node, "cat /etc/mdadm/mdadm.conf"),
        re.M,
    )
    # XFS stripe unit = the 512 KiB chunk, width = 4 data drives (xfs_info counts 4 KiB blocks).
    info = sh(bed, node, f"xfs_info {MOUNT}")
    assert re.search(r"sunit=128 +swidth=512 blks", info), info


def check_fabric(bed: lifecycle.Testbed, node: str) -> None:
    conf = sh(bed, node, "cat /etc/nccl.conf")
    assert "NCCL_SOCKET_IFNAME=priv0" in conf and "NCCL_IB_DISABLE=1" in conf
    env = sh(bed, node, "cat /etc/nccl.env")
    assert "GLOO_SOCKET_IFNAME=priv0" in env
    # A login session gets the lifted limit through PAM, and the sysctl values are live.
    assert sh(bed, node, "ulimit -l").strip() == "unlimited"
    assert sh(bed, node, "sysctl -n net.core.rmem_max").strip() == "67108864"
    assert "DefaultLimitMEMLOCK=infinity" in sh(
        bed, node, "cat /etc/systemd/system.conf.d/90-rackform-memlock.conf"
    )
    other = "10.77.0.12" if node == "node1" else "10.77.0.11"
    sh(bed, node, f"ping -c 1 -W 5 -I priv0 {other}")  # the private VM-to-VM network


def sign_and_verify_node_reports(reports: Path, bp: Path, tmp_path: Path) -> None:
    """Promotion evidence from the testbed's own nodes: the reports smoke_train fetched back
    from node1 and node2, read and merged by the Validate stage's code, made into its signed
    statement, and verified as `rackform promote` and `up` verify evidence; an edited node
    report then fails the signature."""
    import base64

    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    from rackform.engine import prepare
    from rackform.gitops import trust
    from rackform.gitops.evidence import EvidenceError, attest, check
    from rackform.gitops.pin import pin_of
    from rackform.gitops.signing import SIGNING_ENV, key_id, public_pem
    from rackform.validation.cluster import merge_reports, read_reports

    plan = prepare(bp, "wipe").plan
    hosts = ["node1", "node2"]
    report = merge_reports(hosts, read_reports(reports), 0)
    key = Ed25519PrivateKey.generate()
    pem = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    about = {"stack": plan.stack, "cluster": plan.name, "environment": plan.environment,
             "pin": pin_of(plan)}  # fmt: skip
    envelope = attest(report, about, hosts, environ={SIGNING_ENV: pem.decode()})
    public = public_pem(key.public_key()).strip().replace("\n", "\n      ")
    (tmp_path / "promotion-keys.yaml").write_text(
        f"keys:\n  - name: testbed  # {key_id(key.public_key())}\n"
        f"    environments: [{plan.environment}]\n    public_key: |\n      {public}\n"
    )
    keys = trust.load(tmp_path / "promotion-keys.yaml")
    proven = check(envelope, keys, plan, now=datetime.now(UTC), age=timedelta(hours=1),
                   expected_nodes=(2, 2))  # fmt: skip
    assert proven.nodes == 2 and proven.pin["blueprint"] == plan.digest
    checks = {c["name"]: c["status"] for c in proven.statement["predicate"]["report"]["checks"]}
    assert checks["node_reports"] == "pass" and checks["node2/loss_drop"] == "pass"
    st = json.loads(base64.b64decode(envelope["payload"]))
    st["predicate"]["report"]["nodes"]["node2"]["checks"][0]["measured"] = -1
    edited = {**envelope, "payload": base64.b64encode(json.dumps(st).encode()).decode()}
    with pytest.raises(EvidenceError, match="does not verify"):
        check(edited, keys, plan, now=datetime.now(UTC), age=None, expected_nodes=(2, 2))


def check_smoke_reports(reports: Path) -> str:
    """Both nodes' reports passed; returns where the job's time went, as a note."""
    times = {}
    runs = [d for d in reports.iterdir() if d.is_dir()]
    assert len(runs) == 1, runs
    for node in ("node1", "node2"):
        doc = json.loads((runs[0] / f"{node}.json").read_text())
        checks = {c["name"]: c for c in doc["checks"]}
        assert checks["job_completed"]["status"] == "pass"
        assert checks["node_count"]["status"] == "pass" and checks["node_count"]["measured"] == 2
        assert checks["loss_drop"]["status"] == "pass"
        assert checks["checkpoint_mount"]["status"] == "pass"
        assert checks["checkpoint_roundtrip"]["status"] == "pass"
        times[node] = {**doc["launch_s"], **doc["metrics"]["phases_s"]}
    return "smoke job (s): " + "; ".join(
        f"{node}: " + ", ".join(f"{k} {v:.1f}" for k, v in t.items()) for node, t in times.items()
    )
