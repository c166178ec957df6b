"""Effective blueprint -> ClusterSpec. Pure: the same effective blueprint always compiles to
the same spec, and nothing here touches a cloud, a host or a disk."""

from __future__ import annotations

from rackform.catalog import load_catalog
from rackform.loader import Effective
from rackform.schema import AwsTarget, NodeGroup
from rackform.spec import ClusterSpec, HostSpec, NodeGroupSpec


def idle_policy_tag(effective: Effective) -> str:
    """The idle policy as a tag value, e.g. `util-below=10/for=120m/action=destroy`. Written
    only with characters every AWS service accepts in a tag value (letters, digits, spaces and
    _ . : / = + - @; IAM refuses the rest), so one value serves every resource."""
    idle = effective.blueprint.lifecycle.idle
    if idle is None:
        return "none"
    return f"util-below={idle.gpu_util_below_pct:g}/for={idle.for_minutes}m/action={idle.action}"


def stack_name(effective: Effective) -> str:
    return f"{effective.blueprint.name}-{effective.environment}"


def _group(g: NodeGroup, bp, aws: bool) -> NodeGroupSpec:
    cat = load_catalog()
    if aws:
        it = cat.instance(g.instance_type)
        # Launch templates attach every EFA interface the type has, and only with an EFA fabric.
        efa = int(it.efa_interfaces.value) if bp.network.fabric == "efa" else 0
        return NodeGroupSpec(
            name=g.name,
            count=g.count,
            gpu=it.gpu,
            gpus_per_node=it.gpu_count,
            instance_type=it.key,
            hosts=(),
            min_count=g.min_count,
            max_count=g.max_count,
            efa_interfaces=efa,
            nvme_drives=int(it.nvme_drives.value),
        )
    port = bp.target.ssh_port
    hosts = tuple(
        HostSpec(
            h.name,
            h.address,
            h.port or port,
            h.rack,
            tuple(h.nvme or bp.storage.checkpoint.devices),
        )
        for h in g.hosts
    )
    return NodeGroupSpec(
        name=g.name,
        count=len(hosts),
        gpu=g.gpu,
        gpus_per_node=g.gpus_per_node or 0,
        instance_type=None,
        hosts=hosts,
        min_count=None,
        max_count=None,
        efa_interfaces=0,
        nvme_drives=len(bp.storage.checkpoint.devices),
    )


def compile_cluster(effective: Effective) -> ClusterSpec:
    bp = effective.blueprint
    aws = isinstance(bp.target, AwsTarget)
    tags = (
        ("rackform:cluster", bp.name),
        ("rackform:purpose", bp.purpose),
        ("rackform:environment", effective.environment),
        ("rackform:owner", bp.owner),
        ("rackform:idle-policy", idle_policy_tag(effective)),
        ("rackform:protect", "true" if bp.lifecycle.protect else "false"),
        ("rackform:digest", effective.digest),
    )
    return ClusterSpec(
        name=bp.name,
        environment=effective.environment,
        stack=stack_name(effective),
        digest=effective.digest,
        source=effective.source,
        purpose=bp.purpose,
        owner=bp.owner,
        target=bp.target,
        node_groups=tuple(_group(g, bp, aws) for g in bp.node_groups),
        network=bp.network,
        checkpoint=bp.storage.checkpoint,
        software=bp.software,
        workload=bp.workload,
        validation=bp.validation,
        lifecycle=bp.lifecycle,
        tags=tags,
    )
