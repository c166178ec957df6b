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
"""Read-only probe for the nccl_rdma role: EFA functions on the PCI bus, RDMA devices with their
link layer (InfiniBand, or Ethernet for RoCE) and network interfaces, from sysfs."""

from __future__ import annotations

DOCUMENTATION = r"""
module: nccl_rdma_probe
short_description: List EFA functions, RDMA devices and network interfaces
description:
  - Lists the Amazon EFA functions on the PCI bus, the RDMA devices with their link layer
    (InfiniBand, or Ethernet for RoCE) and network interfaces, and the host's network
    interfaces.
  - Reads C(/sys) only; changes nothing. The nccl_rdma role runs it before it configures NCCL.
options: {}
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - rackform.gpu.probe
"""

EXAMPLES = r"""
- name: Probe the fabric
  rackform.gpu.nccl_rdma_probe:
  register: fabric

- name: Show the RDMA devices
  ansible.builtin.debug:
    msg: "{{ fabric.rdma | map(attribute='name') | list }}"
"""

RETURN = r"""
efa_pci:
  description: PCI addresses of Amazon EFA functions.
  returned: always
  type: list
  elements: str
  sample: ["0000:10:00.0"]
rdma:
  description: RDMA devices, each with its name, link_layer and netdevs.
  returned: always
  type: list
  elements: dict
  sample: [{"name": "mlx5_0", "link_layer": "InfiniBand", "netdevs": ["ib0"]}]
interfaces:
  description: Network interface names.
  returned: always
  type: list
  elements: str
  sample: ["eth0", "ib0", "lo"]
"""

import os

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.rackform.gpu.plugins.module_utils import sysfs

AMAZON = "0x1d0f"
EFA_DEVICES = {"0xefa0", "0xefa1", "0xefa2", "0xefa3"}


def probe(sys_root: str = "/sys") -> dict:
    pci = os.path.join(sys_root, "bus", "pci", "devices")
    efa = [
        a
        for a in sysfs.listdir(pci)
        if sysfs.read(os.path.join(pci, a, "vendor")) == AMAZON
        and sysfs.read(os.path.join(pci, a, "device")) in EFA_DEVICES
    ]
    ib = os.path.join(sys_root, "class", "infiniband")
    rdma = []
    for name in sysfs.listdir(ib):
        ports = sysfs.listdir(os.path.join(ib, name, "ports"))
        layers = sorted(
            {sysfs.read(os.path.join(ib, name, "ports", p, "link_layer")) for p in ports} - {""}
        )
        rdma.append(
            {
                "name": name,
                "link_layer": layers[0] if layers else "",
                "netdevs": sysfs.listdir(os.path.join(ib, name, "device", "net")),
            }
        )
    interfaces = sysfs.listdir(os.path.join(sys_root, "class", "net"))
    return {"efa_pci": efa, "rdma": rdma, "interfaces": interfaces}


def main() -> None:
    module = AnsibleModule(argument_spec={}, supports_check_mode=True)
    module.exit_json(changed=False, **probe())


if __name__ == "__main__":
    main()
