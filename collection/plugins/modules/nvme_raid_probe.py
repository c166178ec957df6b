#!/usr/bin/python
# SPDX-License-Identifier: Apache-2.0
# Imports follow DOCUMENTATION, EXAMPLES and RETURN, as Ansible's module format (validate-modules)
# requires.
# ruff: noqa: E402
"""Read-only probe for the nvme_raid role: which NVMe drives exist, what each one holds, whether
the array already exists, and what the role would have to do. It never writes to a disk; the
role's tasks act only on what this probe decided, after its problems were shown."""

from __future__ import annotations

DOCUMENTATION = r"""
module: nvme_raid_probe
short_description: Find NVMe drives and decide how to build the checkpoint array from them
description:
  - Lists every NVMe namespace with its serial, model, size, C(/dev/disk/by-id) name, the
    signatures on it (filesystem, partition table, md superblock) and whether it is in use.
  - Selects drives by serial or by-id name, or every unused NVMe drive when none are listed
    (never by kernel name order), and finds an existing md array of the given name.
  - Returns the action (V(none), V(create), V(assemble), V(adopt)), the drives to wipe (only
    with O(allow_wipe)) and the problems that must stop the nvme_raid role. Changes nothing.
options:
  devices:
    description: Drives by serial, by-id name or C(/dev/disk/by-id) path; empty selects every unused NVMe drive.
    type: list
    elements: str
    default: []
  name:
    description: md array name.
    type: str
    required: true
  level:
    description: RAID level.
    type: int
    choices: [0, 1, 5, 6, 10]
    required: true
  levels:
    description:
      - The md RAID table, keyed by level as a string; each entry has C(min_devices) (the fewest
        drives the level accepts), C(mirrors) (copies of each block, or V(all) for RAID 1) and
        C(parity) (drives' worth of parity). The nvme_raid role passes its C(nvme_raid_levels).
    type: dict
    required: true
  allow_wipe:
    description: Drives holding signatures may be wiped (never drives that are in use).
    type: bool
    default: false
  preexisting_mount:
    description:
      - A filesystem an image mounts on the instance-store drives itself (the AWS Deep Learning
        AMI's C(/opt/dlami/nvme)); empty for none. Absent from the host, it changes nothing.
    type: str
    default: ""
  preexisting_action:
    description:
      - V(adopt) uses the preexisting filesystem (verified to stripe over every instance-store
        drive) instead of building an array; V(replace) (O(allow_wipe) only) releases its drives
        for the rackform array.
    type: str
    choices: [adopt, replace]
    default: adopt
  preexisting_units:
    description: systemd units that make the preexisting filesystem at boot; those present are returned.
    type: list
    elements: str
    default: []
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - rackform.gpu.probe
"""

EXAMPLES = r"""
- name: Probe NVMe drives
  rackform.gpu.nvme_raid_probe:
    devices: [S6XNNA0T123456, S6XNNA0T654321]
    name: checkpoints
    level: 0
    levels:
      "0": {min_devices: 2, mirrors: 1, parity: 0}
  register: nvme

- name: Stop on what the probe found wrong
  ansible.builtin.fail:
    msg: "{{ nvme.problems | join('; ') }}"
  when: nvme.problems | length > 0
"""

RETURN = r"""
drives:
  description: Every NVMe namespace seen, with its serial, model, size, by-id name, signatures and use.
  returned: always
  type: list
  elements: dict
array:
  description: The active md array of this name; empty if there is none.
  returned: always
  type: dict
action:
  description: V(none), V(create), V(assemble) or V(adopt) (the preexisting filesystem).
  returned: always
  type: str
  sample: create
members:
  description: Device paths of the array's members (existing or to be used).
  returned: always
  type: list
  elements: str
  sample: ["/dev/nvme1n1", "/dev/nvme2n1"]
wipe:
  description: Drives whose signatures must be wiped before create (O(allow_wipe) only).
  returned: always
  type: list
  elements: str
data_disks:
  description: Drives that carry data in one stripe (for filesystem alignment).
  returned: always
  type: int
  sample: 2
problems:
  description: Reasons the role must stop; empty when it may go on.
  returned: always
  type: list
  elements: str
preexisting:
  description: The filesystem at O(preexisting_mount) and what it is built on; empty if none.
  returned: always
  type: dict
replace:
  description: Whether the preexisting filesystem is to be unmounted and its drives released.
  returned: always
  type: bool
release:
  description: The command that frees the preexisting filesystem's drives; empty when there is nothing to free.
  returned: always
  type: list
  elements: str
"""

import json
import os
import re

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.rackform.gpu.plugins.module_utils import sysfs

# Drives a node boots from or that belong to the cloud's block storage are never auto-selected.
_NOT_INSTANCE_STORE = ("Amazon Elastic Block Store",)
_HIDDEN_PATH = re.compile(r"^nvme\d+c\d+n\d+$")  # per-path devices under native multipath


def namespaces(sys_root: str = "/sys") -> list[dict]:
    """Every NVMe namespace block device: name, serial, model and size, from sysfs."""
    out = []
    block = os.path.join(sys_root, "block")
    for name in sorted(os.listdir(block)) if os.path.isdir(block) else []:
        if not name.startswith("nvme") or _HIDDEN_PATH.match(name):
            continue
        d = os.path.join(block, name)
        sectors = sysfs.read(os.path.join(d, "size"))
        out.append(
            {
                "name": name,
                "path": "/dev/" + name,
                "serial": sysfs.read(os.path.join(d, "device", "serial")),
                "model": sysfs.read(os.path.join(d, "device", "model")),
                "size_bytes": int(sectors) * 512 if sectors.isdigit() else 0,
                "partitions": sorted(p for p in os.listdir(d) if p.startswith(name + "p")),
                "holders": sorted(os.listdir(os.path.join(d, "holders")))
                if os.path.isdir(os.path.join(d, "holders"))
                else [],
            }
        )
    return out


def by_id_names(dev_root: str = "/dev") -> dict[str, str]:
    """Kernel name -> the shortest /dev/disk/by-id/nvme-* link to it (model_serial form)."""
    links: dict[str, str] = {}
    d = os.path.join(dev_root, "disk", "by-id")
    for link in sorted(os.listdir(d)) if os.path.isdir(d) else []:
        if not link.startswith("nvme-") or link.startswith(("nvme-eui.", "nvme-nvme.")):
            continue
        target = os.path.basename(os.path.realpath(os.path.join(d, link)))
        path = "/dev/disk/by-id/" + link
        if target not in links or len(path) < len(links[target]):
            links[target] = path
    return links


_PARTITION_TABLES = ("gpt", "dos", "PMBR")


def _one(sig: dict) -> str:
    kind = sig.get("type") or "unknown"
    ids = ", ".join(f"{k} {sig[k]}" for k in ("uuid", "label") if sig.get(k))
    ids = f" ({ids})" if ids else ""
    if kind in _PARTITION_TABLES:
        return f"a {kind} partition table{ids}"
    if kind == "linux_raid_member":
        return f"an md RAID member superblock{ids}"
    if kind == "swap":
        return f"a swap area{ids}"
    article = "an" if kind[0] in "aeiou" else "a"
    return f"{article} {kind} filesystem{ids}"


def describe(signatures: list[dict]) -> str:
    """What a drive holds, in words: 'an ext4 filesystem (uuid ..., label ...)'."""
    return "; ".join(dict.fromkeys(_one(s) for s in signatures))


def _resolve(wanted: list[str], drives: list[dict]) -> tuple[list[dict], list[str]]:
    """Drives matching each wanted serial / by-id name, in the order given; problems for any
    name that matches nothing."""
    chosen, problems = [], []
    for w in wanted:
        key = w.rsplit("/", 1)[-1]
        hits = [
            d
            for d in drives
            if key == d["serial"] or key == d["by_id"].rsplit("/", 1)[-1] or w == d["by_id"]
        ]
        if not hits:
            seen = ", ".join(f"{d['serial'] or '?'} ({d['path']})" for d in drives) or "none"
            problems.append(f"no NVMe drive has serial or by-id name {w!r} (drives seen: {seen})")
        for d in hits:
            if d not in chosen:
                chosen.append(d)
    return chosen, problems


def _label(d: dict) -> str:
    ident = d["by_id"] or "no by-id link"
    return f"{d['path']} (serial {d['serial'] or '?'}, {ident})"


def plan(
    drives: list[dict],
    arrays: list[dict],
    *,
    wanted: list[str],
    name: str,
    level: int,
    levels: dict,
    allow_wipe: bool,
    preexisting: dict | None = None,
    preexisting_action: str = "adopt",
) -> dict:
    """Pure decision: given what the host has, what must the role do, and what must stop it.
    `drives` carry signatures and in_use; `arrays` are the active md arrays; `preexisting` is
    the filesystem an image mounted on the drives itself (block_stack's view of it), or None."""
    result = {
        "array": {},
        "action": "none",
        "members": [],
        "wipe": [],
        "problems": [],
        "data_disks": 0,
        "preexisting": {},
        "replace": False,
        "release": [],
    }
    if not preexisting:
        # No preexisting filesystem (a plain Ubuntu or Debian host): the array path, as always.
        return _plan_array(result, drives, arrays, wanted, name, level, levels, allow_wipe)
    members, reasons, hard = judge_preexisting(preexisting, drives, wanted=wanted, level=level)
    where = f"{preexisting['mount']} ({describe_stack(preexisting)})"
    result["preexisting"] = {**preexisting, "drives": [d["path"] for d in members]}
    problems = result["problems"]
    if preexisting_action == "adopt":
        result["action"] = "adopt"
        result["members"] = [d["path"] for d in members]
        # Every drive carries data in a stripe: the same drives the rackform array would use
        # and the same data drives, so the throughput expectations (per drive x drives) hold.
        result["data_disks"] = len(members) if not reasons else 0
        if reasons:
            fix = (
                "rackform neither adopts nor erases such a volume: set nvme_raid_preexisting_mount "
                'to "" to leave it alone and build the array on the instance-store drives'
                if hard
                else "Set nvme_raid_preexisting_action: replace with nvme_raid_allow_wipe: true to "
                "build the rackform array on its drives instead, or use the plain Ubuntu image"
            )
            problems.append(
                f"nvme_raid cannot adopt {where}: {'; '.join(reasons)}. Nothing was changed. {fix}"
            )
        return result
    if hard:
        problems.append(
            f"nvme_raid will not replace {where}: {'; '.join(reasons)}. Nothing was changed. "
            'rackform never erases such a volume: set nvme_raid_preexisting_mount to "" to '
            "leave it alone and build the array on the instance-store drives"
        )
        return result
    if not allow_wipe:
        problems.append(
            f"nvme_raid_preexisting_action is replace, and replacing {where} erases "
            f"{', '.join(_label(d) for d in members)}. Nothing was changed. Set "
            "nvme_raid_allow_wipe: true (storage.checkpoint.allow_wipe) to replace it with the "
            "rackform array, or nvme_raid_preexisting_action: adopt to use it as it is"
        )
        return result
    # Replace: once unmounted and released, its drives are free; they still carry its
    # signatures (LVM PV labels, md superblocks), which allow_wipe erases before the array
    # is created.
    result["replace"] = True
    result["release"] = release_argv(preexisting)
    freed = {d["name"] for d in members}
    drives = [{**d, "in_use": ""} if d["name"] in freed else d for d in drives]
    return _plan_array(result, drives, arrays, wanted, name, level, levels, allow_wipe)


def _plan_array(result, drives, arrays, wanted, name, level, levels, allow_wipe) -> dict:
    """The array path: an existing array of this name, or drives to create or assemble it from."""
    ours = [a for a in arrays if a["name"] == name or a["name"].endswith(":" + name)]
    problems = result["problems"]
    if ours:
        array = ours[0]
        result["array"] = array
        result["members"] = list(array["members"])
        if array["level"] != f"raid{level}":
            problems.append(
                f"md array {array['device']} ({array['name']}) is {array['level']}, not raid{level}; "
                "rackform does not rebuild an existing array: stop and remove it by hand first"
            )
        if wanted:
            chosen, missing = _resolve(wanted, drives)
            paths = sorted(d["path"] for d in chosen)
            if missing or paths != sorted(array["members"]):
                problems.append(
                    f"md array {array['device']} ({array['name']}) is built from "
                    f"{', '.join(sorted(array['members']))}, not from the drives listed "
                    f"({', '.join(wanted)}); rackform does not reshape an existing array"
                )
        result["data_disks"] = data_disks(levels, level, len(array["members"]))
        problems += health_problems(array)
        return result

    if wanted:
        chosen, missing = _resolve(wanted, drives)
        problems += missing
    else:
        chosen = [d for d in drives if not d["in_use"] and d["model"] not in _NOT_INSTANCE_STORE]
    if not chosen and not problems:
        seen = ", ".join(f"{_label(d)}: {d['in_use']}" for d in drives) or "no NVMe drives at all"
        problems.append(f"no unused NVMe drive to build the array from (seen: {seen})")
    need = int(levels[str(level)]["min_devices"])
    if chosen and len(chosen) < need:
        problems.append(f"RAID {level} needs at least {need} drives, found {len(chosen)}")

    superblocks = {
        s.get("label", "")
        for d in chosen
        for s in d["signatures"]
        if s.get("type") == "linux_raid_member"
    }
    only_ours = all(
        [s.get("type") for s in d["signatures"]] == ["linux_raid_member"] for d in chosen
    )
    if chosen and only_ours and len(superblocks) == 1 and _is_ours(superblocks.pop(), name):
        # Our array's members, not running (e.g. never assembled after a reboot): assemble.
        result["action"] = "assemble"
    else:
        result["action"] = "create"
        for d in chosen:
            if d["in_use"]:
                problems.append(f"refusing to use {_label(d)}: it is in use ({d['in_use']})")
            elif d["signatures"]:
                if allow_wipe:
                    result["wipe"].append(d["path"])
                else:
                    problems.append(
                        f"refusing to use {_label(d)}: it holds {describe(d['signatures'])}. "
                        "Nothing was changed. Leave it out of nvme_raid_devices, or set "
                        "nvme_raid_allow_wipe: true (storage.checkpoint.allow_wipe) to erase it"
                    )
    result["members"] = [d["path"] for d in chosen]
    result["data_disks"] = data_disks(levels, level, len(chosen))
    return result


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


def _disk_of(sys_block_dir: str) -> str:
    """A partition's disk (nvme1n1 for nvme1n1p1); a disk is its own."""
    real = os.path.realpath(sys_block_dir)
    if os.path.exists(os.path.join(real, "partition")):
        return os.path.basename(os.path.dirname(real))
    return os.path.basename(real)


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


def present_units(names: list[str], root: str = "/") -> list[str]:
    """The systemd units of `names` that have a unit file on the host."""
    dirs = (
        "etc/systemd/system",
        "run/systemd/system",
        "lib/systemd/system",
        "usr/lib/systemd/system",
    )
    return [n for n in names if any(os.path.exists(os.path.join(root, d, n)) for d in dirs)]


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


def _held_only_by(drive: dict, stack: dict) -> bool:
    dev = "/dev/" + stack.get("device", "")
    alone = ("", f"held by {dev}", f"mounted or swap: {dev}")
    return set(drive["holders"]) <= {stack.get("device")} and drive["in_use"] in alone


def judge_preexisting(
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
    ebs = [d for d in members if d["model"] in _NOT_INSTANCE_STORE]
    if ebs:
        hard = True
        reasons.append(
            f"it is on {', '.join(_label(d) for d in ebs)}, an Amazon Elastic Block Store volume "
            "(network storage), not the instance-store NVMe drives"
        )
    shared = [d for d in members if not _held_only_by(d, stack)]
    if shared:
        hard = True
        reasons.append(
            "its drives are also used by something else: "
            + ", ".join(f"{_label(d)} ({d['in_use']})" for d in shared)
        )
    if hard:
        return members, reasons, hard
    if wanted:
        required, missing = _resolve(wanted, drives)
        reasons += missing
    else:
        required = [
            d
            for d in drives
            if d["model"] not in _NOT_INSTANCE_STORE
            and (not d["in_use"] or _held_only_by(d, stack))
        ]
    left_out = [d for d in required if d not in members]
    if left_out:
        reasons.append(
            f"it leaves {', '.join(_label(d) for d in left_out)} out, so it does not stripe over "
            "all the instance-store drives"
        )
    extra = [d for d in members if d not in required]
    if wanted and extra:
        reasons.append(
            f"it also uses {', '.join(_label(d) for d in extra)}, which nvme_raid_devices does not list"
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


def _is_ours(label: str, name: str) -> bool:
    return label == name or label.endswith(":" + name)


def data_disks(levels: dict, level: int, n: int) -> int:
    """Drives holding data in one full stripe (XFS sw, ext4 stripe-width), by the RAID table:
    1 when every drive mirrors (RAID 1), else n // mirrors - parity."""
    row = levels[str(level)]
    if n < int(row["min_devices"]):
        return 0
    if row["mirrors"] == "all":
        return 1
    return max(n // int(row["mirrors"]) - int(row["parity"]), 0)


def _mounted_sources() -> set[str]:
    out = set()
    for path in ("/proc/self/mounts", "/proc/swaps"):
        for line in sysfs.read(path).splitlines():
            src = line.split()[0] if line.split() else ""
            if src.startswith("/dev/"):
                out.add(os.path.basename(os.path.realpath(src)))
    return out


def _arrays(module: AnsibleModule) -> list[dict]:
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


def _dm_table(module: AnsibleModule, name: str) -> str:
    # Read-only: the device-mapper table says whether an LV is striped and over how many.
    rc, stdout, _err = module.run_command(["dmsetup", "table", name])
    return stdout if rc == 0 else ""


def _signatures(module: AnsibleModule, path: str) -> list[dict]:
    # wipefs without --all only lists what it would erase; --json gives every signature
    # (filesystems, partition tables, RAID superblocks) with its UUID and label.
    rc, stdout, stderr = module.run_command(["wipefs", "--json", path])
    if rc != 0:
        module.fail_json(msg=f"wipefs could not read {path}: {stderr.strip()}")
    if not stdout.strip():
        return []
    return [
        {k: s.get(k) or "" for k in ("type", "uuid", "label", "offset")}
        for s in json.loads(stdout).get("signatures", [])
    ]


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "devices": {"type": "list", "elements": "str", "default": []},
            "name": {"type": "str", "required": True},
            "level": {"type": "int", "required": True, "choices": [0, 1, 5, 6, 10]},
            "levels": {"type": "dict", "required": True},
            "allow_wipe": {"type": "bool", "default": False},
            "preexisting_mount": {"type": "str", "default": ""},
            "preexisting_action": {
                "type": "str",
                "default": "adopt",
                "choices": ["adopt", "replace"],
            },
            "preexisting_units": {"type": "list", "elements": "str", "default": []},
        },
        supports_check_mode=True,
    )
    mounted = _mounted_sources()
    links = by_id_names()
    drives = namespaces()
    for d in drives:
        d["by_id"] = links.get(d["name"], "")
        d["signatures"] = _signatures(module, d["path"])
        busy = [p for p in [d["name"], *d["partitions"]] if p in mounted]
        if busy:
            d["in_use"] = "mounted or swap: " + ", ".join("/dev/" + b for b in busy)
        elif d["holders"]:
            d["in_use"] = "held by " + ", ".join("/dev/" + h for h in d["holders"])
        else:
            d["in_use"] = ""
    arrays = _arrays(module)
    preexisting = None
    if module.params["preexisting_mount"]:
        mounted = find_mount(
            parse_mountinfo(sysfs.read("/proc/self/mountinfo")), module.params["preexisting_mount"]
        )
        if mounted:
            stack = block_stack(mounted["majmin"], dm_table=lambda n: _dm_table(module, n))
            preexisting = {
                **mounted,
                **stack,
                "units": present_units(module.params["preexisting_units"]),
            }
    result = plan(
        drives,
        arrays,
        wanted=module.params["devices"],
        name=module.params["name"],
        level=module.params["level"],
        levels=module.params["levels"],
        allow_wipe=module.params["allow_wipe"],
        preexisting=preexisting,
        preexisting_action=module.params["preexisting_action"],
    )
    module.exit_json(changed=False, drives=drives, **result)


if __name__ == "__main__":
    main()
