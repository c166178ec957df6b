# SPDX-License-Identifier: Apache-2.0
"""What the collection's probe modules (nvidia_driver_probe, nccl_rdma_probe, nvme_raid_probe)
share in their documentation: each only reads the host, so it runs the same in check mode."""

from __future__ import annotations


class ModuleDocFragment:
    DOCUMENTATION = r"""
attributes:
  check_mode:
    support: full
    details: The probe only reads the host; check mode runs it in full.
  diff_mode:
    support: none
  platform:
    platforms: posix
author:
  - rackform maintainers (@rackform)
"""
