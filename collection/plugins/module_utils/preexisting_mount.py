# SPDX-License-Identifier: Apache-2.0
"""A filesystem an image mounts on the instance-store drives itself (the AWS Deep Learning AMI's
/opt/dlami/nvme), for nvme_raid_probe: finding it in the mount table with the block stack under
it and the systemd units that make it, judging whether nvme_raid may adopt it (or must leave it
alone), and the command that frees its drives when it is replaced."""

from __future__ import annotations

import os
import re

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.rackform.gpu.plugins.module_utils import block_stack, nvme_drives, sysfs

# The AWS Deep Learning AMI (DLAMI) makes a filesystem on the instance-store drives itself, and
# the role must adopt it or replace it, never collide with it. What this relies on:
# - Every DLAMI "Base OSS Nvidia Driver GPU AMI" release note lists nvme_location
#   /opt/dlami/nvme (e.g. https://docs.aws.amazon.com/dlami/latest/devguide/ release notes,
#   mirrored at https://docs.amazonaws.cn/dlami/latest/devguide/aws-deep-learning-ami-gpubaseossarm64-ul2204-2026-10-08.html).
# - It is made at every boot by /opt/aws/dlami/bin/nvme_ephemeral_drives.sh, run by the systemd
#   oneshot dlami-nvme.service (WantedBy=multi-user.target, After=network-online.target), not
#   by fstab. The script is AWS ParallelCluster's setup-ephemeral-drives.sh
#   (https://github.com/aws/aws-parallelcluster-cookbook/blob/release-3.6/cookbooks/aws-parallelcluster-install/files/default/base/setup-ephemeral-drives.sh):
#   every "Amazon EC2 NVMe Instance Storage" drive becomes an LVM PV of VG vg.01, one LV
#   lv_ephemeral striped over all of them (lvcreate -i <drives> -I 64), ext4, mounted
#   noatime,nodiratime at /opt/dlami/nvme, mode 1777. After a stop/start the drives are blank
#   and the script builds it again; after a reboot it activates and mounts the same LV.
# - Public scripts that take the drives back do what `replace` does: systemctl stop and
#   disable dlami-nvme, umount /opt/dlami/nvme, deactivate the LV
#   (e.g. https://github.com/verdimrc/pyutil, "Undo lvm in newer DLAMI").
# No md RAID is involved on the DLAMI; an md RAID0 under a preexisting mount (other images) is
# judged the same way.


def find(module: AnsibleModule, mount: str, units: list[str]) -> dict | None:
    """The filesystem mounted at `mount` with what it is built on and those of `units` the host
    has; None when `mount` is empty or nothing is mounted there (then it changes nothing)."""
    if not mount:
        return None
    mounted = find_mount(parse_mountinfo(sysfs.read("/proc/self/mountinfo")), mount)
    if not mounted:
        return None
    stack = block_stack.block_stack(
        mounted["majmin"], dm_table=lambda n: block_stack.read_dm_table(module, n)
    )
    return {**mounted, **stack, "units": present_units(units)}


def parse_mountinfo(text: str) -> list[dict]:
    """/proc/self/mountinfo as records: device numbers, root inside the filesystem, mount
    point, filesystem type and source (proc(5))."""
    out = []
    for line in text.splitlines():
        left, sep, right = line.partition(" - ")
        fields, tail = left.split(), right.split()
        if not sep or len(fields) < 5 or len(tail) < 2:
            continue
        out.append(
            {
                "majmin": fields[2],
                "root": _unescape(fields[3]),
                "mount": _unescape(fields[4]),
                "fstype": tail[0],
                "source": _unescape(tail[1]),
            }
        )
    return out


def _unescape(text: str) -> str:
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), text)


def find_mount(mounts: list[dict], path: str) -> dict:
    """The filesystem mounted at `path` (the last one mounted there, the one seen), or {}."""
    want = path.rstrip("/") or "/"
    hits = [m for m in mounts if m["mount"] == want]
    return hits[-1] if hits else {}


def present_units(names: list[str], root: str = "/") -> list[str]:
    """The systemd units of `names` that have a unit file on the host."""
    dirs = (
        "etc/systemd/system",
        "run/systemd/system",
        "lib/systemd/system",
        "usr/lib/systemd/system",
    )
    return [n for n in names if any(os.path.exists(os.path.join(root, d, n)) for d in dirs)]


def judge(
    stack: dict, drives: list[dict], *, wanted: list[str], level: int
) -> tuple[list[dict], list[str], bool]:
    """Whether the preexisting filesystem is one to adopt: on instance-store NVMe drives only,
    on all of them (or on exactly the listed ones), striped over every one. Returns its drives,
    the reasons it is not (empty: adopt it) and whether a reason forbids erasing it too (EBS,
    not NVMe, drives shared with something else)."""
    by_name = {d["name"]: d for d in drives}
    members = [by_name[m] for m in stack.get("members", []) if m in by_name]
    reasons, hard = [], False
    foreign = [m for m in stack.get("members", []) if m not in by_name]
    if foreign or not stack.get("members"):
        hard = True
        seen = ", ".join("/dev/" + m for m in foreign) or stack.get("source") or "no drive found"
        reasons.append(f"it is on {seen}, not on NVMe drives")
    ebs = [d for d in members if d["model"] in nvme_drives.NOT_INSTANCE_STORE]
    if ebs:
        hard = True
        reasons.append(
            f"it is on {', '.join(nvme_drives.label(d) for d in ebs)}, an Amazon Elastic Block Store volume "
            "(network storage), not the instance-store NVMe drives"
        )
    shared = [d for d in members if not _held_only_by(d, stack)]
    if shared:
        hard = True
        reasons.append(
            "its drives are also used by something else: "
            + ", ".join(f"{nvme_drives.label(d)} ({d['in_use']})" for d in shared)
        )
    if hard:
        return members, reasons, hard
    # Unlisted, it must cover every instance-store drive that is free or that only it holds.
    required, missing = nvme_drives.select(
        wanted, drives, lambda d: not d["in_use"] or _held_only_by(d, stack)
    )
    reasons += missing
    left_out = [d for d in required if d not in members]
    if left_out:
        reasons.append(
            f"it leaves {', '.join(nvme_drives.label(d) for d in left_out)} out, so it does not stripe over "
            "all the instance-store drives"
        )
    extra = [d for d in members if d not in required]
    if wanted and extra:
        reasons.append(
            f"it also uses {', '.join(nvme_drives.label(d) for d in extra)}, which nvme_raid_devices does not list"
        )
    n = len(members)
    kind, layout = stack.get("kind"), stack.get("layout", "")
    if kind == "md":
        if layout != f"raid{level}":
            reasons.append(f"it is md {layout}, not raid{level} (nvme_raid_level)")
    else:
        striped = n == 1 or (layout == "striped" and stack.get("stripes") == n)
        if kind in ("disk", "partition"):
            striped = n == 1
        if not striped:
            reasons.append(
                f"it is not striped over its {n} drives ({layout}"
                f"{', ' + str(stack.get('stripes')) + ' stripe(s)' if layout == 'striped' else ''}), "
                "so one stream gets a fraction of their throughput"
            )
        if level != 0:
            reasons.append(f"it is striped (RAID 0), not RAID {level} (nvme_raid_level)")
    return members, reasons, False


def _held_only_by(drive: dict, stack: dict) -> bool:
    dev = "/dev/" + stack.get("device", "")
    alone = ("", f"held by {dev}", f"mounted or swap: {dev}")
    return set(drive["holders"]) <= {stack.get("device")} and drive["in_use"] in alone


def release_argv(stack: dict) -> list[str]:
    """The command that frees the drives under an unmounted preexisting filesystem: deactivate
    its volume group (LVM), stop its md array, or remove its device-mapper device. A filesystem
    right on a drive needs nothing more than the unmount."""
    kind = stack.get("kind")
    if kind == "lvm":
        return ["vgchange", "--activate", "n", stack["vg"]]
    if kind == "md":
        return ["mdadm", "--stop", "/dev/" + stack["device"]]
    if kind == "dm":
        return ["dmsetup", "remove", stack["dm_name"]]
    return []
