#!/usr/bin/python
# SPDX-License-Identifier: Apache-2.0
# Licensed under the Apache License 2.0 (as all of rackform), not under the
# GNU General Public License version 3 that ansible-core is under; Apache-2.0 code may be
# combined with GPLv3 code (https://www.apache.org/licenses/GPL-compatibility.html).
# ansible-test's validate-modules wants the GPLv3 named in a module's first 20 lines
# (missing-gplv3-license); this names it only to say how the two licenses relate.
# Imports follow DOCUMENTATION, EXAMPLES and RETURN, as Ansible's module format (validate-modules)
# requires.
# ruff: noqa: E402
"""Read-only probe for the nvme_raid role: which NVMe drives exist, what each one holds, whether
the array already exists, and what the role would have to do. It never writes to a disk; the
role's tasks act only on what this probe decided, after its problems were shown. What it reads
and decides is in module_utils (nvme_drives, md_arrays, preexisting_mount, block_stack,
nvme_raid_plan); this file is its interface and the order of the reads."""

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

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.rackform.gpu.plugins.module_utils import (
    md_arrays,
    nvme_drives,
    nvme_raid_plan,
    preexisting_mount,
)


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
    drives = nvme_drives.inventory(module)
    arrays = md_arrays.active(module)
    preexisting = preexisting_mount.find(
        module, module.params["preexisting_mount"], module.params["preexisting_units"]
    )
    result = nvme_raid_plan.plan(
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
