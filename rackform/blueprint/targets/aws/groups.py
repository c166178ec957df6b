"""What an AWS node group adds to the shared NodeGroup (an instance type from the catalog, and
autoscaling bounds for inference), and the rules each group follows on its own: the rules run
for every group that parsed, even when the rest of the blueprint did not."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import Field

from rackform.blueprint.schema.base import Strict, Violation, closest
from rackform.blueprint.targets.aws.catalog import load_aws_catalog
from rackform.catalog import Catalog


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


def group_rules(
    purpose: str | None, groups: list[tuple[int, Any]], catalog: Catalog
) -> list[Violation]:
    """Each node group's own rules (instance type from the catalog, a count, ...)."""
    out: list[Violation] = []
    for i, g in groups:
        out += _group(g, ("node_groups", i), purpose, catalog)
    return out


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
    instances = load_aws_catalog().instances
    it = instances.get(g.instance_type)
    if it is None:
        return [
            Violation(
                (*at, "instance_type"),
                f"unknown instance type {g.instance_type!r}",
                closest(g.instance_type, list(instances)),
            )
        ]
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
    return out + _autoscaling(g, at, purpose)


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
