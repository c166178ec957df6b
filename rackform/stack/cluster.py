"""The root component of one cluster: its target (AWS or hosts that exist), then Configure, then
Validate, each depending on the one before."""

from __future__ import annotations

from pathlib import Path

import pulumi

from rackform.plan.inventory import group_vars, inventory
from rackform.targets.onprem.hosts import HostProvider
from rackform.stack.stages import (
    Configure,
    ConfigureProvider,
    Validate,
    ValidateProvider,
    content_hash,
    roles_hash,
)
from rackform.plan.model import ClusterSpec


def validation_input(spec: ClusterSpec) -> dict:
    """What the validator checks against: the blueprint's validation section and what the
    cluster is supposed to have."""
    return {
        **spec.validation.model_dump(mode="json"),
        "expected": {
            "nodes": spec.nodes,
            "gpus": spec.gpus,
            "fabric": spec.network.fabric,
            "groups": {
                g.name: {"count": g.count, "gpu": g.gpu, "gpus_per_node": g.gpus_per_node}
                for g in spec.node_groups
            },
        },
    }


def expected_nodes(spec: ClusterSpec) -> dict[str, int]:
    """How many nodes configuration must find: the count, or for an autoscaling group anything
    between its minimum and maximum (the autoscaler owns the live size)."""
    low = sum(g.min_count if g.min_count is not None else g.count for g in spec.node_groups)
    high = sum(g.max_count if g.max_count is not None else g.count for g in spec.node_groups)
    return {"min": low, "max": high}


class Cluster(pulumi.ComponentResource):
    """One cluster, provisioned, configured and validated in that order."""

    def __init__(
        self,
        name: str,
        spec: ClusterSpec,
        *,
        roles_dir: Path,
        opts: pulumi.ResourceOptions | None = None,
        host_provider: HostProvider | None = None,
        configure_provider: ConfigureProvider | None = None,
        validate_provider: ValidateProvider | None = None,
    ):
        props = {
            "cluster": spec.name,
            "environment": spec.environment,
            "purpose": spec.purpose,
            "target": spec.target.type,
            "nodes": spec.nodes,
            "gpus": spec.gpus,
            "digest": spec.digest,
        }
        super().__init__("rackform:cluster:Cluster", name, props, opts)
        child = pulumi.ResourceOptions(parent=self)
        if spec.target.type == "aws":
            from rackform.targets.aws.cluster import AwsCluster  # pulumi_aws loads only for AWS

            self.target = AwsCluster(f"{name}-aws", spec, opts=child)
        else:
            from rackform.targets.onprem.cluster import OnPremCluster

            self.target = OnPremCluster(f"{name}-hosts", spec, opts=child, provider=host_provider)

        variables = group_vars(spec)
        roles = roles_hash(roles_dir)
        inv = self.target.nodes.apply(
            lambda nodes: inventory(spec, {g: [tuple(n) for n in ns] for g, ns in nodes.items()})
        )
        self.configure = Configure(
            f"{name}-configure",
            {
                "cluster": spec.stack,
                "inventory": inv,
                "group_vars": variables,
                "roles_hash": roles,
                "content_hash": inv.apply(lambda i: content_hash(roles, variables, i)),
                "expected_nodes": expected_nodes(spec),
            },
            provider=configure_provider,
            opts=pulumi.ResourceOptions(parent=self, depends_on=self.target.node_resources),
        )
        self.validate = Validate(
            f"{name}-validate",
            {
                "cluster": spec.stack,
                "inventory": inv,
                "group_vars": variables,
                "validation": validation_input(spec),
                "digest": spec.digest,
                "configured_hash": self.configure.content_hash,
            },
            provider=validate_provider,
            opts=pulumi.ResourceOptions(parent=self, depends_on=[self.configure]),
        )
        self.register_outputs(
            {
                "nodes": self.target.nodes,
                "configured": self.configure.content_hash,
                "validation": self.validate.report,
            }
        )
