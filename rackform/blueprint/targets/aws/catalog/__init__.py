"""AWS's own catalog: its GPU instance types (`instances.yaml`: GPUs, EFA interfaces, NVMe drives,
prices) and the Regions the provider accepts (`regions.yaml`), with the default quotas a stack draws
on (`quotas.yaml`). Read with the shared catalog's loader: every figure with its dated source, and
each instance type's GPU a model of the shared catalog."""

from __future__ import annotations

from dataclasses import dataclass
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


@dataclass(frozen=True)
class AwsCatalog:
    instances: dict[str, InstanceType]
    regions: tuple[str, ...]  # AWS region codes
    regions_source: Source
    # Minutes before a capacity block's end date its instances begin to be terminated.
    capacity_block_end_lead_min: Figure

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
    return AwsCatalog(instances, regions, rsrc[rdoc["source"]], lead)
