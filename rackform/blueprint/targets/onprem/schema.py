"""What bare metal and colocation share in the blueprint: hosts that already exist, reached
over SSH, listed per node group with the GPU model and count they carry."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import Field

from rackform.blueprint.schema.base import Cidr, Strict, Violation, closest
from rackform.blueprint.schema.names import LoginName
from rackform.blueprint.schema.scheduler import controller_host_rules
from rackform.blueprint.targets.onprem.host_spec import HostsFields, unique_hosts
from rackform.blueprint.targets.schema import Cluster, TargetSchema
from rackform.catalog import Catalog


class OnPremTarget(Strict):
    ssh_user: Annotated[
        LoginName,
        Field(
            description=(
                "User Ansible and the host checks log in as: a POSIX user name (lowercase "
                "letters, digits, '_' and '-', a letter or '_' first, a '$' last allowed; up to "
                "32). A user other than root becomes root through sudo for the roles "
                "(ansible_become), so it needs sudo without a password."
            )
        ),
    ] = "root"
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


def group_rules(kind: str, groups: list[tuple[int, Any]], catalog: Catalog) -> list[Violation]:
    """Each node group's own rules: they run for every group that parsed, even when the rest
    of the blueprint did not."""
    out: list[Violation] = []
    for i, g in groups:
        out += _group(g, ("node_groups", i), kind, catalog)
    return out


def rules(bp: Cluster, catalog: Catalog) -> list[Violation]:
    out = group_rules(bp.target.type, list(enumerate(bp.node_groups)), catalog)
    return out + unique_hosts(bp.node_groups)


def _group(g: Any, at: tuple, kind: str, cat: Catalog) -> list[Violation]:
    out = []
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
    return out


def idle_rules(bp: Cluster) -> list[Violation]:
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


class OnPremSchema(TargetSchema):
    """What bare metal and colocation share in the schema."""

    group_fields = HostsFields
    fabrics = ("infiniband", "roce", "ethernet")

    def rules(self, bp: Cluster, catalog: Catalog) -> list[Violation]:
        return rules(bp, catalog)

    def group_rules(self, purpose, groups, catalog: Catalog) -> list[Violation]:
        return group_rules(self.type, groups, catalog)

    def scheduler_rules(self, bp: Cluster, catalog: Catalog) -> list[Violation]:
        return controller_host_rules(bp)

    def image_rules(self, bp: Cluster, catalog: Catalog) -> list[Violation]:
        # `image.bake` is a disk image built on this machine (`rackform image build`);
        # the section adds no field here.
        return []

    def idle_actions(self, purpose: str) -> tuple[str, ...]:
        # Owned hardware is never destroyed by a reaper: it is powered off or drained.
        return ("notify", "power-off", "drain")

    def idle_rules(self, bp: Cluster) -> list[Violation]:
        return super().idle_rules(bp) + idle_rules(bp)

    def heal_actions(self) -> tuple[str, ...]:
        # Each host's BMC (Redfish) power-cycles a node that no longer answers.
        return (*super().heal_actions(), "power-cycle")
