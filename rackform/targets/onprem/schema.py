"""What bare metal and colocation share in the blueprint: hosts that already exist, reached
over SSH, listed per node group with the GPU model and count they carry."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

from pydantic import Field

from rackform.blueprint.schema.base import Cidr, Strict, Violation, closest
from rackform.blueprint.schema.sections import NodeGroup
from rackform.catalog import Catalog

if TYPE_CHECKING:
    from rackform.blueprint.schema.model import Blueprint


class OnPremTarget(Strict):
    ssh_user: Annotated[str, Field(description="User Ansible and the host checks log in as.")] = (
        "root"
    )
    ssh_port: Annotated[int, Field(description="SSH port of every host.", ge=1, le=65535)] = 22
    private_cidr: Annotated[
        Cidr | None, Field(description="Network the nodes use to reach each other (NCCL traffic).")
    ] = None


class OwnedHardware(Strict):
    """Hardware bought outright: priced as its cost spread over its life."""

    capex_usd_per_gpu: Annotated[
        float | None, Field(description="Hardware cost per GPU, for amortized cost reports.", gt=0)
    ] = None
    amortize_months: Annotated[
        int, Field(description="Months to amortize hardware over.", ge=1)
    ] = 36


def group_rules(
    kind: str, groups: list[tuple[int, NodeGroup]], catalog: Catalog
) -> list[Violation]:
    """Each node group's own rules: they run for every group that parsed, even when the rest
    of the blueprint did not."""
    out: list[Violation] = []
    for i, g in groups:
        out += _group(g, ("node_groups", i), kind, catalog)
    return out


def rules(bp: Blueprint, catalog: Catalog) -> list[Violation]:
    return group_rules(bp.target.type, list(enumerate(bp.node_groups)), catalog)


def _group(g: NodeGroup, at: tuple, kind: str, cat: Catalog) -> list[Violation]:
    out = []
    if g.instance_type:
        out.append(
            Violation(
                (*at, "instance_type"),
                f"instance_type is for AWS, not {kind}",
                "remove it; list hosts and set gpu and gpus_per_node",
            )
        )
    if not g.hosts:
        out.append(
            Violation(
                (*at, "hosts"),
                f"a {kind} node group lists its hosts",
                "add hosts: [{name: ..., address: ...}]",
            )
        )
    if g.count is not None and g.hosts and g.count != len(g.hosts):
        out.append(
            Violation(
                (*at, "count"),
                f"count {g.count} but {len(g.hosts)} hosts listed",
                "remove count (it defaults to the hosts listed) or fix the list",
            )
        )
    if g.gpu is not None and g.gpu not in cat.gpus:
        out.append(
            Violation((*at, "gpu"), f"unknown GPU model {g.gpu!r}", closest(g.gpu, list(cat.gpus)))
        )
    if g.gpu is not None and not g.gpus_per_node:
        out.append(
            Violation(
                (*at, "gpus_per_node"),
                f"gpu {g.gpu} needs gpus_per_node",
                "add gpus_per_node: e.g. 8",
            )
        )
    if g.gpu is None and g.gpus_per_node:
        out.append(
            Violation((*at, "gpu"), "gpus_per_node without a gpu model", "add gpu: e.g. H100-SXM")
        )
    if g.min_count is not None or g.max_count is not None:
        out.append(
            Violation(
                (*at, "min_count" if g.min_count is not None else "max_count"),
                f"{kind} hosts do not autoscale",
                "remove min_count / max_count",
            )
        )
    return out


def idle_rules(bp: Blueprint) -> list[Violation]:
    """power-off reaches each host through its BMC: every host of a GPU group needs one."""
    idle = bp.lifecycle.idle
    if idle is None or idle.action != "power-off":
        return []
    return [
        Violation(
            ("node_groups", i, "hosts", j, "bmc"),
            f"idle action power-off needs a bmc on host {h.name!r}",
            "add bmc: {address: https://..., username_env: ..., password_env: ...}, "
            "or use action: drain or notify",
        )
        for i, g in enumerate(bp.node_groups)
        for j, h in enumerate(g.hosts)
        if h.bmc is None
    ]
