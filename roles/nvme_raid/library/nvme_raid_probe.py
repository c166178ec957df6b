#!/usr/bin/python
"""Read-only probe for the nvme_raid role: which NVMe drives exist, what each one holds, whether
the array already exists, and what the role would have to do. It never writes to a disk; the
role's tasks act only on what this probe decided, after its problems were shown."""

from __future__ import annotations

import json
import os
import re

from ansible.module_utils.basic import AnsibleModule

DOCUMENTATION = r"""
module: nvme_raid_probe
short_description: Find NVMe drives and decide how to build the checkpoint array from them
description:
  - Lists every NVMe namespace with its serial, model, size, /dev/disk/by-id name, the
    signatures on it (filesystem, partition table, md superblock) and whether it is in use.
  - Selects drives by serial or by-id name, or every unused NVMe drive when none are listed
    (never by kernel name order), and finds an existing md array of the given name.
  - Returns the action (none, create, assemble), the drives to wipe (only with allow_wipe)
    and the problems that must stop the role. Changes nothing.
options:
  devices:
    description: Drives by serial, by-id name or /dev/disk/by-id path; empty selects every unused NVMe drive.
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
      - The md RAID table, keyed by level as a string; each entry has min_devices (the fewest
        drives the level accepts), mirrors (copies of each block, or "all" for RAID 1) and
        parity (drives' worth of parity). rackform passes its catalog's table.
    type: dict
    required: true
  allow_wipe:
    description: Drives holding signatures may be wiped (never drives that are in use).
    type: bool
    default: false
author: rackform
"""

RETURN = r"""
drives: {description: Every NVMe namespace seen., returned: always, type: list, elements: dict}
array: {description: The active array of this name (empty if none)., returned: always, type: dict}
action: {description: none, create or assemble., returned: always, type: str}
members: {description: Device paths of the array's members (existing or to be used)., returned: always, type: list, elements: str}
wipe: {description: Drives whose signatures must be wiped before create (allow_wipe only)., returned: always, type: list, elements: str}
data_disks: {description: Drives that carry data in one stripe (for filesystem alignment)., returned: always, type: int}
problems: {description: Reasons the role must stop; empty when it may go on., returned: always, type: list, elements: str}
"""

EXAMPLES = r"""
- name: Probe NVMe drives
  nvme_raid_probe:
    devices: [S6XNNA0T123456]
    name: checkpoints
    level: 0
    levels: "{{ nvme_raid_levels }}"
  register: probe
"""

# Drives a node boots from or that belong to the cloud's block storage are never auto-selected.
_NOT_INSTANCE_STORE = ("Amazon Elastic Block Store",)
_HIDDEN_PATH = re.compile(r"^nvme\d+c\d+n\d+$")  # per-path devices under native multipath


def _read(path: str) -> str:
    try:
        with open(path) as f:
            return f.read().strip()
    except OSError:
        return ""


def namespaces(sys_root: str = "/sys") -> list[dict]:
    """Every NVMe namespace block device: name, serial, model and size, from sysfs."""
    out = []
    block = os.path.join(sys_root, "block")
    for name in sorted(os.listdir(block)) if os.path.isdir(block) else []:
        if not name.startswith("nvme") or _HIDDEN_PATH.match(name):
            continue
        d = os.path.join(block, name)
        sectors = _read(os.path.join(d, "size"))
        out.append(
            {
                "name": name,
                "path": "/dev/" + name,
                "serial": _read(os.path.join(d, "device", "serial")),
                "model": _read(os.path.join(d, "device", "model")),
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
) -> dict:
    """Pure decision: given what the host has, what must the role do, and what must stop it.
    `drives` carry signatures and in_use; `arrays` are the active md arrays."""
    ours = [a for a in arrays if a["name"] == name or a["name"].endswith(":" + name)]
    result = {
        "array": {},
        "action": "none",
        "members": [],
        "wipe": [],
        "problems": [],
        "data_disks": 0,
    }
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
        for line in _read(path).splitlines():
            src = line.split()[0] if line.split() else ""
            if src.startswith("/dev/"):
                out.add(os.path.basename(os.path.realpath(src)))
    return out


def _arrays(module: AnsibleModule) -> list[dict]:
    out = []
    for dev in sorted(os.listdir("/sys/block")):
        if not dev.startswith("md") or _read(f"/sys/block/{dev}/md/array_state") in (
            "",
            "inactive",
            "clear",
        ):
            continue
        rc, stdout, _ = module.run_command(["mdadm", "--detail", "--export", "/dev/" + dev])
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
                "state": _read(f"/sys/block/{dev}/md/array_state"),
                # md(4): each member's dev-*/state lists "faulty" once it failed; `degraded`
                # counts the members a redundant array is missing.
                "faulty": _faulty(f"/sys/block/{dev}/md"),
                "missing": int(_read(f"/sys/block/{dev}/md/degraded") or 0),
            }
        )
    return out


def _faulty(md_dir: str) -> list[str]:
    out = []
    for entry in sorted(os.listdir(md_dir)) if os.path.isdir(md_dir) else []:
        if entry.startswith("dev-") and "faulty" in _read(f"{md_dir}/{entry}/state").split(","):
            out.append("/dev/" + entry.removeprefix("dev-"))
    return out


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
    result = plan(
        drives,
        arrays,
        wanted=module.params["devices"],
        name=module.params["name"],
        level=module.params["level"],
        levels=module.params["levels"],
        allow_wipe=module.params["allow_wipe"],
    )
    module.exit_json(changed=False, drives=drives, **result)


if __name__ == "__main__":
    main()
