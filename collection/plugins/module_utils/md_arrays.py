# SPDX-License-Identifier: Apache-2.0
"""The md arrays of a host for nvme_raid_probe: the active ones (mdadm --detail and sysfs), what
is wrong with one (failed or missing members) and what to do about it, and how many of an
array's drives carry data (by the RAID table)."""

from __future__ import annotations

import os

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.rackform.gpu.plugins.module_utils import sysfs


def active(module: AnsibleModule) -> list[dict]:
    """Every running md array: device, name, UUID, level, members, state and which members
    failed or are missing."""
    out = []
    for dev in sorted(os.listdir("/sys/block")):
        if not dev.startswith("md") or sysfs.read(f"/sys/block/{dev}/md/array_state") in (
            "",
            "inactive",
            "clear",
        ):
            continue
        rc, stdout, _err = module.run_command(["mdadm", "--detail", "--export", "/dev/" + dev])
        if rc != 0:
            continue
        info = dict(line.split("=", 1) for line in stdout.splitlines() if "=" in line)
        out.append(
            {
                "device": "/dev/" + dev,
                "name": info.get("MD_NAME", ""),
                "uuid": info.get("MD_UUID", ""),
                "level": info.get("MD_LEVEL", ""),
                "members": sorted("/dev/" + m for m in os.listdir(f"/sys/block/{dev}/slaves")),
                "state": sysfs.read(f"/sys/block/{dev}/md/array_state"),
                # md(4): each member's dev-*/state lists "faulty" once it failed; `degraded`
                # counts the members a redundant array is missing.
                "faulty": _faulty(f"/sys/block/{dev}/md"),
                "missing": int(sysfs.read(f"/sys/block/{dev}/md/degraded") or 0),
            }
        )
    return out


def _faulty(md_dir: str) -> list[str]:
    out = []
    for entry in sorted(os.listdir(md_dir)) if os.path.isdir(md_dir) else []:
        if entry.startswith("dev-") and "faulty" in sysfs.read(f"{md_dir}/{entry}/state").split(
            ","
        ):
            out.append("/dev/" + entry.removeprefix("dev-"))
    return out


def health_problems(array: dict) -> list[str]:
    """What is wrong with an existing array, by array and member, and what to do. A RAID0
    array with a member gone is `broken` (its data is lost: every stripe had a piece on it); a
    redundant one missing members is degraded (it still serves, with no margin)."""
    state, faulty = array.get("state", ""), array.get("faulty", [])
    missing = int(array.get("missing", 0) or 0)
    if state != "broken" and not faulty and not missing:
        return []
    where = f"md array {array['device']} ({array['name']}, {array['level']})"
    parts = [f"state {state}"]
    if faulty:
        parts.append(f"failed member(s) {', '.join(faulty)}")
    if missing:
        parts.append(f"{missing} member(s) missing")
    gone = ", ".join(parts)
    if array["level"] == "raid0" or state == "broken":
        what = (
            "its data is lost (RAID0 keeps no copy); replace the drive, unmount the checkpoint "
            "filesystem, stop the array (mdadm --stop), wipe its members (wipefs -a) and run "
            "configure again to build a new array"
        )
    else:
        what = "add a replacement drive (mdadm --add) and let it rebuild"
    return [f"{where} is not healthy ({gone}): {what}"]


def data_disks(levels: dict, level: int, n: int) -> int:
    """Drives holding data in one full stripe (XFS sw, ext4 stripe-width), by the RAID table:
    1 when every drive mirrors (RAID 1), else n // mirrors - parity."""
    row = levels[str(level)]
    if n < int(row["min_devices"]):
        return 0
    if row["mirrors"] == "all":
        return 1
    return max(n // int(row["mirrors"]) - int(row["parity"]), 0)
