"""The root component of one cluster: its target's nodes (created on AWS, registered where they
already exist), then Configure, then Validate, each depending on the one before. Which target is
the business of the runtime it is handed; this component reads only the plan."""

from __future__ import annotations

import pulumi

from rackform.blueprint.schema.health import HealthPolicy
from rackform.evidence.pin import pin_of
from rackform.evidence.shipped import roles_hash
from rackform.paths import collection
from rackform.plan.inventory import configure_vars, imex_members, with_nodes
from rackform.plan.model import Plan, thaw
from rackform.stack.outputs import applied
from rackform.stack.stages import (
    Configure,
    ConfigureProvider,
    Validate,
    ValidateProvider,
    content_hash,
)
from rackform.stack.target import StackTarget


def validation_input(plan: Plan) -> dict:
    """What the Validate stage checks the cluster against that its nodes do not already hold:
    what the cluster is supposed to have. The thresholds and the smoke job's settings reach the
    nodes once, resolved, through the group variables (the plan's inventory), and whether
    a failure fails `up` is the program's (`validation.strict`). Where the trays of rack-scale
    NVLink domains check their fabric (`imex_members`: the listed trays of an IMEX system),
    `domains`: each such domain's trays, whose cliques the stage compares."""
    trays = imex_members(plan)
    domains = {
        d.name: list(d.nodes) for d in plan.topology.domains if d.nodes and d.nodes[0] in trays
    }
    out = {
        "expected": {
            "nodes": plan.nodes,
            "gpus": plan.gpus,
            "fabric": plan.network.fabric,
            # A node below this share of its group's median is named (lifecycle.health's).
            "outlier_fraction": (plan.lifecycle.health or HealthPolicy()).outlier_fraction,
            "groups": {
                g.name: {
                    "count": g.count,
                    "gpu": g.gpu_key,
                    "gpus_per_node": g.gpus_per_node,
                    # Nodes that configure themselves at boot ran their serving smoke job
                    # there, before they took traffic: the stage never runs it on them.
                    **({"configured": "boot"} if g.configured == "boot" else {}),
                }
                for g in plan.node_groups
            },
        },
    }
    if domains:  # only then: the other clusters' input stays as it was
        out["expected"]["domains"] = domains
    return out


def validate_target(plan: Plan) -> str:
    """The Validate stage's URN, as Pulumi's `--target` takes it (a glob)."""
    return f"urn:pulumi:{plan.stack}::**::{plan.stack}-validate"


class Cluster(pulumi.ComponentResource):
    """One cluster, provisioned, configured and validated in that order."""

    def __init__(
        self,
        name: str,
        plan: Plan,
        runtime: StackTarget,
        *,
        opts: pulumi.ResourceOptions | None = None,
        host_provider=None,
        configure_provider: ConfigureProvider,
        validate_provider: ValidateProvider,
        revalidate: str = "",
        boot: str = "",
        rollout: dict | None = None,
    ):
        props = {
            "cluster": plan.name,
            "environment": plan.environment,
            "purpose": plan.purpose,
            "target": plan.target_type,
            "nodes": plan.nodes,
            "gpus": plan.gpus,
            "digest": plan.digest,
        }
        super().__init__("rackform:cluster:Cluster", name, props, opts)
        child = pulumi.ResourceOptions(parent=self)
        self.target = runtime.component(name, plan, child, {"host": host_provider})
        # Role variables the target learns only from what it creates (FSx for Lustre's DNS and
        # mount names): merged in once known.
        known = getattr(self.target, "role_outputs", None) or {}
        plain = thaw(plan.group_vars)
        variables = (
            pulumi.Output.all(**known).apply(lambda got: {**plain, **got}) if known else plain
        )
        # Configuration installs; it never sees how the cluster is checked (smoke steps,
        # thresholds, the digest), so editing those reruns nothing on live nodes.
        installs = applied(configure_vars, variables)  # (no output of each list and dict in it)
        roles = roles_hash(collection())
        # Slurm's controller where the stack creates one (AWS): a host of the inventory's
        # slurm_controller group, never of gpu_nodes.
        self.slurm_controller = getattr(self.target, "slurm_controller", None)
        # `applied`, not Output.all: no copy of the node list and the inventory (outputs.py).
        inv = applied(
            lambda nodes, controller: with_nodes(plan, nodes, controller),
            self.target.nodes,
            self.slurm_controller,
        )
        # How the controller's SSH reaches nodes the stack created (its key, their host key);
        # None where the user's own SSH setup reaches them (bare metal, colocation).
        access = getattr(self.target, "access", None)
        self.configure = Configure(
            f"{name}-configure",
            {
                "cluster": plan.stack,
                "inventory": inv,
                "group_vars": installs,
                "roles_hash": roles,
                "content_hash": applied(
                    lambda hosts, got: content_hash(roles, got, hosts), inv, installs
                ),
                "expected_nodes": dict(zip(("min", "max"), plan.node_range, strict=True)),
                "access": access,
                # What a change that needs a drain rolls through Slurm with (None: no rolling).
                "rollout": rollout,
            },
            provider=configure_provider,
            opts=pulumi.ResourceOptions(parent=self, depends_on=self.target.node_resources),
        )
        self.validate = Validate(
            f"{name}-validate",
            {
                "cluster": plan.stack,
                "inventory": inv,
                "group_vars": variables,
                "validation": validation_input(plan),
                "digest": plan.digest,
                "configured_hash": self.configure.content_hash,
                "request": revalidate,
                "access": access,
                # `rackform up`'s last wait for the nodes configured at boot, as a check.
                "boot": boot,
                # What the signed statement is about: which stack, and what reached the nodes.
                "attest": {
                    "stack": plan.stack,
                    "cluster": plan.name,
                    "environment": plan.environment,
                    "pin": pin_of(plan, roles),
                },
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
