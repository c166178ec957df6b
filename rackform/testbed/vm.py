"""One testbed VM: the QEMU command line, starting it in the background, stopping it.

Each VM gets a qcow2 overlay over the shared base image, four sparse qcow2 files as emulated NVMe
drives (each with its own serial, so roles can find them by serial instead of by name order),
a user-mode NIC with SSH forwarded from a loopback port, and a NIC on a private VM-to-VM
network: a multicast socket bound to 127.0.0.1, so its traffic never leaves the machine.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from rackform.testbed.image import BaseImage

NVME_DRIVES = 4
# A VM's size where none is given: the testbed's nodes, the image builder's VM.
MEMORY_MB = 2048
CPUS = 1
NVME_SIZE = 1 << 30  # sparse: costs nothing until the guest writes
# Every drive of a VM, by the name of its file (`<drive>.qcow2`, the layer the VM writes).
# Every drive is qcow2, so that a frozen state can be kept as a read-only layer under a new
# one (`freeze`); QEMU 7.2 cannot snapshot the running machine itself (savevm refuses it:
# "State blocked by non-migratable device 'nvme'"), so a restored state is booted.
DRIVES = ("root", *(f"nvme{i}" for i in range(NVME_DRIVES)))

# Fixed PCI slots: the image names the NICs by slot (guest/10-*.link): wan0 and priv0.
_WAN_SLOT = "0x4"
_PRIV_SLOT = "0x5"


@dataclass(frozen=True)
class VmSpec:
    name: str
    index: int  # 1-based position in the testbed
    ssh_port: int
    mcast: str  # "GROUP:PORT" of the private network
    priv_address: str  # "10.77.0.11/24"
    memory_mb: int = MEMORY_MB
    cpus: int = CPUS

    @property
    def priv_mac(self) -> str:
        return f"52:54:00:77:00:{self.index:02x}"

    @property
    def nvme_serials(self) -> tuple[str, ...]:
        # NVMe serials are at most 20 characters; unique per VM and drive.
        return tuple(f"RFTB{self.index:02d}N{i}" for i in range(NVME_DRIVES))


# The CPU TCG emulates. x86-64-v2 (SSE4.2, POPCNT) is what distributions' Python wheels need
# (numpy's baseline); `max` adds AVX2, SHA-NI and the like, which TCG runs through slow helpers:
# installing torch (hashing and inflating 800 MB) took 216 s with `max` and 167 s with Nehalem,
# side by side on one machine; the first `import torch` 64 s and 55 s, a small backward pass
# after it 29 s and 36 s.
TCG_CPU = "Nehalem"


def vm_dir(state_dir: Path, name: str) -> Path:
    return state_dir / name


def argv(spec: VmSpec, image: BaseImage, d: Path, accel: str, ssh_pubkey: str) -> list[str]:
    """The QEMU command line for one VM whose files live in `d`."""
    key_type, key_b64 = ssh_pubkey.split()[:2]
    cmdline = " ".join(
        [
            "root=/dev/vda rw console=ttyS0 quiet mitigations=off",
            f"systemd.hostname={spec.name}",
            f"rackform.priv={spec.priv_address}",
            f"rackform.sshkey={key_type}:{key_b64}",
        ]
    )
    accel_args = (
        ["-accel", "kvm", "-cpu", "host"]
        if accel == "kvm"
        else ["-accel", "tcg,thread=multi,tb-size=256", "-cpu", TCG_CPU]
    )
    args = [
        "qemu-system-x86_64",
        "-name", spec.name,
        *accel_args,
        "-smp", str(spec.cpus),
        "-m", str(spec.memory_mb),
        "-kernel", str(image.kernel),
        "-initrd", str(image.initrd),
        "-append", cmdline,
        "-drive", f"file={d / 'root.qcow2'},if=virtio,format=qcow2,cache=unsafe",
        "-netdev", f"user,id=wan,hostfwd=tcp:127.0.0.1:{spec.ssh_port}-:22",
        "-device", f"virtio-net-pci,netdev=wan,addr={_WAN_SLOT},mac=52:54:00:12:34:56",
        "-netdev", f"socket,id=priv,mcast={spec.mcast},localaddr=127.0.0.1",
        "-device", f"virtio-net-pci,netdev=priv,addr={_PRIV_SLOT},mac={spec.priv_mac}",
        "-display", "none",
        "-serial", f"file:{d / 'console.log'}",
        "-pidfile", str(d / "qemu.pid"),
        "-daemonize",
    ]  # fmt: skip
    for i, serial in enumerate(spec.nvme_serials):
        args += [
            "-drive", f"file={d / f'nvme{i}.qcow2'},if=none,id=nvm{i},format=qcow2,cache=unsafe",
            "-device", f"nvme,serial={serial},drive=nvm{i}",
        ]  # fmt: skip
    return args


class VmError(RuntimeError):
    pass


def _qemu_img_create(path: Path, backing: Path | None, backing_format: str = "qcow2") -> None:
    path.unlink(missing_ok=True)
    argv = ["qemu-img", "create", "-q", "-f", "qcow2"]
    argv += (
        ["-F", backing_format, "-b", str(backing), str(path)]
        if backing
        else [str(path), str(NVME_SIZE)]
    )
    proc = subprocess.run(argv, capture_output=True, text=True, stdin=subprocess.DEVNULL)
    if proc.returncode != 0:
        raise VmError(f"qemu-img create {path.name} failed: {proc.stderr.strip()}")


def create_disks(image: BaseImage, d: Path) -> None:
    """A VM as never booted: its root an empty overlay over the base image, its NVMe drives
    empty."""
    d.mkdir(parents=True, exist_ok=True)
    _qemu_img_create(d / "root.qcow2", image.rootfs, "raw")
    for i in range(NVME_DRIVES):
        _qemu_img_create(d / f"nvme{i}.qcow2", None)


def layer(d: Path, drive: str, state: str) -> Path:
    """The read-only file holding `drive` as it was frozen under the name `state`."""
    return d / f"{drive}.{state}.qcow2"


def freeze_disks(d: Path, state: str) -> None:
    """With the VM stopped: each drive's file becomes the read-only layer `state`, and the VM
    writes to a new, empty layer over it from now on."""
    if running_pid(d) is not None:
        raise VmError(f"{d.name}: freeze needs the VM stopped")
    for drive in DRIVES:
        kept = layer(d, drive, state)
        kept.unlink(missing_ok=True)
        (d / f"{drive}.qcow2").rename(kept)
        kept.chmod(0o444)
        _qemu_img_create(d / f"{drive}.qcow2", kept)


def revert_disks(d: Path, state: str) -> None:
    """With the VM stopped: each drive back to the layer `state` (what the VM wrote since is
    dropped)."""
    if running_pid(d) is not None:
        raise VmError(f"{d.name}: restore needs the VM stopped")
    for drive in DRIVES:
        kept = layer(d, drive, state)
        if not kept.exists():
            raise VmError(f"{d.name}: no frozen state {state!r} ({kept.name} is missing)")
        _qemu_img_create(d / f"{drive}.qcow2", kept)


def start(spec: VmSpec, image: BaseImage, d: Path, accel: str, ssh_pubkey: str) -> int:
    """Start the VM in the background (QEMU daemonizes itself); return its pid."""
    # QEMU must not inherit (and flip to non-blocking) the caller's stdin.
    proc = subprocess.run(
        argv(spec, image, d, accel, ssh_pubkey),
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
    )
    if proc.returncode != 0:
        raise VmError(f"{spec.name}: QEMU did not start: {proc.stderr.strip()}")
    pid = running_pid(d)
    if pid is None:
        raise VmError(f"{spec.name}: QEMU started but left no pid file in {d}")
    return pid


def running_pid(d: Path) -> int | None:
    """The pid of this VM's QEMU if it is still running (and really is that QEMU)."""
    try:
        pid = int((d / "qemu.pid").read_text().strip())
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except (OSError, ValueError):
        return None
    # A pid can be reused after QEMU exits; only trust it if it still points at our files.
    return pid if str(d / "qemu.pid").encode() in cmdline else None


def stop(d: Path, grace_s: float = 5.0) -> bool:
    """Stop the VM (SIGTERM, then SIGKILL after the grace period). True if one was running."""
    pid = running_pid(d)
    if pid is None:
        return False
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline:
        if running_pid(d) is None:
            return True
        time.sleep(0.1)
    if running_pid(d) is not None:
        os.kill(pid, signal.SIGKILL)
        while running_pid(d) is not None:
            time.sleep(0.1)
    return True
