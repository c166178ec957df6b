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
def booted_testbed(
    d: Path, nodes: int, timed, image: Path | None = None, cpus: int = 1
) -> Iterator[lifecycle.Testbed]:
    """`rackform testbed up` in `d`, as a user runs it, inside `timed` (a phase of the e2e
    timer); down again afterwards, with no QEMU left. `image`: every VM from this image
    directory (the node image `rackform image build` baked) rather than the base image.
    `cpus`: each VM's vCPUs."""
    image_arg = ["--image", image] if image is not None else []
    try:
        with timed:
            proc = cli("testbed", "up", "--nodes", nodes, "--dir", d, "--cpus", cpus, *image_arg)
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


def blueprint(bed: lifecycle.Testbed, tmp: Path) -> Path:
    """The testbed's blueprint, with node2 finding its drives itself (no serials listed) and
    two environments: `wipe` (allow_wipe) and `gpu` (the same VMs declared as GPU nodes)."""
    doc = yaml.safe_load(Path(bed.blueprint).read_text())
    doc["node_groups"][0]["hosts"][1].pop("nvme")
    doc["environments"] = {
        "wipe": {"storage": {"checkpoint": {"allow_wipe": True}}},
        "gpu": {"node_groups": [{"name": "vms", "gpu": "L4", "gpus_per_node": 1}]},
    }
    path = tmp / "testbed-e2e.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


# A VM as a test that needs never-converged storage and fabric finds it, whatever another e2e
# file did before (files pass in any order): drives pulled off the PCI bus are back, no md
# array, no signature on any drive, no fstab or mdadm.conf line, no /etc/nccl.conf.
UNCONVERGE = (
    "echo 1 > /sys/bus/pci/rescan; udevadm settle; umount -l " + MOUNT + " 2>/dev/null;"
    " for md in /dev/md[0-9]*; do [ -b $md ] && mdadm --stop $md; done 2>/dev/null;"
    " for d in /dev/nvme?n1; do mdadm --zero-superblock $d 2>/dev/null; wipefs -aq $d; done;"
    f" sed -i '\\#{MOUNT}#d' /etc/fstab; sed -i '/^ARRAY/d' /etc/mdadm/mdadm.conf 2>/dev/null;"
    " rm -rf /dev/md/checkpoints /etc/nccl.conf; test $(ls /dev/nvme?n1 | wc -l) = 4"
)


def bootstrap_wheelhouse() -> Path:
    """ansible-core with its dependencies for the guests' Python (3.11), downloaded once from
    the package index into rackform's cache: what a node's (and the image builder's) bootstrap
    installs, from one --find-links."""
    from rackform.boot.artifact import node_requirements
    from rackform.paths import cache_dir

    cache = cache_dir() / "wheelhouse-bootstrap-cp311"
    want = node_requirements(aws=False)
    stamp = cache / "done"
    if not stamp.exists() or stamp.read_text() != "\n".join(want):
        cache.mkdir(parents=True, exist_ok=True)
        proc = subprocess.run(
            [sys.executable, "-m", "pip", "download", "-q", "--only-binary", ":all:",
             "--python-version", "3.11", "--platform", "manylinux_2_28_x86_64",
             "--platform", "manylinux_2_17_x86_64", "--platform", "manylinux2014_x86_64",
             "-d", cache, *want],
            capture_output=True, text=True, timeout=900,
        )  # fmt: skip
        assert proc.returncode == 0, proc.stderr
        stamp.write_text("\n".join(want))
    return cache


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
