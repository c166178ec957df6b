"""The hardware catalog: GPU models and AWS instance types, as data with dated sources.

The figures live in YAML beside this module (`gpus.yaml`, `instances.yaml`). Every number is
written `{v: value, src: key}` and the loader refuses one whose source is missing or undated,
so no figure enters rackform without saying where it came from.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any

import yaml


class CatalogError(Exception):
    """The catalog data itself is malformed (a packaging bug, not a user mistake)."""


@dataclass(frozen=True)
class Source:
    key: str
    title: str
    url: str
    date: str


@dataclass(frozen=True)
class Figure:
    """A number and where it came from."""

    value: float
    source: Source


@dataclass(frozen=True)
class GpuModel:
    key: str
    description: str
    # A regular expression the name the driver reports for this model matches (nvidia-smi's
    # `name`), and no other model's does.
    device_name: str
    memory_gb: Figure
    bf16_dense_tflops: Figure
    hbm_tbps: Figure
    nvlink_gbps: Figure
    power_w: Figure
    nvswitch: bool
    # Single-node (8 GPU) NCCL all-reduce bus bandwidth that public health checks require;
    # None where no calibrated figure is published.
    allreduce_busbw_gbps_8gpu: Figure | None = None
    # The smoke job's MFU floor (percent), calibrated from this project's measured runs of its
    # default preset on this GPU; None where none was measured (still to be measured).
    smoke_mfu_pct_min: Figure | None = None
    # NVLink links per GPU and the PCIe generation it runs at: what the host checks want up
    # (None: not checked, e.g. an NVLink bridge that is optional on a PCIe card).
    nvlinks: Figure | None = None
    pcie_gen: Figure | None = None


@dataclass(frozen=True)
class InstanceType:
    key: str
    gpu: str
    gpus: Figure
    efa_interfaces: Figure
    network_cards: Figure
    nvme_drives: Figure
    nvme_drive_gb: Figure
    nvme_write_gbps_per_drive: Figure
    on_demand_usd_hr: Figure
    capacity_block_usd_hr: Figure | None = None
    priced_in: tuple[str, ...] = ()  # the regions the prices are for

    @property
    def gpu_count(self) -> int:
        return int(self.gpus.value)


@dataclass(frozen=True)
class Catalog:
    gpus: dict[str, GpuModel]
    instances: dict[str, InstanceType]
    regions: tuple[str, ...] = ()  # AWS region codes
    regions_source: Source | None = None

    def gpu(self, key: str) -> GpuModel:
        return self.gpus[key]

    def instance(self, key: str) -> InstanceType:
        return self.instances[key]


def _sources(doc: dict[str, Any], fname: str) -> dict[str, Source]:
    out = {}
    for key, raw in doc.get("sources", {}).items():
        for field in ("title", "url", "date"):
            if not raw.get(field):
                raise CatalogError(f"{fname}: source {key!r} has no {field}")
        out[key] = Source(key, raw["title"], raw["url"], str(raw["date"]))
    return out


def _figures(entry: dict[str, Any], sources: dict[str, Source], where: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for field, raw in entry.items():
        if isinstance(raw, dict) and "v" in raw:
            src = raw.get("src")
            if src not in sources:
                raise CatalogError(f"{where}.{field}: source {src!r} is not in `sources`")
            out[field] = Figure(raw["v"], sources[src])
        elif isinstance(raw, int | float) and not isinstance(raw, bool):
            raise CatalogError(f"{where}.{field}: a number without a source; write {{v:, src:}}")
        else:
            out[field] = raw
    return out


def _read(name: str) -> dict[str, Any]:
    text = resources.files(__package__).joinpath(name).read_text(encoding="utf-8")
    return yaml.safe_load(text)


@cache
def load_catalog() -> Catalog:
    gdoc, idoc, rdoc = _read("gpus.yaml"), _read("instances.yaml"), _read("regions.yaml")
    gsrc, isrc = _sources(gdoc, "gpus.yaml"), _sources(idoc, "instances.yaml")
    rsrc = _sources(rdoc, "regions.yaml")
    if rdoc.get("source") not in rsrc:
        raise CatalogError("regions.yaml: `source` is not in `sources`")
    regions = tuple(rdoc["regions"])
    priced = tuple(idoc.get("price_regions") or ())
    if not priced or set(priced) - set(regions):
        raise CatalogError(f"instances.yaml: price_regions {list(priced)} are not known regions")
    gpus = {
        key: GpuModel(key=key, **_figures(raw, gsrc, f"gpus.yaml:{key}"))
        for key, raw in gdoc["gpus"].items()
    }
    instances = {
        key: InstanceType(key=key, priced_in=priced, **_figures(raw, isrc, f"instances.yaml:{key}"))
        for key, raw in idoc["instances"].items()
    }
    for it in instances.values():
        if it.gpu not in gpus:
            raise CatalogError(f"instances.yaml:{it.key}: unknown gpu {it.gpu!r}")
    _check_device_names(gpus)
    return Catalog(gpus, instances, regions, rsrc[rdoc["source"]])


def _check_device_names(gpus: dict[str, GpuModel]) -> None:
    """Each model's device-name pattern is a regular expression Python can compile."""
    for g in gpus.values():
        try:
            re.compile(g.device_name)
        except re.error as exc:
            raise CatalogError(f"gpus.yaml:{g.key}.device_name: {exc}") from None
