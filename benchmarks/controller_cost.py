"""The controller's cost per node, push against pull, on the testbed's VMs (issue 42).

    python benchmarks/controller_cost.py --image DIR [--sizes 1,2,4] [--modes push,pull]

For each size N, fresh VMs booted from the node image DIR (`rackform testbed up --image`), their
only apt source the local package repository (served here on loopback), then the controller's
side measured as a child process:

- push: `rackform configure` on the N VMs, the roles a node image holds and the node's own
  (nvidia_driver, nccl_rdma, nvme_raid, dcgm; not smoke_train, whose job runs torch on the nodes
  and so is the nodes' cost, not the controller's): Ansible's controller, a fork per node, ssh;
- pull: `rackform boot serve` while each VM runs its user data as cloud-init would (root, a
  service of its own): the node fetches its artifact, runs its own part (its array, its mounts),
  its host checks, and reports; the controller serves one file and reads one report a node.

Measured for the controller: its CPU-seconds (user and system of the child and every process
under it: ssh's ControlPersist masters, which leave their parent, are adopted here as a child
subreaper and counted when they end), its peak memory (the proportional set size of all of
them together, sampled every 0.2 s: forks share pages, a plain sum of RSS would count them once
a fork) and its wall time. The VMs' own CPU (QEMU) is not the controller's and is not counted.

DIR is a node image `rackform image build` made for the testbed's blueprint with `image: {bake:
true}` (as tests/e2e/conftest.py `node_image` builds it: `--format raw`, the apt source and the
pip and torch wheel servers given); a node whose image does not match its artifact is configured
in full and needs a package index the VMs do not have. Figures go to stdout; each run's log to
--out. Not a test: it boots VMs under emulation (minutes for each size).
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import yaml

from rackform.testbed import lifecycle
from rackform.testbed.apt import ensure_repo, sources_line
from rackform.testbed.builder import serving

ROOT = Path(__file__).resolve().parents[1]
GUEST = "10.0.2.2"  # the host's loopback, from a guest on QEMU's user network
PUSH_ROLES = ("nvidia_driver", "nccl_rdma", "nvme_raid", "dcgm")
PR_SET_CHILD_SUBREAPER = 36  # prctl(2)


@dataclass(frozen=True)
class Cost:
    mode: str
    nodes: int
    wall_s: float
    cpu_s: float
    peak_mib: float
    rc: int

    def row(self) -> str:
        return (
            f"| {self.mode} | {self.nodes} | {self.wall_s:,.0f} | {self.cpu_s:,.1f}"
            f" | {self.cpu_s / self.nodes:,.1f} | {self.peak_mib:,.0f}"
            f" | {self.peak_mib / self.nodes:,.0f} | {self.rc} |"
        )


HEADER = (
    "| mode | VMs | wall s | controller CPU s | CPU s a node | peak MiB (PSS) | MiB a node | exit |\n"
    "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"
)


def _parents() -> dict[int, int]:
    found = {}
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            with contextlib.suppress(OSError, ValueError, IndexError):
                stat = Path(entry.path, "stat").read_text()
                found[int(entry.name)] = int(stat.rsplit(")", 1)[1].split()[1])
    return found


def _pss_kib(pid: int) -> int:
    with contextlib.suppress(OSError, ValueError):
        for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
            if line.startswith("Pss:"):
                return int(line.split()[1])
    return 0


def _tree(root: int, parents: dict[int, int], adopted: bool) -> set[int]:
    """`root` and every process under it, and (`adopted`) this process's other children: the
    orphans of the tree it took in as a subreaper."""
    me = os.getpid()
    children: dict[int, list[int]] = {}
    for pid, ppid in parents.items():
        children.setdefault(ppid, []).append(pid)
    todo = [root] + ([p for p in children.get(me, []) if p != root] if adopted else [])
    seen: set[int] = set()
    while todo:
        pid = todo.pop()
        if pid not in seen:
            seen.add(pid)
            todo += children.get(pid, [])
    return seen


def measured(mode: str, nodes: int, argv: list[str], log: Path, adopted: bool) -> Cost:
    """Run `argv` and measure it with all under it (see the module's docstring)."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(PR_SET_CHILD_SUBREAPER, int(adopted), 0, 0, 0)
    peak = [0]
    start = time.monotonic()
    with log.open("w") as out:
        proc = subprocess.Popen(
            argv, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL
        )
    done = threading.Event()

    def sample() -> None:
        while not done.wait(0.2):
            tree = _tree(proc.pid, _parents(), adopted)
            peak[0] = max(peak[0], sum(_pss_kib(p) for p in tree))

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    wall = time.monotonic() - start
    done.set()
    sampler.join()
    cpu = usage.ru_utime + usage.ru_stime
    if adopted:  # what the tree left running (ssh's masters): ended now, counted
        for pid in _tree(proc.pid, _parents(), True) - {proc.pid}:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)
            with contextlib.suppress(ChildProcessError):
                _, _, left = os.wait4(pid, 0)
                cpu += left.ru_utime + left.ru_stime
        libc.prctl(PR_SET_CHILD_SUBREAPER, 0, 0, 0, 0)
    return Cost(mode, nodes, wall, cpu, peak[0] / 1024, proc.returncode)


def rackform(*args) -> list[str]:
    return [sys.executable, "-m", "rackform", *map(str, args)]


@contextlib.contextmanager
def testbed(work: Path, nodes: int, image: Path, apt_port: int) -> Iterator[lifecycle.Testbed]:
    """`nodes` fresh VMs from `image`, the local repository their only apt source."""
    state = work / "testbed"
    up = subprocess.run(
        rackform("testbed", "up", "--nodes", nodes, "--dir", state, "--image", image),
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    try:
        if up.returncode != 0:
            raise SystemExit(f"testbed up failed:\n{up.stdout[-3000:]}{up.stderr[-3000:]}")
        bed = lifecycle.Testbed.load(state)
        line = sources_line(apt_port).strip()
        for node in bed.nodes:  # package lists read as never updated: apt reads the new source
            bed.ssh(node.name).run(
                f"rm -f /etc/apt/sources.list.d/*; echo '{line}' > /etc/apt/sources.list;"
                " find /var/lib/apt/lists -maxdepth 1 -type f -delete;"
                " rm -f /var/lib/apt/periodic/update-success-stamp; touch -d @0 /var/lib/apt/lists"
            )
        yield bed
    finally:
        subprocess.run(rackform("testbed", "down", "--dir", state), cwd=ROOT, capture_output=True)


def baked_blueprint(bed: lifecycle.Testbed, work: Path) -> Path:
    doc = yaml.safe_load(Path(bed.blueprint).read_text())
    doc["image"] = {"bake": True}
    path = work / "blueprint.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def push(bed: lifecycle.Testbed, work: Path) -> Cost:
    bp = baked_blueprint(bed, work)
    roles = [a for r in PUSH_ROLES for a in ("--role", r)]
    argv = rackform(
        "configure", bp, "--private-key", bed.key, "--known-hosts", bed.known_hosts,
        "--report-dir", work / "reports", *roles,
    )  # fmt: skip
    return measured("push", len(bed.nodes), argv, work / "controller.log", adopted=True)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def pull(bed: lifecycle.Testbed, work: Path, deadline_min: float) -> Cost:
    bp, out, port = baked_blueprint(bed, work), work / "round", _free_port()
    argv = rackform(
        "boot", "serve", bp, "--bind", "127.0.0.1", "--port", port,
        "--url", f"http://{GUEST}:{port}", "--out", out, "--deadline", deadline_min,
    )  # fmt: skip

    def boot_nodes() -> None:
        """Each VM runs its user data once the round has written it (the server listens by
        then), as cloud-init's scripts-user module runs it."""
        wanted = [out / "user-data" / n.name for n in bed.nodes]
        log = work / "controller.log"
        while "waiting up to " not in (log.read_text() if log.exists() else ""):
            time.sleep(0.5)
        for node, path in zip(bed.nodes, wanted, strict=True):
            ssh = bed.ssh(node.name)
            ssh.run(
                "mkdir -p /var/lib/cloud/instance && cat > /var/lib/cloud/instance/user-data.txt"
                " && chmod 700 /var/lib/cloud/instance/user-data.txt",
                input=path.read_text(),
            )
            ssh.run(
                "systemd-run --unit=rackform-user-data --collect --working-directory=/ "
                "--setenv=PATH=/usr/sbin:/usr/bin:/sbin:/bin /bin/sh -c "
                "'/var/lib/cloud/instance/user-data.txt > /var/log/cloud-init-output.log 2>&1'"
            )

    failed: list[BaseException] = []

    def booting() -> None:
        try:
            boot_nodes()
        except Exception as exc:  # the server then names the nodes that never reported
            failed.append(exc)

    # The nodes are started from a thread of this process; the measured child is the server.
    threading.Thread(target=booting, daemon=True).start()
    cost = measured("pull", len(bed.nodes), argv, work / "controller.log", adopted=False)
    for exc in failed:
        print(f"starting the nodes' user data failed: {exc}", file=sys.stderr)
    return cost


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--image", type=Path, required=True, help="the node image's directory")
    parser.add_argument("--sizes", default="1,2,4", help="VMs per run (default 1,2,4)")
    parser.add_argument("--modes", default="push,pull")
    parser.add_argument("--deadline", type=float, default=40, help="pull: minutes to wait")
    parser.add_argument("--out", type=Path, default=Path("controller-cost"))
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    modes = [m for m in args.modes.split(",") if m]
    if set(modes) - {"push", "pull"} or not sizes or min(sizes) < 1:
        parser.error("--modes: push, pull; --sizes: positive numbers")
    image = args.image.resolve()
    costs = []
    with serving(ensure_repo(log=lambda line: None)) as apt_port:
        for n in sizes:
            for mode in modes:
                work = (args.out / f"{mode}-{n}").resolve()
                work.mkdir(parents=True, exist_ok=True)
                with testbed(work, n, image, apt_port) as bed:
                    cost = push(bed, work) if mode == "push" else pull(bed, work, args.deadline)
                costs.append(cost)
                print(cost.row(), flush=True)
    print(HEADER)
    for cost in costs:
        print(cost.row())
    return 0 if all(c.rc == 0 for c in costs) else 1


if __name__ == "__main__":
    sys.exit(main())
