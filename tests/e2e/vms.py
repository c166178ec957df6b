"""Helpers the e2e files share: the real `rackform` command, SSH into a testbed VM, and the
testbed's blueprint. Plain functions in a module of their own, not in conftest.py: every
conftest.py is imported under the one name `conftest`, so importing from it is unreliable (see
tests/conftest.py). The fixtures (testbed, wheel_server, apt_repo, phases) are in conftest.py."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime
from itertools import pairwise
from pathlib import Path

import yaml

from rackform.testbed import lifecycle

ROOT = Path(__file__).resolve().parents[2]
TORCH = "2.13.0"
MOUNT = "/mnt/checkpoints"


def cli(*args, timeout: float = 1500) -> subprocess.CompletedProcess:
    """The real `rackform` command, as a user runs it."""
    return subprocess.run(
        [sys.executable, "-m", "rackform", *map(str, args)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
    )


def shown(proc: subprocess.CompletedProcess) -> str:
    return f"exit {proc.returncode}\n--- stdout\n{proc.stdout[-6000:]}\n--- stderr\n{proc.stderr[-3000:]}"


def sh(bed: lifecycle.Testbed, node: str, command: str, check: bool = True) -> str:
    return bed.ssh(node).run(command, check=check).stdout


@contextmanager
def booted_testbed(d: Path, nodes: int, timed, baked: bool = False) -> Iterator[lifecycle.Testbed]:
    """`rackform testbed up` in `d`, as a user runs it, inside `timed` (a phase of the e2e
    timer); down again afterwards, with no QEMU left. `baked`: from the baked image."""
    try:
        with timed:
            proc = cli(
                "testbed", "up", "--nodes", nodes, "--dir", d, *(["--baked"] if baked else [])
            )
        assert proc.returncode == 0, shown(proc)
        yield lifecycle.Testbed.load(d)
    finally:
        down = cli("testbed", "down", "--dir", d, timeout=120)
        assert down.returncode == 0, shown(down)
        assert qemus_of(d) == [], "QEMU processes left running"


def qemus_of(d: Path) -> list[int]:
    pids = []
    for p in Path("/proc").iterdir():
        if p.name.isdigit():
            try:
                cmd = (p / "cmdline").read_bytes()
            except OSError:
                continue
            if cmd.startswith(b"qemu-system") and str(d).encode() in cmd:
                pids.append(int(p.name))
    return pids


# The testbed's cluster runs Slurm (the session's one converge sets it up with every other role):
# slurmctld on node1, slurmd on both, a default partition and a preemptible one.
SCHEDULER = {
    "type": "slurm",
    "controller": "node1",
    "partitions": [
        {"name": "main", "node_groups": ["vms"], "default": True, "priority_tier": 10},
        {"name": "low", "node_groups": ["vms"], "priority_tier": 1, "preemptible": True},
    ],
    "preemption": {"mode": "requeue", "grace_s": 10},
}
# The EC2 metadata stand-in the spot agent watches, on each VM's loopback (tests/fake_imds.py).
IMDS_PORT = 8169
NOTICE = "/run/fake-imds/notice.json"
FAKE_IMDS = Path(__file__).resolve().parents[1] / "fake_imds.py"
# To keep the e2e short, the cluster requeues a job 10 s after it stops (slurm_cred_expire_s;
# Slurm's default 120 s), and the spot agent looks every second and requeues 2 s after its
# checkpoint signal.
SLURM_VARS = [
    "-x", "slurm_cred_expire_s=10",
    "-x", "slurm_spot_agent=true",
    "-x", f"slurm_spot_agent_imds_url=http://127.0.0.1:{IMDS_PORT}",
    "-x", "slurm_spot_agent_interval_s=1",
    "-x", "slurm_spot_agent_requeue_after_s=2",
]  # fmt: skip
# The metadata stand-in started (no notice yet), whatever ran before: a transient unit, gone
# after a reboot or a restore.
START_IMDS = (
    "systemctl stop fake-imds 2>/dev/null; systemctl reset-failed fake-imds 2>/dev/null;"
    " rm -rf /run/fake-imds;"
    f" systemd-run --quiet --unit=fake-imds python3 /root/fake_imds.py --port {IMDS_PORT}"
    f" --notice {NOTICE}"
)


def start_imds(bed: lifecycle.Testbed) -> None:
    for node in ("node1", "node2"):
        bed.ssh(node).run(f"cat > /root/fake_imds.py; {START_IMDS}", input=FAKE_IMDS.read_text())


def smoke_vars(wheel_server: int) -> list[str]:
    """torch from the wheel server, and a smoke job sized for emulated VMs."""
    return [
        "-x", f'smoke_train_pip_find_links=["http://10.0.2.2:{wheel_server}/"]',
        "-x", "smoke_train_pip_no_index=true",
        "-x", 'smoke_train_pip_trusted_hosts=["10.0.2.2"]',
        # Byte-compiling torch doubles its install time under TCG.
        "-x", "smoke_train_pip_compile=false",
        "-x", "smoke_train_storage_probe_mb=64",
        # Floating point is emulated under TCG: a step of the tiny model (8 x 64 tokens) takes
        # 2.4-7 s. A quarter of the tokens (4 x 32) at twice the learning rate: 10 steps still
        # drop the loss by about 0.39 (the floor is 0.2).
        "-x", "smoke_train_steps=10",
        "-x", 'smoke_train_model_args=["--batch", "4", "--seq-len", "32", "--lr", "0.006"]',
    ]  # fmt: skip


def blueprint(bed: lifecycle.Testbed, tmp: Path) -> Path:
    """The testbed's blueprint with Slurm (SCHEDULER), node2 finding its drives itself (no
    serials listed) and two environments: `wipe` (allow_wipe) and `gpu` (the same VMs declared
    as GPU nodes)."""
    doc = yaml.safe_load(Path(bed.blueprint).read_text())
    doc["node_groups"][0]["hosts"][1].pop("nvme")
    doc["scheduler"] = SCHEDULER
    doc["environments"] = {
        "wipe": {"storage": {"checkpoint": {"allow_wipe": True}}},
        "gpu": {"node_groups": [{"name": "vms", "gpu": "L4", "gpus_per_node": 1}]},
    }
    path = tmp / "testbed-e2e.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


# node2's third drive: it gets a filesystem with data before the first converge, which safe mode
# must refuse to touch and the `wipe` environment then wipes.
DIRTY_SERIAL = "RFTB02N2"
DIRTY = f"/dev/disk/by-id/nvme-QEMU_NVMe_Ctrl_{DIRTY_SERIAL}"


def node_state(bed, node: str) -> str:
    """What a converge would change, as one text: arrays, mounts, files the roles write."""
    return sh(
        bed,
        node,
        "cat /proc/mdstat; findmnt -rn -o TARGET,SOURCE | sort; cat /etc/fstab;"
        " cat /etc/mdadm/mdadm.conf; ls /etc/nccl.conf /etc/nccl.env /opt/rackform"
        " /etc/security/limits.d /etc/sysctl.d 2>&1; for d in /dev/nvme?n1; do wipefs -n $d; done",
    )


def find_torch_wheel() -> Path | None:
    """The CPU torch wheel this machine carries (never a download: PyPI's is the CUDA build)."""
    dirs = [Path(p) for p in os.environ.get("PIP_FIND_LINKS", "").split() if p]
    dirs += [Path("/opt/wheels"), *Path("/opt").glob("pypi*/files")]
    for d in dirs:
        found = sorted(d.glob(f"torch-{TORCH}+cpu-cp311-*manylinux*x86_64.whl"))
        if found:
            return found[0]
    return None


def summary(stdout: str) -> dict[str, dict[str, int]]:
    """The per-host table `rackform configure` prints."""
    rows = {}
    lines = stdout.splitlines()
    start = next(i for i, line in enumerate(lines) if line.split()[:2] == ["host", "ok"])
    for line in lines[start + 1 :]:
        parts = line.split()
        if len(parts) != 6 or not parts[1].isdigit():
            break
        rows[parts[0]] = dict(
            zip(
                ("ok", "changed", "failed", "unreachable", "skipped"),
                map(int, parts[1:]),
                strict=True,
            )
        )
    return rows


def slowest_tasks(artifacts: Path, n: int = 12) -> list[str]:
    """The `n` tasks that took the most wall time in a `rackform configure --artifacts` run, from
    ansible-runner's event log: each task from its start to the next task's (the hosts run each
    task together), summed over the tasks of that name (a role's task in a loop or run twice)."""
    events = []
    for path in artifacts.glob("**/job_events/*.json"):
        ev = json.loads(path.read_text())
        if ev.get("event") in ("playbook_on_task_start", "playbook_on_stats"):
            events.append(ev)
    events.sort(key=lambda ev: ev["counter"])
    took: dict[str, float] = {}
    for ev, nxt in pairwise(events):
        if ev["event"] != "playbook_on_task_start":
            continue
        start, end = (datetime.fromisoformat(e["created"]) for e in (ev, nxt))
        name = ev["event_data"].get("task", "?")
        role = ev["event_data"].get("role")
        key = f"{role} : {name}" if role else name
        took[key] = took.get(key, 0.0) + (end - start).total_seconds()
    top = sorted(took.items(), key=lambda kv: -kv[1])[:n]
    return [f"{s:6.0f} s  {name}" for name, s in top]
