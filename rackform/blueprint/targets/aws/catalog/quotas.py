"""AWS's default quotas that each rackform AWS stack draws on (`quotas.yaml`), with their sources:
how many of a resource an account may have per Region or per Availability Zone by default, and
how many one stack of each purpose creates."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from typing import Literal

from rackform.catalog import CatalogError, Figure, _figures, _read, _sources

Scope = Literal["region", "zone"]


@dataclass(frozen=True)
class Quota:
    key: str
    name: str  # as AWS's quota page names it
    scope: Scope
    resource: str  # the Pulumi type token of what one unit of the quota is
    default: Figure
    per_stack: dict[str, Figure]  # purpose -> how many one stack creates

    def used_by(self, purpose: str) -> int:
        return int(self.per_stack[purpose].value)


@cache
def load_quotas() -> tuple[Quota, ...]:
    doc = _read("quotas.yaml", __package__)
    src = _sources(doc, "quotas.yaml")
    out = []
    for key, raw in doc["quotas"].items():
        where = f"quotas.yaml:{key}"
        if raw.get("scope") not in ("region", "zone"):
            raise CatalogError(f"{where}: scope must be region or zone")
        fields = _figures({k: v for k, v in raw.items() if k != "per_stack"}, src, where)
        per_stack = _figures(raw.get("per_stack") or {}, src, f"{where}.per_stack")
        if set(per_stack) != {"training", "inference"} or not isinstance(
            fields.get("default"), Figure
        ):
            raise CatalogError(f"{where}: needs default and per_stack for training and inference")
        out.append(Quota(key=key, per_stack=per_stack, **fields))
    return tuple(out)
