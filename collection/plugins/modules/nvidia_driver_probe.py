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
"""Read-only probe for the nvidia_driver role: NVIDIA GPUs and NVSwitches on the PCI bus, the
loaded NVIDIA driver's version, the driver installed on disk (dpkg's database, the versioned
libnvidia-ml library), whether nouveau is loaded; and the decision whether to install the
wanted branch, adopt the one an image preinstalled, or refuse a second branch."""

from __future__ import annotations

DOCUMENTATION = r"""
module: nvidia_driver_probe
short_description: Find NVIDIA GPUs and NVSwitches and the driver installed or loaded
description:
  - Lists NVIDIA GPUs and NVSwitches on the PCI bus, the loaded NVIDIA kernel driver's
    version, the drivers installed on disk (dpkg's database and the versioned
    C(libnvidia-ml) library) and whether nouveau is loaded.
  - Given O(branch), decides whether the nvidia_driver role installs that branch, adopts the
    driver an image preinstalled, or refuses because another branch is installed or loaded.
  - Reads C(/sys/bus/pci), C(/proc/driver/nvidia), C(/var/lib/dpkg/status) and the library
    directories only; changes nothing.
options:
  branch:
    description: The wanted driver branch (V(550), V(550-open), ...); empty decides nothing.
    type: str
    default: ""
  adopt_preinstalled:
    description: A driver of the wanted branch already installed is used as it is (decision V(adopt)).
    type: bool
    default: false
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - rackform.gpu.probe
"""

EXAMPLES = r"""
- name: Probe for GPUs and the driver
  rackform.gpu.nvidia_driver_probe:
    branch: "550"
  register: gpu

- name: Stop where another driver branch is installed
  ansible.builtin.fail:
    msg: "{{ gpu.problem }}"
  when: gpu.decision == 'refuse'
"""

RETURN = r"""
gpus:
  description: NVIDIA display and 3D controllers, each with its PCI address and device id.
  returned: always
  type: list
  elements: dict
  sample: [{"address": "0000:18:00.0", "device": "0x2330"}]
nvswitches:
  description: PCI addresses of NVIDIA NVSwitch bridges.
  returned: always
  type: list
  elements: str
loaded_version:
  description: Version of the loaded NVIDIA kernel driver; empty if none is loaded.
  returned: always
  type: str
  sample: "550.90.07"
nouveau_loaded:
  description: Whether the nouveau module is loaded.
  returned: always
  type: bool
installed:
  description: Drivers found installed, each with its version, branch and where it was seen.
  returned: always
  type: list
  elements: dict
  sample: [{"branch": "550", "version": "550.90.07", "seen": "nvidia-driver-550"}]
installed_branches:
  description: Branch numbers of the drivers installed or loaded; empty when O(branch) is empty.
  returned: always
  type: list
  elements: str
decision:
  description: V(install), V(adopt) (the preinstalled driver of the wanted branch) or V(refuse).
  returned: always
  type: str
  sample: install
problem:
  description: Why the decision is V(refuse); empty otherwise.
  returned: always
  type: str
"""

import glob
import os
import re

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.rackform.gpu.plugins.module_utils import sysfs

NVIDIA = "0x10de"
# PCI classes: 0x0300 VGA, 0x0302 3D controller (datacenter GPUs); 0x0680 "other bridge" is
# how NVSwitches show up on HGX boards.
GPU_CLASSES = ("0x0300", "0x0302")
NVSWITCH_CLASS = "0x0680"


# The AWS Deep Learning AMI ("Deep Learning Base OSS Nvidia Driver GPU AMI (Ubuntu 22.04)" and
# 24.04) ships its own driver, from NVIDIA's open kernel modules: its release notes list
# nvidia_driver 580.x in late 2025 and 595.x in 2026, with its own CUDA under /usr/local/cuda-*,
# DCGM 4.x, EFA and aws-ofi-nccl (https://docs.aws.amazon.com/dlami/latest/devguide/ release
# notes; e.g. https://docs.amazonaws.cn/dlami/latest/devguide/aws-deep-learning-ami-gpubaseossarm64-ul2204-2025-11-10.html,
# 580.95.05, and ...-ul2204-2026-10-08.html, 595.91.07). Installing the blueprint's branch from
# NVIDIA's repository over it would leave two branches on the host (packages fighting over the
# same files, a module of one branch with the libraries of another), so the role reads what is
# installed, from files (dpkg's database; the versioned libnvidia-ml.so.<version> every install
# method puts in the library directory; the loaded module), and decides here.

# Packages that carry one driver branch in their name (Ubuntu and the CUDA repository):
# nvidia-driver-550[-server|-open|-server-open], cuda-drivers-550, nvidia-kernel-common-550,
# libnvidia-compute-550, nvidia-dkms-550[-open], ...
_BRANCH_PACKAGE = re.compile(
    r"^(?:nvidia-driver|cuda-drivers|nvidia-kernel-common|nvidia-kernel-source|nvidia-dkms"
    r"|libnvidia-compute|nvidia-utils)-(\d{3})(?:-server)?(?:-open)?$"
)
_LIB_DIRS = ("usr/lib/x86_64-linux-gnu", "usr/lib/aarch64-linux-gnu", "usr/lib64", "usr/lib")


def dpkg_drivers(status_text: str) -> list[dict]:
    """Installed packages that name a driver branch, from /var/lib/dpkg/status."""
    out = []
    for stanza in status_text.split("\n\n"):
        fields = dict(
            line.split(": ", 1) for line in stanza.splitlines() if ": " in line and line[0] != " "
        )
        m = _BRANCH_PACKAGE.match(fields.get("Package", ""))
        if m and fields.get("Status", "").endswith(" installed"):
            version = fields.get("Version", "").split(":")[-1].split("-")[0]
            out.append({"branch": m.group(1), "version": version, "seen": fields["Package"]})
    return out


def library_drivers(root: str = "/") -> list[dict]:
    """Driver versions from libnvidia-ml.so.<version> in the library directories (deb, runfile
    and the CUDA repository all install it under the driver's full version)."""
    out = []
    for d in _LIB_DIRS:
        for path in sorted(glob.glob(os.path.join(root, d, "libnvidia-ml.so.*.*"))):
            version = path.rsplit("libnvidia-ml.so.", 1)[1]
            if re.fullmatch(r"\d+\.\d+(\.\d+)?", version):
                out.append(
                    {
                        "branch": version.split(".")[0],
                        "version": version,
                        "seen": "/" + os.path.relpath(path, root),
                    }
                )
    return out


def decide(
    branch: str, loaded_version: str, installed: list[dict], adopt_preinstalled: bool
) -> dict:
    """Pure decision: install the wanted branch, adopt the preinstalled one, or refuse. Another
    branch installed or loaded is always refused: the role never puts a second branch on a host."""
    wanted = re.sub(r"-.*$", "", branch)
    found = list(installed)
    if loaded_version:
        found.append(
            {"branch": loaded_version.split(".")[0], "version": loaded_version, "seen": "loaded"}
        )
    branches = sorted({d["branch"] for d in found})
    others = [b for b in branches if b != wanted]
    if others:
        where = "; ".join(
            f"{b}: "
            + ", ".join(
                dict.fromkeys(f"{d['version']} ({d['seen']})" for d in found if d["branch"] == b)
            )
            for b in others
        )
        return {
            "decision": "refuse",
            "installed_branches": branches,
            "problem": (
                f"NVIDIA driver branch {' and '.join(others)} is already installed or loaded ({where}), "
                f"and nvidia_driver_branch is {branch}: rackform never installs a second driver "
                f'branch over another. Set software.driver_branch to "{others[-1]}" '
                "(nvidia_driver_branch), or use the plain Ubuntu image"
            ),
        }
    if branches and adopt_preinstalled:
        return {"decision": "adopt", "installed_branches": branches, "problem": ""}
    return {"decision": "install", "installed_branches": branches, "problem": ""}


def probe(sys_root: str = "/sys", proc_root: str = "/proc", root: str = "/") -> dict:
    pci = os.path.join(sys_root, "bus", "pci", "devices")
    gpus, switches = [], []
    for addr in sorted(os.listdir(pci)) if os.path.isdir(pci) else []:
        d = os.path.join(pci, addr)
        if sysfs.read(os.path.join(d, "vendor")) != NVIDIA:
            continue
        cls = sysfs.read(os.path.join(d, "class"))[:6]
        if cls in GPU_CLASSES:
            gpus.append({"address": addr, "device": sysfs.read(os.path.join(d, "device"))})
        elif cls == NVSWITCH_CLASS:
            switches.append(addr)
    version = ""
    text = sysfs.read(os.path.join(proc_root, "driver", "nvidia", "version"))
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
        "installed": dpkg_drivers(sysfs.read(os.path.join(root, "var", "lib", "dpkg", "status")))
        + library_drivers(root),
    }


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "branch": {"type": "str", "default": ""},
            "adopt_preinstalled": {"type": "bool", "default": False},
        },
        supports_check_mode=True,
    )
    found = probe()
    verdict = {"decision": "install", "installed_branches": [], "problem": ""}
    if module.params["branch"]:
        verdict = decide(
            module.params["branch"],
            found["loaded_version"],
            found["installed"],
            module.params["adopt_preinstalled"],
        )
    module.exit_json(changed=False, **found, **verdict)


if __name__ == "__main__":
    main()
