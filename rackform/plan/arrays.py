"""A node's checkpoint array, as the plan records it: the RAID level from the catalog's table,
the drives where they are known, the write speed (declared in the blueprint, or estimated from
the instance type's drives) and the capacity. Target adapters call this from their compile step;
preflight, the thresholds and the roles' variables read the result."""

from __future__ import annotations

from rackform.blueprint.schema.sections import CheckpointStorage
from rackform.catalog import Figure
from rackform.catalog.raid import load_raid_levels
from rackform.plan.model import ArrayPlan

DECLARED = "blueprint storage.checkpoint.write_gbps"


def array_plan(
    ckpt: CheckpointStorage,
    *,
    drives: int | None,
    drive_gb: float | None = None,
    per_drive: Figure | None = None,
    where: str = "",
) -> ArrayPlan:
    """`drives` on one node (None: found on the host at configure time); `per_drive` the
    catalog's write GB/s of one drive, for an estimate when the blueprint declares none."""
    level = load_raid_levels()[ckpt.raid_level]
    data = None if drives is None else level.data_drives(drives)
    capacity = None if data is None or drive_gb is None else data * drive_gb
    if ckpt.write_gbps is not None:
        speed, source, declared = ckpt.write_gbps, DECLARED, True
    elif per_drive is not None and data:
        speed = data * per_drive.value
        source = (
            f"estimate: {data} drives x {per_drive.value:g} GB/s, RAID {ckpt.raid_level} "
            f"({where}; catalog {per_drive.source.key}, {per_drive.source.date})"
        )
        declared = False
    elif per_drive is not None:
        speed, declared = None, False
        source = f"{where} has no instance-store NVMe for RAID {ckpt.raid_level}"
    else:
        speed, source, declared = None, "storage.checkpoint.write_gbps not declared", False
    return ArrayPlan(level, drives, speed, source, declared, capacity)
