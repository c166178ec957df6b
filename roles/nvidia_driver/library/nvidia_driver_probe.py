#!/usr/bin/python
"""Read-only probe for the nvidia_driver role: NVIDIA GPUs and NVSwitches on the PCI bus, the
loaded NVIDIA driver's version and whether nouveau is loaded, all from /sys and /proc."""

from __future__ import annotations

import os

from ansible.module_utils.basic import AnsibleModule

DOCUMENTATION = r"""
module: nvidia_driver_probe
short_description: Find NVIDIA GPUs and NVSwitches and the loaded driver
description:
  - Reads /sys/bus/pci and /proc/driver/nvidia only; changes nothing.
options: {}
author: rackform
"""

RETURN = r"""
gpus: {description: "NVIDIA display / 3D controllers: address, device id.", returned: always, type: list, elements: dict}
nvswitches: {description: PCI addresses of NVIDIA NVSwitch bridges., returned: always, type: list, elements: str}
loaded_version: {description: Version of the loaded NVIDIA kernel driver, empty if none., returned: always, type: str}
nouveau_loaded: {description: Whether the nouveau module is loaded., returned: always, type: bool}
"""

EXAMPLES = r"""
- name: Probe for GPUs
  nvidia_driver_probe:
  register: probe
"""

NVIDIA = "0x10de"
# PCI classes: 0x0300 VGA, 0x0302 3D controller (datacenter GPUs); 0x0680 "other bridge" is
# how NVSwitches show up on HGX boards.
GPU_CLASSES = ("0x0300", "0x0302")
NVSWITCH_CLASS = "0x0680"


def _read(path: str) -> str:
    try:
        with open(path) as f:
            return f.read().strip()
    except OSError:
        return ""


def probe(sys_root: str = "/sys", proc_root: str = "/proc") -> dict:
    pci = os.path.join(sys_root, "bus", "pci", "devices")
    gpus, switches = [], []
    for addr in sorted(os.listdir(pci)) if os.path.isdir(pci) else []:
        d = os.path.join(pci, addr)
        if _read(os.path.join(d, "vendor")) != NVIDIA:
            continue
        cls = _read(os.path.join(d, "class"))[:6]
        if cls in GPU_CLASSES:
            gpus.append({"address": addr, "device": _read(os.path.join(d, "device"))})
        elif cls == NVSWITCH_CLASS:
            switches.append(addr)
    version = ""
    text = _read(os.path.join(proc_root, "driver", "nvidia", "version"))
    # "NVRM version: NVIDIA UNIX x86_64 Kernel Module  550.90.07  Fri May 31 ..."
    for word in text.split():
        if word.count(".") >= 1 and word.replace(".", "").isdigit():
            version = word
            break
    return {
        "gpus": gpus,
        "nvswitches": switches,
        "loaded_version": version,
        "nouveau_loaded": os.path.isdir(os.path.join(sys_root, "module", "nouveau")),
    }


def main() -> None:
    module = AnsibleModule(argument_spec={}, supports_check_mode=True)
    module.exit_json(changed=False, **probe())


if __name__ == "__main__":
    main()
