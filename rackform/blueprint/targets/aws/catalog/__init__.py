"""AWS's own catalog: its GPU instance types (`instances.yaml`: GPUs, EFA interfaces, NVMe drives,
prices) and its UltraServers (instances joined in one NVLink domain, bought as a capacity block) and the Regions the provider accepts (`regions.yaml`), with the default quotas a stack draws
on (`quotas.yaml`). Read with the shared catalog's loader: every figure with its dated source, and
each instance type's GPU a model of the shared catalog."""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cache

from rackform.catalog import (
    CatalogError,
    Figure,
    InstanceType,
    Source,
    _figures,
    _read,
    _sources,
    load_catalog,
)
from rackform.catalog.systems import load_systems


@dataclass(frozen=True)
class UltraServer:
    """Instances of one type joined in one NVLink domain, bought as one Capacity Block (EC2
    UltraServers: P6e-GB200). Its capacity block is its NVLink domain: `instances` instances
    of `instance_type` (`domain_source` says so), part or all of a `system` of systems.yaml."""

    key: str  # AWS's UltraServer type, e.g. u-p6e-gb200x72
    instance_type: str
    gpu: str
    system: str
    instances: Figure
    gpus_per_instance: Figure
    domain_source: Source
    arch: str
    # None: no price recorded (capacity blocks are priced per block, not listed here yet).
    capacity_block_usd_hr: Figure | None = None

    @property
    def domain_instances(self) -> int:
        """The instances of one NVLink domain: the UltraServer's, its capacity block's."""
        return int(self.instances.value)

    @property
    def domain_gpus(self) -> int:
        return self.domain_instances * int(self.gpus_per_instance.value)


@dataclass(frozen=True)
class AwsCatalog:
    instances: dict[str, InstanceType]
    regions: tuple[str, ...]  # AWS region codes
    regions_source: Source
    # Minutes before a capacity block's end date its instances begin to be terminated.
    capacity_block_end_lead_min: Figure
    ultraservers: dict[str, UltraServer] = field(default_factory=dict)

    def instance(self, key: str) -> InstanceType:
        return self.instances[key]


# The CPU architectures EC2 names (DescribeImages' `architecture`): Grace-based types are arm64.
ARCHES = ("x86_64", "arm64")


def _instance(key: str, raw: dict, sources: dict[str, Source], priced: tuple) -> InstanceType:
    where = f"instances.yaml:{key}"
    raw = dict(raw)
    quotas = dict(raw.pop("quota_codes", None) or {})
    source = None
    if quotas:
        source = sources.get(quotas.pop("src", None))
        if source is None:
            raise CatalogError(f"{where}.quota_codes: needs a src in `sources`")
    arch = raw.get("arch", "x86_64")
    if arch not in ARCHES:
        raise CatalogError(f"{where}.arch: {arch!r} is not one of {', '.join(ARCHES)}")
    fields = _figures(raw, sources, where)
    fields.setdefault("on_demand_usd_hr", None)
    return InstanceType(
        key=key,
        priced_in=priced,
        quota_codes=quotas or None,
        quota_source=source,
        **fields,
    )


# What an UltraServer's NVLink domain is: its capacity block (the only kind EC2 documents).
DOMAIN_KINDS = ("capacity-block",)


def _ultraserver(key: str, raw: dict, sources: dict[str, Source]) -> UltraServer:
    where = f"instances.yaml:ultraservers.{key}"
    raw = dict(raw)
    if raw.pop("nvlink_domain", None) not in DOMAIN_KINDS:
        raise CatalogError(f"{where}.nvlink_domain: one of {', '.join(DOMAIN_KINDS)}")
    domain = sources.get(raw.pop("domain_source", None))
    if domain is None:
        raise CatalogError(f"{where}.domain_source: needs a source in `sources`")
    if raw.get("arch") not in ARCHES:
        raise CatalogError(f"{where}.arch: {raw.get('arch')!r} is not one of {', '.join(ARCHES)}")
    try:
        us = UltraServer(key=key, domain_source=domain, **_figures(raw, sources, where))
    except TypeError as exc:
        raise CatalogError(f"{where}: {exc}") from None
    # Its figures against the system it is built of (the shared catalog's systems.yaml).
    system = load_systems().get(us.system)
    if system is None:
        raise CatalogError(f"{where}.system: {us.system!r} is not a system of systems.yaml")
    if system.gpu != us.gpu or system.node_gpus != int(us.gpus_per_instance.value):
        raise CatalogError(
            f"{where}: {us.gpus_per_instance.value} x {us.gpu} an instance is not a tray of "
            f"{system.key} ({system.node_gpus} x {system.gpu})"
        )
    if not 1 <= us.domain_instances <= system.domain_nodes:
        raise CatalogError(
            f"{where}.instances: {us.domain_instances} is more than one {system.key} domain "
            f"joins ({system.domain_nodes})"
        )
    if (us.arch == "arm64") != (system.host_arch == "arm64"):
        raise CatalogError(
            f"{where}.arch: {us.arch}, but {system.key}'s hosts are {system.host_arch}"
        )
    return us


@cache
def load_aws_catalog() -> AwsCatalog:
    idoc, rdoc = _read("instances.yaml", __package__), _read("regions.yaml", __package__)
    isrc, rsrc = _sources(idoc, "instances.yaml"), _sources(rdoc, "regions.yaml")
    if rdoc.get("source") not in rsrc:
        raise CatalogError("regions.yaml: `source` is not in `sources`")
    regions = tuple(rdoc["regions"])
    priced = tuple(idoc.get("price_regions") or ())
    if not priced or set(priced) - set(regions):
        raise CatalogError(f"instances.yaml: price_regions {list(priced)} are not known regions")
    instances = {key: _instance(key, raw, isrc, priced) for key, raw in idoc["instances"].items()}
    gpus = load_catalog().gpus
    for it in instances.values():
        if it.gpu not in gpus:
            raise CatalogError(f"instances.yaml:{it.key}: unknown gpu {it.gpu!r}")
    lead = _figures(
        {"lead": idoc["capacity_block_end_lead_min"]}, isrc, "instances.yaml:capacity_block"
    )["lead"]
    ultra = {k: _ultraserver(k, raw, isrc) for k, raw in (idoc.get("ultraservers") or {}).items()}
    return AwsCatalog(instances, regions, rsrc[rdoc["source"]], lead, ultra)
