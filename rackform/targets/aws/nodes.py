"""One AWS node group: its launch template, and either one instance per node (training: in the
cluster placement group, every EFA interface attached) or an autoscaling group (inference: no
placement group, no EFA)."""

from __future__ import annotations

import base64
import math

import pulumi
import pulumi_aws as aws

from rackform.blueprint.targets.aws.names import asg_name, node_names
from rackform.plan.model import NodeGroupPlan, Plan
from rackform.stack.outputs import gathered
from rackform.targets.aws.bootstrap import HOOK, HOOK_TIMEOUT_S
from rackform.targets.aws.node_instance import NodeInstance
from rackform.targets.aws.tags import LAUNCH_TAGGED, asg_tags, aws_tags

SSH_PORT = 22
# Root EBS volume of every node. The DLAMI root is /dev/sda1 and needs ~100 GB; drivers, CUDA and
# the smoke job's Python environment take the rest. Instance-store NVMe is not mapped here: it
# is left unformatted for the nvme_raid role.
ROOT_DEVICE = "/dev/sda1"
ROOT_GB = 200
# The nodes' root volume, as launch templates and the node image's recipe map it.
ROOT_VOLUME = {
    "device_name": ROOT_DEVICE,
    "ebs": {
        "volume_size": ROOT_GB,
        "volume_type": "gp3",
        "encrypted": "true",
        "delete_on_termination": "true",
    },
}


def efa_interfaces(efa: int, cards: int, subnet_id, security_group_id) -> list[dict]:
    """The launch template's network interfaces for `efa` EFA devices, one per network card.

    Network card 0, device index 0 is the primary interface: an EFA with ENA, because an
    EFA-only interface cannot be primary. Every further card gets an EFA-only interface at device
    index 1, which carries RDMA traffic only and uses no IP address (AWS EC2 user guide,
    "Maximize network bandwidth on instances with multiple network cards"; p5.48xlarge has 32).
    The guide's newer variant (an ENA primary plus an EFA-only interface at card 0 device 1)
    reaches the same 32 EFA devices with one more interface; this layout keeps one per card.
    """
    if efa > cards:
        raise ValueError(f"{efa} EFA interfaces do not fit on {cards} network cards")
    common = {"subnet_id": subnet_id, "security_groups": [security_group_id]}
    primary = {
        "network_card_index": 0,
        "device_index": 0,
        "interface_type": "efa" if efa else "interface",
        "delete_on_termination": "true",
        **common,
    }
    rest = [
        {
            "network_card_index": card,
            "device_index": 1,
            "interface_type": "efa-only",
            "delete_on_termination": "true",
            **common,
        }
        for card in range(1, efa)
    ]
    return [primary, *rest]


def market_options(group: NodeGroupPlan) -> dict[str, object]:
    """Launch-template arguments for how the group's capacity is bought (its own market, else
    the target's: the plan resolved which)."""
    reservation = {"capacity_reservation_target": {"capacity_reservation_id": group.reservation_id}}
    if group.market == "spot":
        # One-time spot that terminates on interruption: a cluster placement group refuses spot
        # instances that stop or hibernate, and the job resumes from its last checkpoint.
        return {
            "instance_market_options": {
                "market_type": "spot",
                "spot_options": {
                    "spot_instance_type": "one-time",
                    "instance_interruption_behavior": "terminate",
                },
            }
        }
    if group.market == "capacity-block":
        return {
            "instance_market_options": {"market_type": "capacity-block"},
            "capacity_reservation_specification": reservation,
        }
    if group.market == "reservation":
        return {"capacity_reservation_specification": reservation}
    return {}


def identity_tags(
    plan: Plan, group: NodeGroupPlan, name: str, artifact_sha: str | None = None
) -> dict[str, str]:
    """The launch template's tags: what a node is, and nothing that a cosmetic edit changes
    (owner, idle policy, digest). A new template version replaces training instances (the
    provider's instance docs: changing `launch_template` forces a new instance), so only a change
    to what a node is may make one; the cluster's other tags go on the instances and the
    autoscaling group directly, where they update in place."""
    return {
        "rackform:cluster": plan.name,
        "rackform:environment": plan.environment,
        "rackform:purpose": plan.purpose,
        "rackform:node-group": group.name,
        "rackform:driver-branch": plan.software.driver_branch,
        # A joining node's configuration: its user data fetches this artifact, so a new one is
        # a new template version and an instance refresh (named here, since the user data is
        # known only after `up`, when the stack's keys exist).
        **({"rackform:artifact": artifact_sha} if artifact_sha else {}),
        "Name": name,
    }


class AwsNodeGroup(pulumi.ComponentResource):
    """Launch template plus instances (training) or an autoscaling group (inference)."""

    nodes: pulumi.Output  # list of [name, private address, ssh port, instance id]
    resources: list[pulumi.Resource]

    def __init__(
        self,
        name: str,
        plan: Plan,
        group: NodeGroupPlan,
        *,
        ami: pulumi.Input[str],
        subnet: aws.ec2.Subnet,
        security_group: aws.ec2.SecurityGroup,
        instance_profile: aws.iam.InstanceProfile,
        placement_group: pulumi.Input[str] | None,
        user_data: pulumi.Input[str],
        artifact_sha: str | None = None,
        opts: pulumi.ResourceOptions | None = None,
    ):
        super().__init__("rackform:aws:NodeGroup", name, None, opts)
        target = plan.target
        training = plan.purpose == "training"
        it = group.instance
        network: dict[str, object]
        if training:
            network = {
                "network_interfaces": efa_interfaces(
                    group.efa_interfaces,
                    int(it.network_cards.value),
                    subnet.id,
                    security_group.id,
                )
            }
        else:
            network = {"vpc_security_group_ids": [security_group.id]}
        lt_name = f"{name}-lt"
        identity = identity_tags(plan, group, name, artifact_sha)
        self.launch_template = aws.ec2.LaunchTemplate(
            lt_name,
            description=f"rackform {plan.stack} node group {group.name}",
            image_id=ami,
            instance_type=it.key,
            key_name=target.key_name,
            iam_instance_profile={"arn": instance_profile.arn},
            # A group on reserved capacity launches where its reservation is, never into the
            # placement group the stack created for the cluster's other groups.
            placement=(
                {"group_name": placement_group}
                if placement_group and not (group.reserved and plan.target_plan.placement_group)
                else None
            ),
            metadata_options={
                "http_endpoint": "enabled",
                "http_tokens": "required",  # IMDSv2 only
                # One hop: the instance itself. The user data read there carries the cluster's
                # host key (docs/operations/security.md, "Boot reports"); a container on a bridge
                # network is a second hop and gets no IMDSv2 token, so it reads neither that nor
                # the instance role's credentials. Nothing rackform runs on a node needs more:
                # the bootstrap, the SSM agent and the Slurm spot agent are host processes, and
                # dcgm-exporter's container has the host's network.
                "http_put_response_hop_limit": 1,
            },
            block_device_mappings=[ROOT_VOLUME],
            user_data=pulumi.Output.from_input(user_data).apply(
                lambda text: base64.b64encode(text.encode()).decode() if text else None
            ),
            update_default_version=True,
            tag_specifications=[
                {"resource_type": kind, "tags": identity} for kind in LAUNCH_TAGGED
            ],
            tags=identity,
            **network,
            **market_options(group),
            # No ignore_changes: the image is pinned by ImagePin (a newer image of the same kind
            # changes nothing, a new kind is a new version, planned and shown).
            opts=pulumi.ResourceOptions(parent=self),
        )
        version = self.launch_template.latest_version.apply(str)
        template = {"id": self.launch_template.id, "version": version}
        if training:
            self._instances(plan, group, template)
        else:
            self._autoscaling_group(name, plan, group, template, subnet, artifact_sha)
        self.register_outputs({"launch_template_id": self.launch_template.id, "nodes": self.nodes})

    def _instances(self, plan, group, template) -> None:
        # Pulumi replaces create-before-delete by default: 4 nodes would need 8 at once, which a
        # placement group or reservation sized to the cluster cannot hold. delete-first takes
        # the old node down first (Pulumi docs, resource option `deleteBeforeReplace`).
        first = plan.target_plan.rollout == "delete-first"
        # The names the plan gave Slurm's nodes (`names.node_names`), and the
        # inventory's host names through the `nodes` output.
        names = node_names(plan.stack, group.name, group.count)
        instances = [
            NodeInstance(
                n,
                launch_template=template,
                # The cluster's tags, owner and idle policy included: updated in place.
                tags=aws_tags(plan, n),
                opts=pulumi.ResourceOptions(parent=self, delete_before_replace=first),
            )
            for n in names
        ]
        self.resources = list(instances)
        # Gathered once over every instance's two scalars (an Output.all per instance inside
        # another would copy each pair again: `stack.outputs`).
        self.nodes = gathered([out for x in instances for out in (x.private_ip, x.id)]).apply(
            lambda flat: [
                [n, ip, SSH_PORT, iid]
                for n, ip, iid in zip(names, flat[::2], flat[1::2], strict=True)
            ]
        )

    def _autoscaling_group(self, name, plan, group, template, subnet, artifact_sha) -> None:
        asg = aws.autoscaling.Group(
            name,
            # Named, not auto-named: a joining node's user data names its group to complete
            # the launch hook, and the template is made before the group.
            name=asg_name(plan, group),
            min_size=group.min_nodes,
            max_size=group.max_nodes,
            desired_capacity=group.count,
            vpc_zone_identifiers=[subnet.id],
            launch_template=template,
            # A node joins in Pending:Wait and stays there, out of service and out of scale-in,
            # until its bootstrap completes the hook (CONTINUE) or the timeout abandons it
            # (Auto Scaling user guide, "Amazon EC2 Auto Scaling lifecycle hooks").
            initial_lifecycle_hooks=[
                {
                    "name": HOOK,
                    "lifecycle_transition": "autoscaling:EC2_INSTANCE_LAUNCHING",
                    "heartbeat_timeout": HOOK_TIMEOUT_S,
                    "default_result": "ABANDON",
                }
            ],
            health_check_type="EC2",
            # Counted from InService, after the hook: a freshly configured node's first checks.
            health_check_grace_period=300,
            # A template change (image, driver branch, roles) rolls the group, each new node
            # configuring itself before it takes traffic (refresh_preferences).
            instance_refresh={
                "strategy": "Rolling",
                "preferences": refresh_preferences(plan, group.count),
            },
            wait_for_capacity_timeout=f"{HOOK_TIMEOUT_S // 60 + 10}m",
            tags=asg_tags(plan, name),
            # The autoscaler (or an operator scaling by hand) owns the live size; the
            # blueprint's count is only the size to start with. Without this every `up`
            # would reset a scaled-out serving fleet back to `count`.
            opts=pulumi.ResourceOptions(parent=self, ignore_changes=["desiredCapacity"]),
        )
        self.resources = [asg]

        # The cluster's nodes are the group's running instances that finished configuring
        # themselves with this artifact (they tag themselves): not one still in Pending:Wait,
        # nor one terminating. Right after a new artifact starts an instance refresh none carries
        # it yet, and the group still serves from the previous artifact's nodes: those are the
        # nodes then (`serving_nodes`), so Configure never sees an empty cluster mid-rollout.
        def lookup(tags: dict, filters: list | None = None):
            return aws.ec2.get_instances_output(
                instance_tags={"aws:autoscaling:groupName": asg.name, **tags},
                filters=filters,
                instance_state_names=["running"],
                opts=pulumi.InvokeOutputOptions(parent=self, depends_on=[asg]),
            )

        current = lookup({"rackform:configured": artifact_sha or ""})
        configured = lookup({}, [{"name": "tag-key", "values": ["rackform:configured"]}])
        self.nodes = pulumi.Output.all(
            current.ids, current.private_ips, configured.ids, configured.private_ips
        ).apply(lambda found: serving_nodes(*found))


def serving_nodes(ids, ips, any_ids, any_ips) -> list[list]:
    """[[name, address, port, instance id]] of the instances configured with this artifact, or,
    while none is (an instance refresh has just begun), of those configured with any."""
    if not ids:
        ids, ips = any_ids, any_ips
    return [[i, ip, SSH_PORT, i] for i, ip in zip(ids, ips, strict=True)]


def refresh_preferences(plan: Plan, count: int) -> dict[str, int]:
    """An instance refresh's healthy-percentage bounds. create-first: 100% of the desired
    capacity stays in service and up to 200% may run, so a replacement launches (and
    configures itself) before the node it replaces terminates; delete-first: at most the
    desired capacity runs, and the share that must stay in service leaves out no more nodes
    than the cluster's out-of-service budget (lifecycle.max_out_of_service, the one heal and
    rolling changes keep to), rounded up. RefreshPreferences (Amazon EC2 Auto Scaling API
    reference): MinHealthyPercentage 0-100, default 90; MaxHealthyPercentage 100-200, and their
    difference may not exceed 100; at 100% the refresh replaces one instance at a time
    ("Understand the default values for an instance refresh", Auto Scaling user guide)."""
    if plan.target_plan.rollout == "create-first":
        return {"min_healthy_percentage": 100, "max_healthy_percentage": 200}
    n = max(count, 1)
    out = min(plan.lifecycle.budget(plan.nodes), n)
    return {"min_healthy_percentage": math.ceil(100 * (n - out) / n), "max_healthy_percentage": 100}
