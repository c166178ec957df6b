"""A node's checkpoint array, as the plan records it: the RAID level from the catalog's table,
the drives where they are known, the write speed (declared in the blueprint, or estimated from
the instance type's drives) and the capacity. Target compilers call `array_plan` from their
compile step; compile picks the slowest node's (`slowest`), and preflight, the thresholds and the
roles' variables read the result."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from rackform.blueprint.schema.sections import CheckpointStorage
from rackform.catalog import Figure
from rackform.catalog.raid import RaidLevel, load_raid_levels

DECLARED = "blueprint storage.checkpoint.write_gbps"


@dataclass(frozen=True)
class ArrayPlan:
    """One node's checkpoint array as the plan knows it."""

    level: RaidLevel
    drives: int | None  # drives on one node, where known (instance store; listed drives)
    write_gbps: float | None  # one node's array, declared or estimated; None where unknown
    write_source: str  # where write_gbps came from, or why there is none
    declared: bool  # write_gbps is the blueprint's own claim (not a catalog estimate)
    capacity_gb: float | None  # one node's array, where the drives' size is known

    @property
    def data_drives(self) -> int | None:
        return None if self.drives is None else self.level.data_drives(self.drives)


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


def slowest(arrays: Iterable[ArrayPlan]) -> ArrayPlan | None:
    """The slowest of the arrays a checkpoint is written to (a synchronous checkpoint waits for
    it), or None when there is none or the write speed of one of them is unknown."""
    arrays = list(arrays)
    if not arrays or any(a.write_gbps is None for a in arrays):
        return None
    return min(arrays, key=lambda a: a.write_gbps)
