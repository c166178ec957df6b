"""md RAID levels as data (`raid.yaml`): the fewest drives each level accepts and how many of
a node's drives carry data. Preflight, the plan's array figures and the nvme_raid role all
read this one table (the role gets it as the variable `nvme_raid_levels`)."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from typing import Any

from rackform.catalog import CatalogError, Figure, _figures, _read, _sources

ALL = "all"


@dataclass(frozen=True)
class RaidLevel:
    level: int
    min_devices: Figure
    mirrors: Figure | str  # copies each block is written to; "all": every drive (RAID 1)
    parity: Figure  # drives' worth of parity

    def data_drives(self, n: int) -> int:
        """Drives of `n` that carry data (0 when `n` is below what the level accepts)."""
        if n < self.min_devices.value:
            return 0
        if self.mirrors == ALL:
            return 1
        return max(n // int(self.mirrors.value) - int(self.parity.value), 0)

    def as_var(self) -> dict[str, Any]:
        """The role's view of the level (`nvme_raid_levels[level]`)."""
        return {
            "min_devices": int(self.min_devices.value),
            "mirrors": self.mirrors if self.mirrors == ALL else int(self.mirrors.value),
            "parity": int(self.parity.value),
        }


@cache
def load_raid_levels() -> dict[int, RaidLevel]:
    doc = _read("raid.yaml")
    src = _sources(doc, "raid.yaml")
    out = {}
    for level, raw in doc["levels"].items():
        values = _figures(raw, src, f"raid.yaml:{level}")
        if values.get("mirrors") != ALL and not isinstance(values.get("mirrors"), Figure):
            raise CatalogError(f"raid.yaml:{level}: mirrors is {{v:, src:}} or {ALL!r}")
        out[int(level)] = RaidLevel(int(level), **values)
    return out


def role_table() -> dict[int, dict[str, Any]]:
    """`nvme_raid_levels`: the table as the nvme_raid role reads it (keyed by the level as a
    string: Ansible variables, YAML and Pulumi inputs all keep string keys)."""
    return {str(level): r.as_var() for level, r in sorted(load_raid_levels().items())}
