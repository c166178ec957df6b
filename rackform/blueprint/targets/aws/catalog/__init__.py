"""AWS's own catalog: its GPU instance types (`instances.yaml`: GPUs, EFA interfaces, NVMe drives,
prices) and the Regions the provider accepts (`regions.yaml`), with the default quotas a stack draws
on (`quotas.yaml`). Read with the shared catalog's loader: every figure with its dated source, and
each instance type's GPU a model of the shared catalog."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache

from rackform.catalog import (
    CatalogError,
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

    def instance(self, key: str) -> InstanceType:
        return self.instances[key]


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
    instances = {
        key: InstanceType(key=key, priced_in=priced, **_figures(raw, isrc, f"instances.yaml:{key}"))
        for key, raw in idoc["instances"].items()
    }
    gpus = load_catalog().gpus
    for it in instances.values():
        if it.gpu not in gpus:
            raise CatalogError(f"instances.yaml:{it.key}: unknown gpu {it.gpu!r}")
    return AwsCatalog(instances, regions, rsrc[rdoc["source"]])
