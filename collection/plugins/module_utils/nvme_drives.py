# SPDX-License-Identifier: Apache-2.0
"""The NVMe drives of a host for nvme_raid_probe: every namespace with its serial, model, size,
/dev/disk/by-id name, the signatures on it and what uses it; which drives a user's list of
serials or by-id names means; and what a drive holds, in words."""

from __future__ import annotations

import json
import os
import re

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.rackform.gpu.plugins.module_utils import sysfs

# Drives a node boots from or that belong to the cloud's block storage are never auto-selected.
NOT_INSTANCE_STORE = ("Amazon Elastic Block Store",)
_HIDDEN_PATH = re.compile(r"^nvme\d+c\d+n\d+$")  # per-path devices under native multipath
_PARTITION_TABLES = ("gpt", "dos", "PMBR")


def inventory(module: AnsibleModule) -> list[dict]:
    """Every NVMe drive on the host with its by-id name, its signatures and what uses it ("" when
    nothing does): mounted or swap (the drive or a partition of it), or held by another device."""
    mounted = _mounted_sources()
    links = by_id_names()
    drives = namespaces()
    for d in drives:
        d["by_id"] = links.get(d["name"], "")
        d["signatures"] = read_signatures(module, d["path"])
        busy = [p for p in [d["name"], *d["partitions"]] if p in mounted]
        if busy:
            d["in_use"] = "mounted or swap: " + ", ".join("/dev/" + b for b in busy)
        elif d["holders"]:
            d["in_use"] = "held by " + ", ".join("/dev/" + h for h in d["holders"])
        else:
            d["in_use"] = ""
    return drives


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


def _mounted_sources() -> set[str]:
    """Kernel names of the devices mounted or used as swap."""
    out = set()
    for path in ("/proc/self/mounts", "/proc/swaps"):
        for line in sysfs.read(path).splitlines():
            src = line.split()[0] if line.split() else ""
            if src.startswith("/dev/"):
                out.add(os.path.basename(os.path.realpath(src)))
    return out


def read_signatures(module: AnsibleModule, path: str) -> list[dict]:
    """Every signature on the drive at `path`: type, UUID, label and offset."""
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


def select(wanted: list[str], drives: list[dict], free) -> tuple[list[dict], list[str]]:
    """The drives listed in `wanted` (see resolve), or when none are listed every instance-store
    drive that `free(drive)` accepts; and problems for any listed name that matches nothing."""
    if wanted:
        return resolve(wanted, drives)
    return [d for d in drives if d["model"] not in NOT_INSTANCE_STORE and free(d)], []


def resolve(wanted: list[str], drives: list[dict]) -> tuple[list[dict], list[str]]:
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


def label(d: dict) -> str:
    """A drive as messages name it: path, serial and by-id name."""
    ident = d["by_id"] or "no by-id link"
    return f"{d['path']} (serial {d['serial'] or '?'}, {ident})"


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
