"""Freezing a state of a VM's drives and restoring it, on real qcow2 files made by qemu-img (the
boot around it is the e2e's): what a VM wrote after the freeze is gone after a restore, the
frozen layer is never written, and a state never frozen is refused by name."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from rackform.testbed import lifecycle, vm
from rackform.testbed.image import BaseImage

pytestmark = pytest.mark.skipif(shutil.which("qemu-img") is None, reason="needs qemu-img")


def qemu_io(path: Path, command: str) -> str:
    """qemu-io on a drive's file, as the VM would read or write it (through its layers)."""
    done = subprocess.run(
        ["qemu-io", "-f", "qcow2", "-c", command, str(path)], capture_output=True, text=True
    )
    assert done.returncode == 0 and "error" not in done.stdout.lower(), done
    return done.stdout


def backing(path: Path) -> str | None:
    info = subprocess.run(
        ["qemu-img", "info", "--output=json", str(path)], capture_output=True, text=True, check=True
    )
    return json.loads(info.stdout).get("backing-filename")


@pytest.fixture
def disks(tmp_path) -> Path:
    raw = tmp_path / "rootfs.raw"
    raw.write_bytes(b"\0" * (1 << 20))
    d = tmp_path / "node1"
    vm.create_disks(BaseImage(raw, tmp_path / "vmlinuz", tmp_path / "initrd.img", None), d)
    return d


def test_a_restore_drops_what_was_written_after_the_freeze(disks):
    d = disks
    assert sorted(p.name for p in d.iterdir()) == sorted(f"{x}.qcow2" for x in vm.DRIVES)
    qemu_io(d / "nvme2.qcow2", "write -P 0x11 0 64k")  # the converge's work
    vm.freeze_disks(d, "converged")
    kept = vm.layer(d, "nvme2", "converged")
    assert kept.stat().st_mode & 0o222 == 0  # read-only from now on
    assert backing(d / "nvme2.qcow2") == str(kept)
    qemu_io(d / "nvme2.qcow2", "write -P 0x22 0 64k")  # a scenario damages it
    qemu_io(d / "nvme2.qcow2", "read -P 0x22 0 64k")
    vm.revert_disks(d, "converged")
    # Back to the frozen bytes: the pattern qemu-io checks with -P.
    qemu_io(d / "nvme2.qcow2", "read -P 0x11 0 64k")
    assert backing(d / "root.qcow2") == str(vm.layer(d, "root", "converged"))


def test_a_second_freeze_stacks_on_the_first_and_either_can_be_restored(disks):
    d = disks
    qemu_io(d / "nvme0.qcow2", "write -P 0x01 0 4k")
    vm.freeze_disks(d, "one")
    qemu_io(d / "nvme0.qcow2", "write -P 0x02 0 4k")
    vm.freeze_disks(d, "two")
    assert backing(vm.layer(d, "nvme0", "two")) == str(vm.layer(d, "nvme0", "one"))
    vm.revert_disks(d, "one")
    qemu_io(d / "nvme0.qcow2", "read -P 0x01 0 4k")
    vm.revert_disks(d, "two")
    qemu_io(d / "nvme0.qcow2", "read -P 0x02 0 4k")


def test_a_state_never_frozen_is_refused_by_name(disks):
    with pytest.raises(vm.VmError, match="no frozen state 'converged'"):
        vm.revert_disks(disks, "converged")
    # Nothing was changed by the refusal.
    assert backing(disks / "nvme0.qcow2") is None


def test_a_running_vm_is_never_frozen(disks, monkeypatch):
    monkeypatch.setattr(vm, "running_pid", lambda d: 4242)
    with pytest.raises(vm.VmError, match="stopped"):
        vm.freeze_disks(disks, "converged")
    with pytest.raises(vm.VmError, match="stopped"):
        vm.revert_disks(disks, "converged")


def test_a_frozen_state_name_must_be_a_plain_word(tmp_path):
    bed = lifecycle.Testbed(
        dir=str(tmp_path), accel="tcg", accel_why="", mcast="", key="", known_hosts="",
        blueprint="", nodes=(), timings={},
    )  # fmt: skip
    with pytest.raises(lifecycle.TestbedError, match="lowercase"):
        lifecycle.freeze(bed, "../x")
