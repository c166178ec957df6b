"""What an AWS node group adds to the shared NodeGroup (an instance type from the catalog,
autoscaling bounds for inference, and how its capacity is bought where it differs from the
target's), and the rules each group follows on its own: the rules run for every group that
parsed, even when the rest of the blueprint did not."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field

from rackform.blueprint.schema.base import Strict, Violation, closest
from rackform.blueprint.targets.aws.catalog import load_aws_catalog
from rackform.catalog import Catalog

# How EC2 capacity is bought, for the target and for a node group of its own.
Market = Literal["on-demand", "spot", "capacity-block", "reservation"]
# Markets whose capacity was bought beforehand and is named by its reservation's id.
RESERVED_MARKETS = ("capacity-block", "reservation")
# A capacity reservation's id (capacity blocks are capacity reservations too): EC2 API
# reference, CapacityReservation.CapacityReservationId, "cr-" and 17 hex digits (8 for older).
RESERVATION_ID = r"^cr-[0-9a-f]{8,17}$"


class AwsGroupFields(Strict):
    instance_type: Annotated[
        str | None, Field(description="AWS instance type from the catalog (AWS only).")
    ] = None
    min_count: Annotated[
        int | None, Field(description="Autoscaling minimum (inference on AWS).", ge=0)
    ] = None
    max_count: Annotated[
        int | None, Field(description="Autoscaling maximum (inference on AWS).", ge=1)
    ] = None
    market: Annotated[
        Market | None,
        Field(
            description="How this group's capacity is bought, where it differs from "
            "target.market (e.g. a capacity block for the GPUs beside on-demand nodes). Default: "
            "the target's market and reservation."
        ),
    ] = None
    reservation_id: Annotated[
        str | None,
        Field(
            description="This group's capacity reservation / capacity block id (cr-...), with "
            "its own market: capacity-block or reservation.",
            pattern=RESERVATION_ID,
        ),
    ] = None


def group_rules(
    purpose: str | None, groups: list[tuple[int, Any]], catalog: Catalog
) -> list[Violation]:
    """Each node group's own rules (instance type from the catalog, a count, ...)."""
    out: list[Violation] = []
    for i, g in groups:
        out += _group(g, ("node_groups", i), purpose, catalog)
    return out


def _not_an_instance(named: str, at: tuple, aws: Any) -> Violation:
    """An instance type the catalog cannot launch: an UltraServer's (named by its instance
    type or its UltraServer type) said so, anything else the nearest names."""
    ultra = [u for k, u in aws.ultraservers.items() if named in (k, u.instance_type)]
    if ultra:
        kinds = ", ".join(f"{u.key} ({u.domain_instances} instances)" for u in ultra)
        return Violation(
            at,
            f"{named!r} is sold only as UltraServers, through Capacity Blocks "
            f"({kinds} of {ultra[0].instance_type}); a node group cannot launch it yet: its EFA "
            "and network-card layout is unconfirmed (docs/operations/limits.md)",
            "use p6-b200.48xlarge (HGX B200) on AWS, or declare the NVL72 racks on bare metal "
            "or colocation",
        )
    return Violation(at, f"unknown instance type {named!r}", closest(named, list(aws.instances)))


def _group(g: Any, at: tuple, purpose: str | None, cat: Catalog) -> list[Violation]:
    out = []
    if not g.instance_type:
        return [
            Violation(
                (*at, "instance_type"),
                "an AWS node group needs an instance_type",
                "add instance_type: e.g. p5.48xlarge",
            )
        ]
    aws = load_aws_catalog()
    instances = aws.instances
    it = instances.get(g.instance_type)
    if it is None:
        return [_not_an_instance(g.instance_type, (*at, "instance_type"), aws)]
    if g.count is None:
        out.append(Violation((*at, "count"), "an AWS node group needs a count", "add count: N"))
    if g.gpu is not None and g.gpu != it.gpu:
        out.append(
            Violation(
                (*at, "gpu"),
                f"{it.key} carries {it.gpu}, not {g.gpu}",
                "remove gpu: it comes from the instance type",
            )
        )
    if g.gpus_per_node is not None and g.gpus_per_node != it.gpu_count:
        out.append(
            Violation(
                (*at, "gpus_per_node"),
                f"{it.key} has {it.gpu_count} GPUs, not {g.gpus_per_node}",
                "remove gpus_per_node: it comes from the instance type",
            )
        )
    return out + _autoscaling(g, at, purpose) + _market(g, at)


def _market(g: Any, at: tuple) -> list[Violation]:
    """A group's own market comes with its own reservation where the market needs one, and a
    reservation id only with a market of its own (the target's market has the target's)."""
    market = getattr(g, "market", None)
    reservation = getattr(g, "reservation_id", None)
    if market is None:
        if reservation is None:
            return []
        return [
            Violation(
                (*at, "reservation_id"),
                "a node group's reservation_id needs the group's own market",
                "add market: capacity-block (or reservation) to the group, or remove "
                "reservation_id (the group then uses the target's)",
            )
        ]
    if market in RESERVED_MARKETS and reservation is None:
        return [
            Violation(
                (*at, "reservation_id"),
                f"market {market!r} needs the group's reservation_id",
                "add reservation_id: cr-... to the group",
            )
        ]
    if market not in RESERVED_MARKETS and reservation is not None:
        return [
            Violation(
                (*at, "reservation_id"),
                f"reservation_id is only used with capacity-block or reservation, not {market!r}",
                "remove reservation_id or change the group's market",
            )
        ]
    return []


def _autoscaling(g: Any, at: tuple, purpose: str | None) -> list[Violation]:
    out = []
    if purpose == "training" and (g.min_count is not None or g.max_count is not None):
        out.append(
            Violation(
                (*at, "min_count" if g.min_count is not None else "max_count"),
                "training node groups do not autoscale",
                "remove min_count / max_count (inference only)",
            )
        )
    if g.min_count is not None and g.max_count is not None and g.min_count > g.max_count:
        out.append(
            Violation(
                (*at, "min_count"),
                f"min_count {g.min_count} exceeds max_count {g.max_count}",
                "lower min_count or raise max_count",
            )
        )
    if g.count is not None:
        if g.min_count is not None and g.count < g.min_count:
            out.append(
                Violation(
                    (*at, "count"),
                    f"count {g.count} is below min_count {g.min_count}",
                    "count is the desired size, between min and max",
                )
            )
        if g.max_count is not None and g.count > g.max_count:
            out.append(
                Violation(
                    (*at, "count"),
                    f"count {g.count} is above max_count {g.max_count}",
                    "count is the desired size, between min and max",
                )
            )
    return out
