"""End to end: two Debian VMs under QEMU, each with four emulated NVMe drives, converged by
`rackform configure` with every role, as a user would run it.

It shows, on real (virtual) hosts: check mode changing nothing on a fresh VM; a drive holding a
filesystem refused in safe mode, naming the drive and what it holds, with nothing on it lost; an
md RAID0 with XFS aligned to the stripe, mounted with noatime, in fstab by UUID and in
mdadm.conf, still mounted after a reboot; /etc/nccl.conf, the env file, memlock limits and
sysctl in place; nvidia_driver and dcgm skipping GPU-less hosts with their message, and failing
in preflight when GPUs are expected; the slurm role forming a Slurm cluster of the two VMs
(slurmctld on node1, slurmd and the spot agent on both); smoke_train installing torch (this
machine's CPU wheel, served on loopback) and running the smoke job across both VMs over gloo as
one Slurm job (srun starting torchrun on each node), its reports fetched back; a second converge
of every role with changed=0. RACKFORM_E2E_SMOKE=0 leaves slurm and smoke_train out (a quicker
local run); CI runs them.

The smoke job runs once in the e2e, through Slurm, as a training cluster with a scheduler runs
it: the Slurm e2e (tests/e2e/test_slurm_vms.py) uses the cluster this converge forms. What the
role does without a scheduler differs only in how the same command starts on each node (three
tasks of roles/smoke_train/tasks/torchrun.yml: started by Ansible, waited for by its exit file);
the command, torchrun's rendezvous and the report are the ones shown here.

Each phase's time is printed when the session's tests end and again in pytest's closing summary
(tests/e2e/conftest.py, with the testbed and server fixtures this file shares with the other
e2e files), where the tail of a CI log shows it.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from slurm_helpers import SLURM_VARS, check_formed, slurm_blueprint, smoke_vars, start_imds
from vms import MOUNT, ROOT, TORCH, UNCONVERGE, cli, sh, shown, slowest_tasks, summary

from rackform.testbed import lifecycle

pytestmark = pytest.mark.slow

DIRTY_SERIAL = "RFTB02N2"  # node2's third drive: it gets a filesystem before the first converge


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


def state(bed: lifecycle.Testbed, node: str) -> str:
    """What a converge would change, as one text: arrays, mounts, files the roles write."""
    return sh(
        bed,
        node,
        "cat /proc/mdstat; findmnt -rn -o TARGET,SOURCE | sort; cat /etc/fstab;"
        " cat /etc/mdadm/mdadm.conf; ls /etc/nccl.conf /etc/nccl.env /opt/rackform"
        " /etc/security/limits.d /etc/sysctl.d 2>&1; for d in /dev/nvme?n1; do wipefs -n $d; done",
    )


@dataclass
class Run:
    """What the scenarios below share: the two VMs, the blueprint and the converge's arguments,
    and how far the cluster got (a scenario that needs the first converge is skipped, saying
    so, when it did not pass; one that fails no longer hides the later ones)."""

    bed: lifecycle.Testbed
    bp: Path
    key: list
    converge: list
    reports: Path
    tmp: Path
    controller_tmp: Path
    smoke: bool
    roles: list
    converged: bool = False


def converged(run: Run) -> None:
    if not run.converged:
        pytest.skip("the first converge did not pass (test_first_converge_of_every_role)")


@pytest.fixture(scope="module")
def run(testbed, apt_repo, wheel_server, phases, tmp_path_factory):
    bed, tmp = testbed, tmp_path_factory.mktemp("configure")
    # The controller's temporary files (the validators archive among them) go here, so the end
    # can tell that no run left one behind.
    controller_tmp = tmp / "controller-tmp"
    controller_tmp.mkdir()
    smoke = os.environ.get("RACKFORM_E2E_SMOKE", "1") != "0"
    if not smoke:
        phases.notes.append("smoke_train not exercised: RACKFORM_E2E_SMOKE=0")
    elif wheel_server is None:
        pytest.fail(
            f"no torch {TORCH} CPU wheel on this machine for smoke_train (looked in"
            " $PIP_FIND_LINKS, /opt/wheels, /opt/pypi*/files); RACKFORM_E2E_SMOKE=0 runs without it"
        )
    bp = slurm_blueprint(bed, tmp)
    key = ["--private-key", bed.key, "--known-hosts", bed.known_hosts]
    reports = tmp / "reports"
    roles = [] if smoke else [
        "--role", "nvidia_driver", "--role", "nccl_rdma", "--role", "nvme_raid", "--role", "dcgm",
    ]  # fmt: skip
    # Slurm among every role: the smoke job runs through it (the Slurm e2e uses the cluster
    # this converge forms: tests/e2e/test_slurm_vms.py).
    slurm = [*SLURM_VARS, *smoke_vars(wheel_server)] if smoke else []
    converge = [bp, *key, "--report-dir", reports, *roles, *slurm]
    # Both VMs as never converged, whichever e2e files ran on them before this one.
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("TMPDIR", str(controller_tmp))
        on_both(lambda n: sh(bed, n, UNCONVERGE))
        yield Run(bed, bp, key, converge, reports, tmp, controller_tmp, smoke, roles)


def test_check_mode_on_a_fresh_node_and_safe_mode_on_a_drive_with_data(run, phases):
    # 1. Check mode on a fresh VM (node1) reports what it would do and changes nothing; at the
    # same time, 2. safe mode (node2): a drive holding a filesystem is refused, by name, and
    # nothing on it is lost. One run per VM, each on its own VM's emulated CPUs.
    bed, bp, key, converge = run.bed, run.bp, run.key, run.converge
    # The node image holds Slurm's node packages (slurm_packages) and no munge key of its own:
    # every node would share it, and anyone with the image would have it.
    baked = sh(bed, "node2", "dpkg-query -W -f '${Package}=${Status}\\n' munge slurm-client"
               " slurmd slurmctld 2>&1; ls /etc/munge/munge.key 2>&1 || true")  # fmt: skip
    for package in ("munge", "slurm-client", "slurmd"):
        assert f"{package}=install ok installed" in baked, baked
    assert "slurmctld=install ok installed" not in baked, baked  # the controller's, never a node's
    assert "No such file" in baked, baked
    dev = f"/dev/disk/by-id/nvme-QEMU_NVMe_Ctrl_{DIRTY_SERIAL}"
    sh(bed, "node2", f"mkfs.ext4 -q -L keepme {dev} && mkdir -p /mnt/keep && mount {dev} /mnt/keep"
       " && head -c 4M /dev/urandom > /mnt/keep/data && sha256sum /mnt/keep/data > /root/keep.sum"
       " && umount /mnt/keep")  # fmt: skip
    before = state(bed, "node1")
    with phases("at once: configure --check --diff on fresh node1; safe mode on node2 (nvme_raid"
                " refuses a drive with a filesystem)"):  # fmt: skip
        with ThreadPoolExecutor(max_workers=2) as pool:
            check = pool.submit(
                cli, "configure", *converge, "--check", "--diff", "--limit", "node1"
            )
            safe = pool.submit(
                cli, "configure", bp, *key, "--limit", "node2", "--role", "nvme_raid"
            )
        proc, refused = check.result(), safe.result()
    assert proc.returncode == 0, shown(proc)
    assert "would create RAID 0 /dev/md/checkpoints" in proc.stdout
    assert "+NCCL_SOCKET_IFNAME=priv0" in proc.stdout  # the diff of /etc/nccl.conf
    # A run over part of the cluster rewrites no cluster-wide file (/etc/hosts lists every
    # node) from its partial view, and runs no job that must span every node.
    assert "this run covers 1 of the cluster's 2 nodes (--limit)" in proc.stdout, shown(proc)
    assert "/etc/hosts" not in "".join(line for line in proc.stdout.splitlines() if "+++" in line)
    assert "limited to node1" in proc.stdout.splitlines()[0]
    assert state(bed, "node1") == before, "check mode changed a host"

    assert refused.returncode != 0, shown(refused) + sh(
        bed, "node2", "cat /proc/mdstat; for d in /dev/nvme?n1; do wipefs $d; done; findmnt", False
    )
    refusal = [line for line in refused.stderr.splitlines() if DIRTY_SERIAL in line]
    assert refusal, shown(refused)
    assert "node2: nvme_raid : Refuse drives that are in use or hold data" in refusal[0]
    assert "ext4 filesystem" in refusal[0] and "keepme" in refusal[0]
    assert "nvme_raid_allow_wipe" in refusal[0]
    assert "md" not in sh(bed, "node2", "cat /proc/mdstat | grep ^md || true")
    sh(
        bed,
        "node2",
        f"mount -o ro {dev} /mnt/keep && sha256sum -c /root/keep.sum && umount /mnt/keep",
    )


def test_first_converge_of_every_role(run, phases):
    # 3. Every role, allowing the wipe (environment `wipe`): what the scenarios after it build on.
    bed, bp, converge, reports, smoke = run.bed, run.bp, run.converge, run.reports, run.smoke
    events = run.tmp / "first-converge-events"
    on_both(lambda n: start_imds(bed, n))  # what the spot agent watches
    with phases("configure (first converge)" + (", with torch and the smoke job" if smoke else "")):
        proc = cli("configure", *converge, "--env", "wipe", "--artifacts", events)
    phases.notes.append("the first converge's slowest tasks (wall, both VMs at once):")
    phases.notes += [f"  {line}" for line in slowest_tasks(events)]
    assert proc.returncode == 0, shown(proc)
    first = summary(proc.stdout)
    assert set(first) == {"node1", "node2"} and all(r["changed"] > 0 for r in first.values())
    for node in ("node1", "node2"):
        assert (
            f"{node}: nvidia_driver skipped on {node}: no NVIDIA GPU on its PCI bus" in proc.stdout
        )
        assert f"{node}: dcgm skipped on {node}: no NVIDIA GPU with a loaded driver" in proc.stdout
    on_both(lambda n: (check_array(bed, n), check_fabric(bed, n)))
    dev = f"/dev/disk/by-id/nvme-QEMU_NVMe_Ctrl_{DIRTY_SERIAL}"
    assert 'TYPE="ext4"' not in sh(bed, "node2", f"blkid -p {dev} || true")
    # What the nodes now run (every role, so the whole of it) is recorded: a later
    # `configure --rolling` compares the blueprint with it.
    if not run.roles:
        (applied,) = Path(os.environ["RACKFORM_ROLLOUT_DIR"]).glob("*-wipe.applied.json")
        ran = json.loads(applied.read_text())["variables"]
        assert ran["nvme_raid_allow_wipe"] is True and ran["slurm_enabled"] is True
    if smoke:
        check_formed(bed, proc, reports)
        phases.notes.append(check_smoke_reports(reports))
        sign_and_verify_node_reports(reports, bp, run.tmp)
    run.converged = True


def test_the_array_comes_back_after_a_reboot(run, phases):
    # 4. The array comes back after a reboot (a power cycle after sync), mounted from fstab, as
    # /dev/md/checkpoints even where /etc/hostname names the host otherwise than the kernel does
    # (node1 here; the testbed's kernel takes its host name from its command line).
    converged(run)
    bed = run.bed
    sh(bed, "node1", "cp /etc/hostname /root/hostname.orig && echo renamed-node1 > /etc/hostname")
    try:
        with phases("reboot both VMs"):
            lifecycle.reboot_and_wait(bed, ["node1", "node2"], hard=True)
        on_both(lambda n: check_array(bed, n))
        on_both(lambda n: sh(bed, n, "test -b /dev/md/checkpoints"))
    finally:
        sh(bed, "node1", "cp /root/hostname.orig /etc/hostname")


def test_a_second_converge_changes_nothing(run, phases):
    # 5. A second converge changes nothing (the smoke job does not run again either).
    converged(run)
    with phases("configure (second converge)"):
        proc = cli("configure", *run.converge, "--env", "wipe")
    assert proc.returncode == 0, shown(proc)
    assert all(r["changed"] == 0 for r in summary(proc.stdout).values()), shown(proc)


def test_an_mkfs_cut_short_is_made_again(run, phases):
    # 5b. An mkfs cut short: node1's XFS gets its superblock marked "in progress", the state a
    # power cut 2 s into mkfs.xfs leaves (blkid still says xfs; the mount says "Structure needs
    # cleaning"). The role sees its own unfinished work and makes the filesystem again.
    converged(run)
    bed = run.bed
    sh(bed, "node1", f"umount {MOUNT} && xfs_db -x -c 'sb 0' -c 'write -d inprogress 1'"
                     " /dev/md/checkpoints >/dev/null && blkid -s TYPE -o value /dev/md/checkpoints"
                     f" | grep -qx xfs && ! mount {MOUNT} 2>/dev/null")  # fmt: skip
    redo_events = run.tmp / "mkfs-redo-events"
    t0 = time.monotonic()
    with phases("an mkfs cut short on node1: configure makes the filesystem again"):
        redo = cli("configure", *run.converge, "--env", "wipe", "--limit", "node1",
                   "--role", "nvme_raid", "--artifacts", redo_events)  # fmt: skip
    if time.monotonic() - t0 > 90:  # usually ~20 s; fresh run #19 stalled ~300 s somewhere
        phases.notes.append("the mkfs redo was slow; its slowest tasks:")
        phases.notes += [f"  {line}" for line in slowest_tasks(redo_events, 5)]
    assert redo.returncode == 0, shown(redo)
    assert "whose mkfs never finished" in redo.stdout, shown(redo)
    check_array(bed, "node1")


def test_nvme_raid_interrupted_at_mkfs_finishes_when_run_again(run, phases):
    # 5c. Interrupted at a named task: as nvme_raid starts making the filesystem on a fresh array
    # of node1, the controller is killed, or the VM's power is cut; a rerun, unchanged, finishes
    # the work.
    converged(run)
    bed = run.bed
    nvme_raid_node1 = [*run.converge, "--env", "wipe", "--limit", "node1", "--role", "nvme_raid"]
    for how in ("controller killed", "power cut"):
        sh(bed, "node1", RESET_ARRAY)
        with phases(f"nvme_raid interrupted as mkfs starts on node1 ({how}), then run again"):
            cut = None if how == "controller killed" else lambda: lifecycle.reboot_and_wait(
                bed, ["node1"], power_cut=True)  # fmt: skip
            seen = interrupted(["configure", *nvme_raid_node1], MKFS_TASK, cut)
            again = cli("configure", *nvme_raid_node1)
        assert MKFS_TASK in seen, seen
        assert again.returncode == 0, shown(again)
        check_array(bed, "node1")


def test_check_mode_shows_a_changed_setting_and_gpu_roles_refuse_a_host_without_gpus(run, phases):
    # 6. Check mode on a converged host with a changed setting: reported, not applied; and
    # 7. declared GPU nodes without GPUs fail in preflight, saying why (environment `gpu`).
    # Neither changes a host, so the three runs go at once: the check on node1, the two GPU roles
    # on node2 (this keeps the two VMs equally busy).
    converged(run)
    bed, bp, key, converge = run.bed, run.bp, run.key, run.converge
    conf = sh(bed, "node1", "sha256sum /etc/nccl.conf")
    with phases("at once: --check --diff with a changed NCCL setting (node1); GPU roles on a host"
                " declared with GPUs (node2, preflight failures)"):  # fmt: skip
        with ThreadPoolExecutor(max_workers=3) as pool:
            check = pool.submit(cli, "configure", *converge, "--env", "wipe", "--role", "nccl_rdma",
                                "--role", "smoke_train", "--check", "--diff", "--limit", "node1",
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


def test_a_failed_raid0_member_is_named_by_array_and_member(run, phases):
    # 8. A RAID0 member fails (its NVMe drive is pulled off the PCI bus): md marks the array
    # broken, and configure says so by array and member, with what to do, instead of failing
    # at the mount. (The last scenario: node2's array is gone for good.)
    converged(run)
    bed, bp, key = run.bed, run.bp, run.key
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
    if run.smoke:
        # The host checks shipped with the smoke job: the mount is there, the array is not.
        out = sh(bed, "node2", "cd /opt/rackform/smoke && /opt/rackform/venv/bin/python -m"
                 f" validators.hostcheck --expect-mount {MOUNT} --storage-probe-mb 0 --no-table"
                 " --json /tmp/hostcheck.json >/dev/null; cat /tmp/hostcheck.json", check=False)  # fmt: skip
        mount = next(c for c in json.loads(out)["checks"] if c["name"] == "checkpoint_mount")
        # Never a pass: the array under the mount is broken (or the kernel dropped the mount).
        assert mount["status"] == "fail", mount
        assert "not healthy" in mount["detail"] or "not a mounted" in mount["detail"], mount


def test_no_run_left_the_validators_archive_on_the_controller(run):
    # Every run above (check mode and failures among them) removed smoke_train's archive.
    assert not list(run.controller_tmp.glob("*.validators.tar.gz"))


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
    # The service manager took the limit without a reboot, and a service started now gets it.
    assert sh(bed, node, "systemctl show --property=DefaultLimitMEMLOCK --value").strip() == (
        "infinity"
    )
    assert sh(bed, node, "systemd-run --wait --pipe --quiet sh -c 'ulimit -l'").strip() == (
        "unlimited"
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

    from rackform.acceptance.cluster import merge_reports, read_reports
    from rackform.engine import prepare
    from rackform.evidence import trust
    from rackform.evidence.pin import pin_of
    from rackform.evidence.signing import SIGNING_ENV, key_id, public_pem
    from rackform.evidence.statement import EvidenceError, attest, check

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
