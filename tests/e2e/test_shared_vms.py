"""End to end: the shared tier on the testbed's two VMs, as a small site runs it. The blueprint
names node1 as the NFS server (`storage.shared.server.host`); `rackform configure --role
shared_storage` installs the server there, exports /srv/shared to the private network, binds it
at /shared on node1 and mounts it over NFS on node2, with a user of the same uid on both. Then:

- the second converge changes nothing;
- the host checks the validation ships with the smoke job, with the arguments the plan gives
  them, on both VMs at once: the mount, a dataset shard read with the page cache dropped against
  the blueprint's declared rate (under emulation reads come from the host's page cache, so the
  figure proves the plumbing, not the speed), and each VM reading the file the other wrote;
- a checkpoint node2 copies to the tier (the directory form of the checkpoint tier) is restored
  byte for byte on node1, as the same user;
- a VM whose tier is unmounted fails the check by name, and fstab mounts it again.

Its share of the suite's budget: under three minutes (the phases' table says what it took). The
VMs are left without the tier at the end, as the other files expect them."""

from __future__ import annotations

import base64
import io
import json
import shlex
import tarfile
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
import yaml
from vms import ROOT, blueprint, cli, sh, shown, summary

from rackform.acceptance.argv import host_argv
from rackform.engine import prepare_all

pytestmark = pytest.mark.slow

SHARED = {
    "mount": "/shared",
    "holds": ["datasets", "checkpoints"],
    "server": {"type": "nfs", "host": "node1", "export": "/srv/shared"},
    "users": [{"name": "ml-train", "uid": 3101}],
}
# The data-loading check's rate, declared: the VMs have no GPUs to size it from.
READ_GBPS = 0.002
# Back to a VM without the tier, whatever this file (or a failed run of it) left.
UNDO = (
    "systemctl disable --now rackform-shared-storage-check.service 2>/dev/null;"
    " umount -f -l /shared 2>/dev/null; sed -i '\\# /shared #d' /etc/fstab;"
    " rm -f /etc/exports.d/rackform.exports /etc/systemd/system/rackform-shared-storage-check.service;"
    " (exportfs -ra; systemctl stop nfs-server) 2>/dev/null; userdel ml-train 2>/dev/null;"
    " groupdel ml-train 2>/dev/null; rm -rf /srv/shared /opt/rackform-e2e /tmp/ckpt /tmp/restored*"
    " /tmp/ckpt.sha256; true"
)


# The checkpoint tier on the shared file system, as a job's RACKFORM_CHECKPOINT_TIER names it.
TIER_DIR = "/shared/checkpoints/4242"
COPY_UP = (
    "import json; from validators.tier import ObjectTier;"
    f' t = ObjectTier({TIER_DIR!r}, keep=2); t.put(40, "/tmp/ckpt/step-40");'
    ' r = t.close(120); assert not r["errors"] and r["copies"], r'
)
RESTORE = (
    "import json; from validators.tier import ObjectTier;"
    f" t = ObjectTier({TIER_DIR!r}, keep=2); steps = t.steps();"
    ' n = t.restore(steps[-1], "/tmp/restored.part", "/tmp/restored");'
    ' print(json.dumps({"steps": steps, "bytes": n}))'
)


def as_user(command: str) -> str:
    return f"su -s /bin/sh ml-train -c {shlex.quote(command)}"


def undo(bed, check: bool = True) -> None:
    """The clients unmount first (lazily and forced: a client asking a server that has gone
    waits forever in D state), then the server stops."""
    for node in ("node2", "node1"):
        sh(bed, node, UNDO, check=check)


def on_both(check) -> dict:
    with ThreadPoolExecutor(max_workers=2) as pool:
        return dict(zip(("node1", "node2"), pool.map(check, ("node1", "node2")), strict=True))


def push_validators(bed, node: str) -> None:
    """The validators (standard library only for the host checks) to /opt/rackform-e2e."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        tar.add(ROOT / "validators", arcname="validators",
                filter=lambda t: None if "__pycache__" in t.name else t)  # fmt: skip
    bed.ssh(node).run(
        "mkdir -p /opt/rackform-e2e && base64 -d | tar xz -C /opt/rackform-e2e",
        input=base64.b64encode(buf.getvalue()).decode(),
    )


def host_checks(bed, node: str, argv: list[str]) -> dict[str, dict]:
    out = sh(bed, node, "cd /opt/rackform-e2e && python3 -m validators.hostcheck --json"
             f" /tmp/shared-check.json --no-table {' '.join(argv)} >/dev/null;"
             " cat /tmp/shared-check.json", check=False)  # fmt: skip
    return {c["name"]: c for c in json.loads(out)["checks"] if c["name"].startswith("shared_")}


def test_the_shared_tier_on_two_vms(testbed, apt_repo, phases, tmp_path):
    bed = testbed
    path = blueprint(bed, tmp_path)
    doc = yaml.safe_load(path.read_text())
    doc["storage"] = {**doc.get("storage", {}), "shared": SHARED}
    doc.setdefault("validation", {}).setdefault("thresholds", {})["shared_read_gbps"] = READ_GBPS
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    key = ["--private-key", bed.key, "--known-hosts", bed.known_hosts]
    converge = ["configure", path, *key, "--role", "shared_storage"]
    undo(bed)
    try:
        with phases("shared tier: first converge (NFS server on node1, mounted on both)"):
            first = cli(*converge)
        assert first.returncode == 0, shown(first)
        assert all(r["changed"] > 0 for r in summary(first.stdout).values()), shown(first)
        exports = sh(bed, "node1", "exportfs -v")
        assert "/srv/shared" in exports and "10.77.0.0/24" in exports and "root_squash" in exports
        # node1 uses the directory itself; node2 mounts node1's export over NFS, in fstab.
        assert sh(bed, "node1", "findmnt -n -o SOURCE /shared").strip().endswith("[/srv/shared]")
        fstype, source, options = sh(
            bed, "node2", "findmnt -n -o FSTYPE,SOURCE,OPTIONS /shared"
        ).split()
        assert fstype == "nfs4" and source == "10.77.0.11:/srv/shared", (fstype, source)
        assert {"hard", "noatime", "vers=4.2"} <= set(options.split(","))
        assert "10.77.0.11:/srv/shared /shared nfs vers=4.2,hard,noatime,_netdev 0 0" in sh(
            bed, "node2", "cat /etc/fstab"
        )
        # The same uid (and its own group's gid) on both; the boot check ran and passed.
        ids = on_both(lambda n: sh(bed, n, "id ml-train").strip())
        assert (
            ids["node1"]
            == ids["node2"]
            == "uid=3101(ml-train) gid=3101(ml-train) groups=3101(ml-train)"
        )
        on_both(lambda n: sh(bed, n, "systemctl is-active rackform-shared-storage-check.service"))

        with phases("shared tier: second converge"):
            second = cli(*converge)
        assert second.returncode == 0, shown(second)
        assert all(r["changed"] == 0 for r in summary(second.stdout).values()), shown(second)

        # The host checks, with the plan's arguments, on both VMs at once.
        (prepared,) = [p for p in prepare_all(path) if p.plan.environment == "default"]
        exp = prepared.plan.expectations
        run = f"e2e{int(time.time())}"
        sh(bed, "node1", "head -c 48M /dev/urandom > /shared/datasets/shard-000.bin")
        on_both(lambda n: push_validators(bed, n))

        def argv(node: str) -> list[str]:
            return host_argv(exp, storage_dir="/tmp", probe_mb=0, expect_mount=None, node=node,
                             run=run, peers=["node1", "node2"])  # fmt: skip

        assert "--shared-read-min-gbps" in argv("node1")
        with phases("shared tier: host checks on both VMs at once"):
            checks = on_both(lambda n: host_checks(bed, n, argv(n)))
        for got in checks.values():
            assert {c["status"] for c in got.values()} == {"pass"}, json.dumps(checks, indent=1)
            read = got["shared_read"]
            assert read["expected"] == READ_GBPS and read["measured"] >= READ_GBPS, read
            assert "48 MiB of 1 dataset file(s) under /shared/datasets" in read["detail"], read
            assert got["shared_visible"]["measured"] == "2/2 nodes"

        # A user's job on node2 copies its checkpoint to the tier (validators/tier.py, the
        # directory form the resumable job's RACKFORM_CHECKPOINT_TIER takes where the shared
        # tier holds checkpoints); node1, its own copy gone, restores it byte for byte, owned
        # by the same user there (the same uid on every node).
        sh(bed, "node2", as_user("mkdir -p /tmp/ckpt/step-40 && cd /tmp/ckpt/step-40 && for r in 0 1;"
           " do head -c 16M /dev/urandom > __${r}_0.distcp; done && sha256sum __*.distcp > /tmp/ckpt.sha256"
           f" && cd /opt/rackform-e2e && python3 -c {shlex.quote(COPY_UP)}"))  # fmt: skip
        sh(bed, "node1", "echo 1 > /proc/sys/vm/drop_caches")
        got = sh(
            bed, "node1", as_user(f"cd /opt/rackform-e2e && python3 -c {shlex.quote(RESTORE)}")
        )
        assert json.loads(got) == {"steps": [40], "bytes": 32 << 20}, got
        sums = sh(bed, "node2", "cat /tmp/ckpt.sha256")
        sh(bed, "node1", f"cd /tmp/restored && printf %s {shlex.quote(sums)} | sha256sum -c")
        owners = sh(bed, "node1", f"stat -c %U {TIER_DIR.replace('/shared', '/srv/shared')}"
                    "/step-00000040/__0_0.distcp /srv/shared/.rackform/validate/*/node2/token").split()  # fmt: skip
        # The user's files are the user's; node2's root is no one on the tier (root_squash).
        assert owners == ["ml-train", "nobody"], owners

        # Unmounted on node2: its check fails by name (and measures nothing on the root disk);
        # fstab's line mounts it again.
        sh(bed, "node2", "umount /shared")
        got = host_checks(bed, "node2", argv("node2"))
        assert got["shared_mount"]["status"] == "fail", got
        assert "is a plain directory, not mounted" in got["shared_mount"]["detail"]
        assert got["shared_read"]["status"] == got["shared_visible"]["status"] == "not-run"
        sh(bed, "node2", "mount /shared && findmnt -n /shared")
    finally:
        undo(bed, check=False)
