"""The AWS target's part of the running world: the stack's region must agree with the blueprint,
`AwsCluster` creates the nodes and `AwsDataTier` the kept file system, the stack's instances are
reached through its EC2 Instance Connect Endpoint (or given up for new ones), the node image is
built by Image Builder in the stack, and `AwsReaper` acts on an idle cluster."""

from __future__ import annotations

from rackform.plan.model import Plan
from rackform.plan.targets.aws.compile import COMPILER
from rackform.stack.errors import ProgramError
from rackform.targets.aws.reap import AwsReaper
from rackform.targets.runtime import ImageNotBuilt, TargetRuntime


class AwsRuntime(TargetRuntime):
    type = "aws"
    label = COMPILER.label

    def node_image_targets(self, plan: Plan) -> list[str]:
        """The node image's Image Builder resources (every child of its component) and the
        artifact its build fetches: a targeted update builds the image (where what it is built
        from changed, or it does not exist yet) and changes no launch template, so no node is
        replaced until the next `up`."""
        if not plan.baked:
            raise ImageNotBuilt(
                f"{plan.source}: the blueprint bakes no node image (image.bake is not true); "
                "nothing was built"
            )
        stack = plan.stack
        return [
            f"urn:pulumi:{stack}::**rackform:aws:NodeImage**",
            f"urn:pulumi:{stack}::**::{stack}-bootstrap-image-artifact",
        ]

    def check_stack_config(self, plan: Plan, setting) -> None:
        """The blueprint is the source of truth; a stack whose aws:region says otherwise would
        create the cluster somewhere the blueprint does not say."""
        region = setting("aws:region")
        if region and region != plan.target.region:
            raise ProgramError(
                f"stack config aws:region is {region} but the blueprint says {plan.target.region}",
                path=("target", "region"),
                fix=f"run `pulumi config set aws:region {plan.target.region}` or fix the blueprint",
            )

    def component(self, name, plan, opts, providers):
        from rackform.targets.aws.cluster import AwsCluster  # pulumi_aws loads only for AWS

        return AwsCluster(f"{name}-aws", plan, opts=opts)

    def data_tier(self, plan, opts, setting):
        from rackform.targets.aws.data_tier import AwsDataTier, adopted

        return AwsDataTier(plan.data_stack, plan, adopt=adopted(setting), opts=opts)

    def find_kept(self, plan, pieces):
        from rackform.targets.aws.adopt import Finder

        return Finder().find(plan, pieces)

    def reach(self, plan: Plan, name: str, identity=None, known_hosts=None):
        """The stack's instances, found by the cluster's tags, through its EC2 Instance Connect
        Endpoint."""
        from rackform.targets.aws.instances import Instances

        return Instances().reach(plan, name, identity, known_hosts)

    def nodes(self, plan: Plan):
        from rackform.targets.aws.instances import Instances

        return Instances().nodes(plan)

    def check_boot(self, plan: Plan, groups, how) -> None:
        """Nothing to refuse: the nodes fetch their artifact from the stack's bucket."""

    def await_boot(self, plan: Plan, groups, how):
        """The groups' in-service instances tagged with their pinned artifact, read from Auto
        Scaling and EC2."""
        from rackform.blueprint.targets.aws.names import asg_name
        from rackform.targets.aws.bootstrap import group_artifact
        from rackform.targets.aws.configured import Configured

        pins = {g.name: group_artifact(plan, g, asg_name(plan, g)).sha256 for g in groups}
        return Configured().wait(plan, groups, pins, how.deadline_s, how.poll_s)

    def observed_vars(self, plan: Plan, inventory):
        """A Slurm training cluster's tree as EC2 places its instances now (the stack's
        InstanceTopology reads the same at `up`), for the nodes of `inventory`."""
        if plan.scheduler is None or plan.purpose != "training":
            return {}
        from rackform.scheduler.remote import RemoteError
        from rackform.targets.aws.api import aws_errors, one_line
        from rackform.targets.aws.topology import TOPOLOGY_VARS, read_topology

        groups = inventory["all"]["children"]["gpu_nodes"]["children"].values()
        nodes = {
            host: entry["rackform_instance_id"]
            for group in groups
            for host, entry in (group.get("hosts") or {}).items()
            if entry.get("rackform_instance_id")
        }
        try:
            got = read_topology(plan.target.region, nodes)
        except aws_errors() as exc:
            raise RemoteError(f"cannot read the instances' placement: {one_line(exc)}") from None
        return {k: got[k] for k in TOPOLOGY_VARS}

    def capacity(self, plan: Plan):
        """The groups' capacity reservations and blocks, from EC2 DescribeCapacityReservations;
        a failed read refuses `up` in one line (nothing is created unchecked)."""
        from rackform.targets.aws.api import aws_errors, one_line
        from rackform.targets.aws.capacity import observe

        try:
            return observe(plan)
        except aws_errors() as exc:
            raise ProgramError(
                f"cannot read the node groups' capacity reservations from EC2: {one_line(exc)}",
                path=("target", "reservation_id"),
                fix="give the deploying credentials ec2:DescribeCapacityReservations",
            ) from None

    def replace(self, plan: Plan, node: str) -> str:
        from rackform.targets.aws.instances import Instances

        return Instances().replace(plan, node)

    def reaper(self) -> AwsReaper:
        return AwsReaper()


RUNTIME = AwsRuntime()
