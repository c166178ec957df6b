"""The colocation target: hosts in racks of a site, each rack with a power budget. A rack whose
GPUs alone draw more than its budget is a blueprint error (it cannot be waived)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Annotated, Any, Literal

from pydantic import Field, model_validator

from rackform.blueprint.schema.base import Strict, Violation, check, closest, repeated
from rackform.blueprint.schema.names import RackName
from rackform.blueprint.targets.onprem.schema import OnPremSchema, OnPremTarget, OwnedHardware
from rackform.blueprint.targets.schema import Cluster
from rackform.catalog import Catalog


class Rack(Strict):
    name: Annotated[RackName, Field(description="Rack name as the site knows it.")]
    power_kw: Annotated[float, Field(description="Power budget of the rack in kW.", gt=0, le=200)]


class ColocationTarget(OnPremTarget, OwnedHardware):
    type: Annotated[Literal["colocation"], Field(description="Hosts in a colocation site.")]
    site: Annotated[str, Field(description="Colocation site / cage identifier.", min_length=1)]
    racks: Annotated[
        tuple[Rack, ...], Field(description="Racks with their power budgets.", min_length=1)
    ]
    usd_per_kw_month: Annotated[
        float | None,
        Field(description="Colocation price per kW of committed power per month.", gt=0),
    ] = None

    @model_validator(mode="after")
    def _unique_racks(self) -> ColocationTarget:
        check(
            [
                Violation(
                    ("racks", i, "name"),
                    f"rack {self.racks[i].name!r} is listed twice",
                    "give every rack a unique name",
                )
                for i in repeated(r.name for r in self.racks)
            ]
        )
        return self


def rack_gpu_kw(racks: Iterable[Rack], groups: Iterable[Any], catalog: Catalog) -> dict[str, float]:
    """GPU power planned into each rack, in kW (catalog watts per GPU x GPUs per host); hosts in
    no declared rack are left out (the rule below names them). The plan's racks and the schema's
    budget rule both come from here."""
    out = {r.name: 0.0 for r in racks}
    for g in groups:
        gpu = catalog.gpus.get(g.gpu or "")
        watts = gpu.power_w.value * (g.gpus_per_node or 0) if gpu else 0.0
        for h in g.hosts:
            if h.rack in out:
                out[h.rack] += watts / 1000
    return {k: round(v, 3) for k, v in out.items()}


def rules(bp: Cluster, catalog: Catalog) -> list[Violation]:
    target = bp.target
    racks = {r.name for r in target.racks}
    out = []
    for i, g in enumerate(bp.node_groups):
        for j, h in enumerate(g.hosts):
            if h.rack not in racks:
                fix = closest(h.rack, list(racks)) if h.rack else "add rack: <name> to the host"
                out.append(
                    Violation(
                        ("node_groups", i, "hosts", j, "rack"),
                        f"host {h.name!r} is in no declared rack",
                        fix,
                    )
                )
    draw = rack_gpu_kw(target.racks, bp.node_groups, catalog)
    for k, r in enumerate(target.racks):
        if draw[r.name] > r.power_kw:
            out.append(
                Violation(
                    ("target", "racks", k, "power_kw"),
                    f"rack {r.name!r} draws {draw[r.name]:.1f} kW of GPU power against a {r.power_kw:g} kW budget",
                    "move hosts to another rack or raise the budget",
                )
            )
    return out


class ColocationSchema(OnPremSchema):
    type = "colocation"
    model = ColocationTarget

    def rules(self, bp: Cluster, catalog: Catalog) -> list[Violation]:
        return super().rules(bp, catalog) + rules(bp, catalog)


SCHEMA = ColocationSchema()
