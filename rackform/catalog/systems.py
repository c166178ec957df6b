"""GPU systems (`systems.yaml`): how a catalog GPU model is built into nodes and NVLink domains,
an HGX board (one node, its own domain) or a rack-scale NVL72 (one domain of 18 trays), with
each figure's source and the figures nobody has published yet named as still to be measured."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from functools import cache
from typing import Any, Literal

from rackform.catalog import CatalogError, Figure, _figures, _read, _sources, load_catalog

Arch = Literal["amd64", "arm64"]
ARCHES: tuple[str, ...] = ("amd64", "arm64")


@dataclass(frozen=True)
class System:
    key: str
    description: str
    gpu: str  # the catalog GPU model it carries
    gpus_per_node: Figure  # a board's or a compute tray's GPUs
    max_nodes_per_domain: Figure  # 1: a node's own GPUs are its NVLink domain
    nvlink_gbps_per_gpu: Figure
    host_arch: Arch
    imex: bool  # trays of a domain share memory only through NVIDIA's IMEX service
    nvlink_switch_trays: Figure | None = None
    domain_nvlink_tbps: Figure | None = None
    power_kw: Figure | None = None  # a board's, or a rack-scale system's whole rack
    allreduce_busbw_gbps_domain: Figure | None = None
    alltoall_busbw_gbps_domain: Figure | None = None
    # Figures no source has published: not guessed, listed, and filled when measured.
    to_be_measured: tuple[str, ...] = ()

    @property
    def domain_nodes(self) -> int:
        return int(self.max_nodes_per_domain.value)

    @property
    def node_gpus(self) -> int:
        return int(self.gpus_per_node.value)

    @property
    def domain_gpus(self) -> int:
        """The GPUs of a full NVLink domain: 8 on an HGX board, 72 on an NVL72."""
        return self.domain_nodes * self.node_gpus

    @property
    def rack_scale(self) -> bool:
        """Its NVLink domain spans several nodes (trays)."""
        return self.domain_nodes > 1


_OPTIONAL = {f.name for f in dataclasses.fields(System) if f.default is None}


def _system(key: str, raw: dict[str, Any], sources: dict, gpus: set[str]) -> System:
    where = f"systems.yaml:{key}"
    values = _figures(raw, sources, where)
    pending = tuple(values.pop("to_be_measured", ()) or ())
    for name in pending:
        if name not in _OPTIONAL:
            raise CatalogError(f"{where}.to_be_measured: {name!r} is not a figure a system has")
        if name in values:
            raise CatalogError(f"{where}.{name}: given and listed as to be measured")
    if values.get("gpu") not in gpus:
        raise CatalogError(f"{where}.gpu: {values.get('gpu')!r} is not a GPU model of gpus.yaml")
    if values.get("host_arch") not in ARCHES:
        raise CatalogError(f"{where}.host_arch: one of {', '.join(ARCHES)}")
    try:
        return System(key=key, to_be_measured=pending, **values)
    except TypeError as exc:
        raise CatalogError(f"{where}: {exc}") from None


@cache
def load_systems() -> dict[str, System]:
    doc = _read("systems.yaml")
    src = _sources(doc, "systems.yaml")
    gpus = set(load_catalog().gpus)
    return {k: _system(k, raw, src, gpus) for k, raw in doc["systems"].items()}


def system_of_gpu(gpu_key: str | None) -> System | None:
    """The one system a GPU model is sold in, where it is only one (GB200: the NVL72); None
    for a model sold in several forms or in none the catalog describes."""
    found = [s for s in load_systems().values() if s.gpu == gpu_key]
    return found[0] if len(found) == 1 else None
