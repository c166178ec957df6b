# SPDX-License-Identifier: Apache-2.0
"""The nvme_raid decision, for nvme_raid_probe: given the host's drives, md arrays and any
preexisting filesystem (read by the other module_utils), what the role must do (create,
assemble, adopt or nothing), with which drives, what it may wipe, and what must stop it. Pure:
it reads nothing and runs nothing, so every case is tested without a host."""

from __future__ import annotations

from ansible_collections.rackform.gpu.plugins.module_utils import (
    block_stack,
    md_arrays,
    nvme_drives,
    preexisting_mount,
)


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
    members, reasons, hard = preexisting_mount.judge(
        preexisting, drives, wanted=wanted, level=level
    )
    where = f"{preexisting['mount']} ({block_stack.describe_stack(preexisting)})"
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
            f"{', '.join(nvme_drives.label(d) for d in members)}. Nothing was changed. Set "
            "nvme_raid_allow_wipe: true (storage.checkpoint.allow_wipe) to replace it with the "
            "rackform array, or nvme_raid_preexisting_action: adopt to use it as it is"
        )
        return result
    # Replace: once unmounted and released, its drives are free; they still carry its
    # signatures (LVM PV labels, md superblocks), which allow_wipe erases before the array
    # is created.
    result["replace"] = True
    result["release"] = preexisting_mount.release_argv(preexisting)
    freed = {d["name"] for d in members}
    drives = [{**d, "in_use": ""} if d["name"] in freed else d for d in drives]
    return _plan_array(result, drives, arrays, wanted, name, level, levels, allow_wipe)


def _plan_array(result, drives, arrays, wanted, name, level, levels, allow_wipe) -> dict:
    """The array path: an existing array of this name, or drives to create or assemble it from."""
    ours = [a for a in arrays if _is_ours(a["name"], name)]
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
            chosen, missing = nvme_drives.resolve(wanted, drives)
            paths = sorted(d["path"] for d in chosen)
            if missing or paths != sorted(array["members"]):
                problems.append(
                    f"md array {array['device']} ({array['name']}) is built from "
                    f"{', '.join(sorted(array['members']))}, not from the drives listed "
                    f"({', '.join(wanted)}); rackform does not reshape an existing array"
                )
        result["data_disks"] = md_arrays.data_disks(levels, level, len(array["members"]))
        problems += md_arrays.health_problems(array)
        return result

    chosen, missing = nvme_drives.select(wanted, drives, lambda d: not d["in_use"])
    problems += missing
    if not chosen and not problems:
        seen = (
            ", ".join(f"{nvme_drives.label(d)}: {d['in_use']}" for d in drives)
            or "no NVMe drives at all"
        )
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
                problems.append(
                    f"refusing to use {nvme_drives.label(d)}: it is in use ({d['in_use']})"
                )
            elif d["signatures"]:
                if allow_wipe:
                    result["wipe"].append(d["path"])
                else:
                    problems.append(
                        f"refusing to use {nvme_drives.label(d)}: it holds {nvme_drives.describe(d['signatures'])}. "
                        "Nothing was changed. Leave it out of nvme_raid_devices, or set "
                        "nvme_raid_allow_wipe: true (storage.checkpoint.allow_wipe) to erase it"
                    )
    result["members"] = [d["path"] for d in chosen]
    result["data_disks"] = md_arrays.data_disks(levels, level, len(chosen))
    return result


def _is_ours(label: str, name: str) -> bool:
    """An md name is ours as given or as mdadm prefixes it with the host ("host:name")."""
    return label == name or label.endswith(":" + name)
