# SPDX-License-Identifier: Apache-2.0
"""What a mounted filesystem is built on, for nvme_raid_probe: an LVM or device-mapper volume
(with its layout from the device-mapper table), an md array, a partition or a whole disk, and the
disks under it, read from sysfs; and that stack described in words."""

from __future__ import annotations

import os
import re

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.rackform.gpu.plugins.module_utils import sysfs


def block_stack(majmin: str, sys_root: str = "/sys", dm_table=lambda name: "") -> dict:
    """What the block device `majmin` is built on, from sysfs: an LVM / device-mapper volume
    (with its layout from `dm_table(name)`), an md array, a partition or a whole disk, and
    the disks under it."""
    link = os.path.join(sys_root, "dev", "block", majmin)
    if not os.path.exists(link):
        return {"device": "", "kind": "unknown", "members": []}
    real = os.path.realpath(link)
    name = os.path.basename(real)
    slaves = os.path.join(real, "slaves")
    under = sorted(
        dict.fromkeys(_disk_of(os.path.join(slaves, s)) for s in os.listdir(slaves))
        if os.path.isdir(slaves)
        else []
    )
    if os.path.isdir(os.path.join(real, "dm")):
        dm_name = sysfs.read(os.path.join(real, "dm", "name"))
        uuid = sysfs.read(os.path.join(real, "dm", "uuid"))
        stack = {"device": name, "dm_name": dm_name, "members": under}
        stack.update(parse_dm_table(dm_table(dm_name)))
        if uuid.startswith("LVM-"):
            vg, lv = lvm_names(dm_name)
            return {**stack, "kind": "lvm", "vg": vg, "lv": lv}
        return {**stack, "kind": "dm"}
    if os.path.isdir(os.path.join(real, "md")):
        level = sysfs.read(os.path.join(real, "md", "level"))
        return {"device": name, "kind": "md", "layout": level, "members": under}
    if os.path.exists(os.path.join(real, "partition")):
        return {
            "device": name,
            "kind": "partition",
            "layout": "partition",
            "members": [_disk_of(real)],
        }
    return {"device": name, "kind": "disk", "layout": "disk", "members": [name]}


def _disk_of(sys_block_dir: str) -> str:
    """A partition's disk (nvme1n1 for nvme1n1p1); a disk is its own."""
    real = os.path.realpath(sys_block_dir)
    if os.path.exists(os.path.join(real, "partition")):
        return os.path.basename(os.path.dirname(real))
    return os.path.basename(real)


def read_dm_table(module: AnsibleModule, name: str) -> str:
    """The device-mapper table of `name` (dmsetup table); "" when it cannot be read."""
    # Read-only: the device-mapper table says whether an LV is striped and over how many.
    rc, stdout, _err = module.run_command(["dmsetup", "table", name])
    return stdout if rc == 0 else ""


def parse_dm_table(text: str) -> dict:
    """A device-mapper table (dmsetup table) as its layout: one striped segment over N
    devices with its chunk, or linear (a concatenation), or whatever targets it has."""
    segments = [line.split() for line in text.splitlines() if len(line.split()) >= 3]
    targets = [seg[2] for seg in segments]
    if targets and all(t == "striped" for t in targets):
        stripes = min(int(seg[3]) for seg in segments)
        # dm-stripe's chunk size is in 512-byte sectors.
        return {"layout": "striped", "stripes": stripes, "chunk_kib": int(segments[0][4]) // 2}
    if targets == ["linear"]:
        return {"layout": "linear", "stripes": 1, "chunk_kib": 0}
    return {"layout": "+".join(dict.fromkeys(targets)) or "unknown", "stripes": 0, "chunk_kib": 0}


def lvm_names(dm_name: str) -> tuple[str, str]:
    """VG and LV from a device-mapper name: LVM doubles each '-' inside a name and joins the
    two with one ('vg.01-lv_ephemeral', 'my--vg-lv')."""
    parts = re.split(r"(?<!-)-(?!-)", dm_name, maxsplit=1)
    if len(parts) != 2:
        return "", ""
    return parts[0].replace("--", "-"), parts[1].replace("--", "-")


def describe_stack(stack: dict) -> str:
    """'ext4 on LVM vg.01/lv_ephemeral, striped over 8 drives'."""
    n = len(stack.get("members", []))
    fs = stack.get("fstype") or "a filesystem"
    kind = stack.get("kind")
    if kind == "lvm":
        on = f"LVM {stack['vg']}/{stack['lv']}, {stack.get('layout', '?')} over {n} drive(s)"
    elif kind == "dm":
        on = f"device-mapper {stack.get('dm_name', '?')}, {stack.get('layout', '?')} over {n} drive(s)"
    elif kind == "md":
        on = f"md /dev/{stack['device']}, {stack.get('layout', '?')} over {n} drive(s)"
    elif kind in ("disk", "partition"):
        on = f"/dev/{stack['device']}"
    else:
        on = stack.get("source") or "an unknown device"
    return f"{fs} on {on}"
