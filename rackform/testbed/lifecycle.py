"""`testbed up` / `testbed down`: N VMs, their state file, and a bare-metal blueprint for them.

State lives in one directory (default `.testbed/` under the current directory): per-VM overlays
and NVMe files, the testbed's SSH key and known_hosts, `testbed.json` and `blueprint.yaml`.
Every testbed picks its own free SSH ports and multicast port, so several can run at once.

`freeze` keeps the VMs' drives as they are under a name, and `restore` brings them back to it,
each with a boot (about a minute under TCG for VMs that boot together): a state reached once
(the roles' converge) serves every later scenario, and a scenario that damaged its VMs leaves
nothing behind for the next.
"""

from __future__ import annotations

import fcntl
import json
import re
import socket
import subprocess
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path

import yaml

from rackform.testbed import vm
from rackform.testbed.accel import choose_accel
from rackform.testbed.image import BaseImage, cache_dir, ensure_image
from rackform.testbed.ssh import Ssh, SshError, wait_all

STATE = "testbed.json"
BLUEPRINT = "blueprint.yaml"
PRIVATE_CIDR = "10.77.0.0/24"
PRIV_INTERFACE = "priv0"
BOOT_TIMEOUT_S = 600.0


class TestbedError(RuntimeError):
    """A testbed could not be brought up or down; the message says why."""


@dataclass(frozen=True)
class Node:
    name: str
    ssh_port: int
    priv_address: str  # without the prefix length
    nvme_serials: tuple[str, ...]
    dir: str


@dataclass(frozen=True)
class Testbed:
    dir: str
    accel: str
    accel_why: str
    mcast: str
    key: str
    known_hosts: str
    blueprint: str
    nodes: tuple[Node, ...]
    timings: dict[str, float]
    # What a restart needs: the image's directory (kernel, initrd, root), the VMs' size.
    image: str = ""
    memory_mb: int = vm.MEMORY_MB
    cpus: int = vm.CPUS

    def ssh(self, name: str) -> Ssh:
        node = next(n for n in self.nodes if n.name == name)
        return Ssh(node.ssh_port, Path(self.key), Path(self.known_hosts))

    @classmethod
    def load(cls, state_dir: Path) -> Testbed:
        try:
            raw = json.loads((state_dir / STATE).read_text())
        except FileNotFoundError:
            raise TestbedError(f"no testbed in {state_dir} (run `rackform testbed up`)") from None
        # A testbed brought up before every VM booted the one image also named each VM's.
        raw["nodes"] = tuple(
            Node(**{**n, "nvme_serials": tuple(n["nvme_serials"])})
            for n in ({k: v for k, v in n.items() if k != "image"} for n in raw["nodes"])
        )
        return cls(**raw)


def _free_port(kind: int) -> int:
    with socket.socket(socket.AF_INET, kind) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def _locked(state_dir: Path) -> Iterator[None]:
    state_dir.mkdir(parents=True, exist_ok=True)
    with open(state_dir / ".lock", "w") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise TestbedError(
                f"another rackform is working on the testbed in {state_dir}"
            ) from None
        yield


def is_up(state_dir: Path) -> bool:
    return any(vm.running_pid(d) for d in _vm_dirs(state_dir))


def _vm_dirs(state_dir: Path) -> list[Path]:
    return sorted(p.parent for p in state_dir.glob("*/qemu.pid"))


def up(
    state_dir: Path,
    nodes: int,
    *,
    memory_mb: int = vm.MEMORY_MB,
    cpus: int = vm.CPUS,
    image: Path | None = None,
    log: Callable[[str], None] = print,
) -> Testbed:
    """Boot `nodes` VMs and wait for SSH. On any failure every VM started is stopped again.
    Every VM boots from the base image (`image.ensure_image`), or with `image` from this image
    directory (a node image `rackform image build` made for bare metal,
    `builder`'s output: rootfs.raw, vmlinuz, initrd.img)."""
    if not 1 <= nodes <= 16:
        raise TestbedError(f"--nodes must be between 1 and 16, not {nodes}")
    state_dir = state_dir.resolve()
    with _locked(state_dir):
        if is_up(state_dir):
            raise TestbedError(
                f"a testbed is already up in {state_dir}; `rackform testbed down` first"
            )
        foreign = _foreign(state_dir)
        if foreign:
            raise TestbedError(
                f"{state_dir} holds files a testbed did not make ({', '.join(foreign[:5])}); "
                "give --dir an empty or testbed directory"
            )
        timings: dict[str, float] = {}
        t0 = time.monotonic()
        if image is not None:
            img = _given(image)
        else:
            img = ensure_image(log)
            how = f"built in {img.built_s:.0f} s" if img.built_s else "from cache"
            log(f"testbed: image {how} ({img.rootfs.parent})")
        timings["image_s"] = round(time.monotonic() - t0, 1)
        accel, why = choose_accel(img.kernel, cache_dir())
        log(f"testbed: accelerator {accel}: {why}")
        _clean(state_dir)
        key = state_dir / "id_ed25519"
        subprocess.run(
            [
                "ssh-keygen",
                "-q",
                "-t",
                "ed25519",
                "-N",
                "",
                "-C",
                "rackform-testbed",
                "-f",
                str(key),
            ],
            check=True,
            stdin=subprocess.DEVNULL,
        )
        pubkey = (state_dir / "id_ed25519.pub").read_text().strip()
        known_hosts = state_dir / "known_hosts"
        mcast = f"230.0.0.1:{_free_port(socket.SOCK_DGRAM)}"
        specs = [
            vm.VmSpec(
                name=f"node{i}",
                index=i,
                ssh_port=_free_port(socket.SOCK_STREAM),
                mcast=mcast,
                priv_address=f"10.77.0.{10 + i}/24",
                memory_mb=memory_mb,
                cpus=cpus,
            )
            for i in range(1, nodes + 1)
        ]
        t1 = time.monotonic()
        try:
            for spec in specs:
                d = vm.vm_dir(state_dir, spec.name)
                vm.create_disks(img, d)
                vm.start(spec, img, d, accel, pubkey)
            conns = {s.name: Ssh(s.ssh_port, key, known_hosts) for s in specs}
            alive = {s.name: vm.vm_dir(state_dir, s.name) for s in specs}
            ready = wait_all(conns, BOOT_TIMEOUT_S, alive=lambda n: vm.running_pid(alive[n]))
        except BaseException:
            _stop_all(state_dir)
            raise
        timings["boot_s"] = round(time.monotonic() - t1, 1)
        for name, s in sorted(ready.items()):
            log(f"testbed: {name} answers SSH after {s:.0f} s")
        bed = Testbed(
            dir=str(state_dir),
            accel=accel,
            accel_why=why,
            mcast=mcast,
            key=str(key),
            known_hosts=str(known_hosts),
            blueprint=str(state_dir / BLUEPRINT),
            nodes=tuple(
                Node(
                    s.name,
                    s.ssh_port,
                    s.priv_address.split("/")[0],
                    s.nvme_serials,
                    str(vm.vm_dir(state_dir, s.name)),
                )
                for s in specs
            ),
            timings=timings,
            image=str(img.rootfs.parent),
            memory_mb=memory_mb,
            cpus=cpus,
        )
        (state_dir / BLUEPRINT).write_text(blueprint_yaml(bed))
        (state_dir / STATE).write_text(json.dumps(asdict(bed), indent=2) + "\n")
        return bed


def _given(d: Path) -> BaseImage:
    """The image directory `--image` names, with the files a VM boots from."""
    img = BaseImage.in_dir(Path(d).resolve())
    missing = img.missing()
    if missing:
        raise TestbedError(
            f"--image {d}: no {', '.join(missing)} there (a directory `rackform image build` "
            "wrote with the raw format, or a testbed image)"
        )
    return img


def blueprint_yaml(bed: Testbed) -> str:
    """A bare-metal blueprint for the VMs, so every other command can target them."""
    doc = {
        "name": "testbed",
        "purpose": "training",
        "owner": "testbed@localhost.localdomain",
        "description": f"Local QEMU VMs made by `rackform testbed up` in {bed.dir}.",
        "target": {"type": "bare_metal", "ssh_user": "root", "private_cidr": PRIVATE_CIDR},
        "node_groups": [
            {
                "name": "vms",
                "hosts": [
                    {
                        "name": n.name,
                        "address": "127.0.0.1",
                        "port": n.ssh_port,
                        "nvme": list(n.nvme_serials),
                    }
                    for n in bed.nodes
                ],
            }
        ],
        "network": {"fabric": "ethernet", "interfaces": [PRIV_INTERFACE]},
        "storage": {"checkpoint": {"raid_level": 0, "mount": "/mnt/checkpoints"}},
        # The fewest steps that still show the loss falling on the VMs' CPUs (gloo, 2 ranks):
        # 4.9 -> 3.4 over 10 steps (30 %) against the 20 % drop asked for; a step is ~4 s
        # under TCG.
        "validation": {"smoke_steps": 10},
    }
    head = (
        "# Written by `rackform testbed up`; the VMs are gone after `rackform testbed down`.\n"
        f"# configure: rackform configure {bed.blueprint} --private-key {bed.key}"
        f" --known-hosts {bed.known_hosts}\n"
    )
    return head + yaml.safe_dump(doc, sort_keys=False, width=100)


def _stop_all(state_dir: Path) -> list[str]:
    return [d.name for d in _vm_dirs(state_dir) if vm.stop(d)]


# Everything a testbed writes into its directory; nothing else there is ever deleted.
_OWN_FILES = {STATE, BLUEPRINT, "id_ed25519", "id_ed25519.pub", "known_hosts", ".lock"}
# A VM's directory: its console and pid file, each drive's file and its frozen layers.
_VM_FILE = re.compile(
    r"console\.log|qemu\.pid|(?:" + "|".join(vm.DRIVES) + r")(?:\.[\w-]+)?\.qcow2"
)


def _is_vm_dir(p: Path) -> bool:
    return (
        p.is_dir() and not p.is_symlink() and all(_VM_FILE.fullmatch(c.name) for c in p.iterdir())
    )


def _foreign(state_dir: Path) -> list[str]:
    """Entries in the directory that a testbed did not make."""
    out = []
    for p in state_dir.iterdir():
        if p.name in _OWN_FILES:
            continue
        if _is_vm_dir(p):
            continue
        out.append(p.name)
    return sorted(out)


def _clean(state_dir: Path) -> None:
    """Delete the testbed's own files (never anything else) from its directory."""
    for p in state_dir.iterdir():
        if p.name in _OWN_FILES - {".lock"}:
            p.unlink()
        elif _is_vm_dir(p):
            for f in p.iterdir():
                f.unlink()
            p.rmdir()


def down(state_dir: Path) -> list[str]:
    """Stop every VM of the testbed in `state_dir` and delete its files; return the names of
    the VMs that were running. The cached base image stays, and so does anything in the
    directory that the testbed did not write."""
    state_dir = state_dir.resolve()
    if not state_dir.exists():
        return []
    with _locked(state_dir):
        stopped = _stop_all(state_dir)
        _clean(state_dir)
    (state_dir / ".lock").unlink(missing_ok=True)
    if not any(state_dir.iterdir()):
        state_dir.rmdir()
    return stopped


def reboot_and_wait(
    bed: Testbed,
    names: list[str],
    timeout_s: float = BOOT_TIMEOUT_S,
    hard: bool = False,
    power_cut: bool = False,
) -> float:
    """Reboot VMs from inside (QEMU restarts the guest with the same kernel command line) and
    wait until each answers SSH with a new boot id; return the seconds it took. `hard` syncs
    and resets at once, like a power cycle, instead of shutting down cleanly (which takes tens
    of seconds under TCG and proves nothing more about what comes back at boot); `power_cut`
    resets without syncing."""
    start = time.monotonic()
    boot_id = "cat /proc/sys/kernel/random/boot_id"
    before = {n: bed.ssh(n).run(boot_id).stdout.strip() for n in names}
    for name in names:
        # systemd-run detaches the reboot from the SSH session, which the reboot would cut. A
        # timer's default accuracy is a minute: without AccuracySec the reboot comes up to 60 s
        # late, while the old boot keeps answering.
        # power_cut: reset with nothing synced, as when the power goes (what the guest had not
        # written yet is lost).
        how = (
            "sh -c 'echo b > /proc/sysrq-trigger'"
            if power_cut
            else "sh -c 'sync; echo b > /proc/sysrq-trigger'"
            if hard
            else "systemctl reboot"
        )
        bed.ssh(name).run(
            "systemd-run --on-active=1 --timer-property=AccuracySec=100ms"
            f" --unit=rackform-reboot {how}"
        )

    def rebooted(name: str, ssh: Ssh) -> bool:
        try:
            proc = ssh.run(boot_id, check=False, timeout=20)
        except subprocess.TimeoutExpired:
            return False
        return proc.returncode == 0 and proc.stdout.strip() not in ("", before[name])

    try:
        wait_all(
            {n: bed.ssh(n) for n in names},
            timeout_s,
            ready=rebooted,
            waiting_for="not back with a new boot id",
        )
    except SshError as exc:
        raise TestbedError(f"after the reboot: {exc}") from None
    return time.monotonic() - start


def _spec(bed: Testbed, index: int, node: Node) -> vm.VmSpec:
    return vm.VmSpec(
        name=node.name,
        index=index,
        ssh_port=node.ssh_port,
        mcast=bed.mcast,
        priv_address=f"{node.priv_address}/24",
        memory_mb=bed.memory_mb,
        cpus=bed.cpus,
    )


def _restart(bed: Testbed, names: list[str], between: Callable[[Path], None]) -> float:
    """Stop the VMs (QEMU flushes its drives when it exits on SIGTERM), run `between` on each
    one's directory, start them again and wait for SSH; the seconds it took."""
    start = time.monotonic()
    chosen = [(i, n) for i, n in enumerate(bed.nodes, 1) if n.name in names]
    if {n.name for _, n in chosen} != set(names):
        raise TestbedError(
            f"no such VM in the testbed: {sorted(set(names) - {n.name for _, n in chosen})}"
        )
    pubkey = Path(f"{bed.key}.pub").read_text().strip()
    image = BaseImage.in_dir(Path(bed.image))
    with _locked(Path(bed.dir)):
        for _, node in chosen:
            vm.stop(Path(node.dir), grace_s=60.0)
            between(Path(node.dir))
        try:
            for i, node in chosen:
                vm.start(_spec(bed, i, node), image, Path(node.dir), bed.accel, pubkey)
            alive = {n.name: Path(n.dir) for _, n in chosen}
            wait_all(
                {n: bed.ssh(n) for n in names},
                BOOT_TIMEOUT_S,
                alive=lambda n: vm.running_pid(alive[n]),
            )
        except SshError as exc:
            raise TestbedError(f"after the restart: {exc}") from None
    return time.monotonic() - start


def freeze(bed: Testbed, state: str, names: list[str] | None = None) -> float:
    """Keep the VMs' drives as they are now under the name `state` (after a `sync` in each
    guest), then boot them again from it, as after a power cycle: what a later `restore` gives.
    The seconds it took."""
    if not re.fullmatch(r"[a-z0-9][a-z0-9-]*", state):
        raise TestbedError(f"a frozen state's name is lowercase letters, digits and '-': {state!r}")
    names = names or [n.name for n in bed.nodes]
    for name in names:
        bed.ssh(name).run("sync")
    return _restart(bed, names, lambda d: vm.freeze_disks(d, state))


def restore(bed: Testbed, state: str, names: list[str] | None = None) -> float:
    """Bring the VMs back to the drives frozen as `state` and boot them; the seconds it took.
    Whatever they wrote since is gone: a scenario that damaged them leaves nothing behind."""
    names = names or [n.name for n in bed.nodes]
    return _restart(bed, names, lambda d: vm.revert_disks(d, state))
