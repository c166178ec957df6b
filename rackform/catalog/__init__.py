"""The hardware catalog: GPU models, as data with dated sources, and the loader every catalog
file uses (a target's own, e.g. AWS's instance types in the AWS target's catalog, too).

The figures live in YAML beside this module (`gpus.yaml`, and the rules' figures). Every number
is written `{v: value, src: key}` and the loader refuses one whose source is missing or undated,
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
    # The serving smoke job's MBU floor (percent of hbm_tbps), calibrated from this project's
    # measured runs on this GPU; None where none was measured (still to be measured).
    serving_mbu_pct_min: Figure | None = None
    # NVLink links per GPU and the PCIe generation it runs at: what the host checks want up
    # (None: not checked, e.g. an NVLink bridge that is optional on a PCIe card).
    nvlinks: Figure | None = None
    pcie_gen: Figure | None = None


@dataclass(frozen=True)
class InstanceType:
    """A machine type a target rents by the hour (its figures from the target's own catalog,
    e.g. AWS's `instances.yaml`)."""

    key: str
    gpu: str
    gpus: Figure
    efa_interfaces: Figure
    network_cards: Figure
    nvme_drives: Figure
    nvme_drive_gb: Figure
    nvme_write_gbps_per_drive: Figure
    # None where the provider publishes no on-demand price (capacity blocks only).
    on_demand_usd_hr: Figure | None
    capacity_block_usd_hr: Figure | None = None
    priced_in: tuple[str, ...] = ()  # the regions the prices are for
    vcpus: Figure | None = None  # what the provider's vCPU-based quotas count
    memory_gib: Figure | None = None
    arch: str = "x86_64"  # the CPU architecture its machine images are built for (or arm64)
    # The provider's quota codes (AWS Service Quotas) launching it on each market draws on,
    # market -> code, with their source.
    quota_codes: dict[str, str] | None = None
    quota_source: Source | None = None

    @property
    def gpu_count(self) -> int:
        return int(self.gpus.value)


@dataclass(frozen=True)
class Catalog:
    """The GPU models every target shares (a target's own figures are in its package)."""

    gpus: dict[str, GpuModel]

    def gpu(self, key: str) -> GpuModel:
        return self.gpus[key]


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


def _read(name: str, package: str = __package__) -> dict[str, Any]:
    """A catalog file `name` shipped in `package` (this one by default)."""
    text = resources.files(package).joinpath(name).read_text(encoding="utf-8")
    return yaml.safe_load(text)


@cache
def load_catalog() -> Catalog:
    gdoc = _read("gpus.yaml")
    gsrc = _sources(gdoc, "gpus.yaml")
    gpus = {
        key: GpuModel(key=key, **_figures(raw, gsrc, f"gpus.yaml:{key}"))
        for key, raw in gdoc["gpus"].items()
    }
    _check_device_names(gpus)
    return Catalog(gpus)


def _check_device_names(gpus: dict[str, GpuModel]) -> None:
    """Each model's device-name pattern is a regular expression Python can compile."""
    for g in gpus.values():
        try:
            re.compile(g.device_name)
        except re.error as exc:
            raise CatalogError(f"gpus.yaml:{g.key}.device_name: {exc}") from None
