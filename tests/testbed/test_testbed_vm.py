"""The QEMU command line of a testbed VM and the pid-file handling that stops it."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

from rackform.testbed import vm
from rackform.testbed.image import BaseImage

IMAGE = BaseImage(Path("/c/rootfs.raw"), Path("/c/vmlinuz"), Path("/c/initrd.img"), None)
KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIKeyBytes rackform-testbed"


def spec(index: int = 1) -> vm.VmSpec:
    return vm.VmSpec(
        f"node{index}", index, 40000 + index, "230.0.0.1:41234", f"10.77.0.{10 + index}/24"
    )


def joined(args: list[str]) -> str:
    return " ".join(args)


def test_ssh_and_the_private_network_stay_on_loopback():
    args = joined(vm.argv(spec(), IMAGE, Path("/s/node1"), "tcg", KEY))
    assert "hostfwd=tcp:127.0.0.1:40001-:22" in args
    # Without localaddr the multicast traffic would leave the machine.
    assert "socket,id=priv,mcast=230.0.0.1:41234,localaddr=127.0.0.1" in args


def test_four_nvme_drives_each_with_its_own_serial():
    a = vm.argv(spec(1), IMAGE, Path("/s/node1"), "tcg", KEY)
    b = vm.argv(spec(2), IMAGE, Path("/s/node2"), "tcg", KEY)
    serials = [x.split("serial=")[1].split(",")[0] for x in a + b if x.startswith("nvme,serial=")]
    assert len(serials) == 8 == len(set(serials))
    assert all(len(s) <= 20 for s in serials)  # the NVMe serial field's size
    # qcow2, so a state of the drives can be frozen as a layer (vm.freeze_disks).
    assert "file=/s/node1/nvme3.qcow2,if=none,id=nvm3,format=qcow2,cache=unsafe" in a


def test_per_vm_identity_comes_from_the_kernel_command_line():
    args = vm.argv(spec(2), IMAGE, Path("/s/node2"), "tcg", KEY)
    cmdline = args[args.index("-append") + 1]
    assert "systemd.hostname=node2" in cmdline
    assert "rackform.priv=10.77.0.12/24" in cmdline
    assert "rackform.sshkey=ssh-ed25519:AAAAC3NzaC1lZDI1NTE5AAAAIKeyBytes" in cmdline
    assert args[args.index("-kernel") + 1] == "/c/vmlinuz"
    assert "file=/s/node2/root.qcow2,if=virtio,format=qcow2,cache=unsafe" in args


def test_accelerator_flags():
    tcg = joined(vm.argv(spec(), IMAGE, Path("/s"), "tcg", KEY))
    kvm = joined(vm.argv(spec(), IMAGE, Path("/s"), "kvm", KEY))
    assert "-accel tcg,thread=multi,tb-size=256 -cpu Nehalem" in tcg
    assert "-accel kvm -cpu host" in kvm


def test_nics_sit_at_the_slots_the_image_names_them_by():
    args = joined(vm.argv(spec(3), IMAGE, Path("/s"), "tcg", KEY))
    guest = Path(vm.__file__).parent / "guest"
    assert "pci-0000:00:04.0" in (guest / "10-wan0.link").read_text()
    assert "pci-0000:00:05.0" in (guest / "10-priv0.link").read_text()
    assert "netdev=wan,addr=0x4" in args and "netdev=priv,addr=0x5,mac=52:54:00:77:00:03" in args


def test_stop_ends_only_the_process_its_pid_file_names(tmp_path):
    d = tmp_path / "node1"
    d.mkdir()
    pidfile = d / "qemu.pid"
    # A stand-in process whose command line names the pid file, as QEMU's does.
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", str(pidfile)])
    try:
        pidfile.write_text(f"{proc.pid}\n")
        # Under load the child's /proc cmdline can lag its start by a moment: wait for it.
        deadline = time.monotonic() + 5
        while vm.running_pid(d) is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert vm.running_pid(d) == proc.pid
        assert vm.stop(d, grace_s=5) is True
        proc.wait(timeout=5)
        assert vm.running_pid(d) is None and vm.stop(d) is False
    finally:
        proc.kill()


def test_a_reused_pid_is_not_trusted(tmp_path):
    d = tmp_path / "node1"
    d.mkdir()
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        (d / "qemu.pid").write_text(str(other.pid))
        time.sleep(0.1)
        assert vm.running_pid(d) is None  # alive, but not a QEMU of this directory
        assert vm.stop(d) is False
        assert other.poll() is None
    finally:
        other.kill()
