# SPDX-License-Identifier: Apache-2.0
"""Reading sysfs and procfs for the collection's probe modules (nvidia_driver_probe,
nccl_rdma_probe, and nvme_raid_probe through its module_utils): a missing or unreadable
attribute reads as empty, because the kernel exposes a different set of files per driver,
device and version."""

from __future__ import annotations

import os


def read(path: str) -> str:
    """The attribute's text without surrounding whitespace; "" when it is absent or unreadable."""
    try:
        with open(path) as f:
            return f.read().strip()
    except OSError:
        return ""


def listdir(path: str) -> list[str]:
    """The directory's entries, sorted; [] when it is not a directory."""
    return sorted(os.listdir(path)) if os.path.isdir(path) else []
