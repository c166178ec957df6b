"""The AWS target's part of the running world: Ansible logs in as the image's user through the
stack's EC2 Instance Connect Endpoint, the AWS provider's region is stack config that must agree
with the blueprint, `AwsCluster` creates the nodes, and `AwsReaper` acts on an idle cluster."""

from __future__ import annotations

from collections.abc import Mapping

from rackform.plan.model import Basis, Plan
from rackform.stack.errors import ProgramError
from rackform.targets.aws.images import IMAGES
from rackform.targets.aws.reap import AwsReaper
from rackform.targets.runtime import ImageNotBuilt, ReplaceRules, TargetRuntime


class AwsRuntime(TargetRuntime):
    type = "aws"
    label = "AWS"
    node_types = ("aws:ec2/instance:Instance", "aws:autoscaling/group:Group")
    init_notes = (
        "Pulumi's AWS provider takes credentials as any AWS tool does (`AWS_PROFILE`, or "
        "`AWS_ACCESS_KEY_ID` and `AWS_SECRET_ACCESS_KEY`); the region is the blueprint's."
    )
    after_up = (
        "On AWS the roles run inside `up` (the nodes come from the stack), not through "
        "`rackform configure`."
    )

    def ssh_user(self, target) -> str:
        return IMAGES[target.ami.image].ssh_user

    def role_vars(self, plan: Basis) -> Mapping[str, object]:
        """On an image that preinstalled the driver and mounts the instance store itself (the
        DLAMI), the roles adopt the driver (refusing a second branch) and use or replace its
        array, as the blueprint says. On spot capacity, Slurm's nodes watch for their
        interruption notice (`slurm_spot_agent`)."""
        image = plan.target_plan.image
        out: dict[str, object] = {}
        if plan.scheduler is not None:
            # EC2 reclaims a spot instance with a two-minute notice in the instance metadata
            # (EC2 user guide, "Spot Instance interruption notices"): the agent drains the node
            # and has its job checkpoint and requeue. Off elsewhere, where no notice comes.
            out["slurm_spot_agent"] = plan.target.market == "spot"
        if image.preinstalled:
            out |= {
                "nvidia_driver_adopt_preinstalled": True,
                "nvme_raid_preexisting_mount": image.instance_store_mount,
                "nvme_raid_preexisting_action": plan.target.ami.instance_store,
            }
        return out

    def inventory_vars(self, plan: Basis) -> Mapping[str, object]:
        """The nodes have no public address and no inbound port from the internet: the
        controller's SSH goes through the stack's EC2 Instance Connect Endpoint, tunnelled by
        the AWS CLI (`aws ec2-instance-connect open-tunnel`, AWS CLI v2; EC2 user guide,
        "Connect to an instance using EC2 Instance Connect Endpoint"). Each node's instance id
        comes with the stack's outputs (`rackform_instance_id`)."""
        return {
            # The image's login user (ubuntu) is not root: the roles act as root through sudo,
            # which Ubuntu's cloud images give cloud-init's default user without a password
            # (/etc/cloud/cloud.cfg, system_info.default_user: sudo ALL=(ALL) NOPASSWD:ALL).
            "ansible_become": True,
            # The instances the stack just launched boot first: the roles wait for their SSH.
            "rackform_wait_for_nodes_s": 600,
            "rackform_ssh_proxy": (
                "aws ec2-instance-connect open-tunnel --region "
                f"{plan.target.region} --instance-id {{{{ rackform_instance_id }}}}"
            ),
        }

    def node_image_targets(self, plan: Plan) -> list[str]:
        """The node image's Image Builder resources (rackform/targets/aws/node_image.py, every
        child of its component) and the artifact its build fetches: a targeted update builds the
        image (where what it is built from changed, or it does not exist yet) and changes no
        launch template, so no node is replaced until the next `up`."""
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

    def stack_config(self, target) -> Mapping[str, str]:
        return {"aws:region": target.region}

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

    def data_pieces(self, plan):
        from rackform.targets.aws.data_layout import pieces

        return pieces(plan)

    def find_kept(self, plan, pieces):
        from rackform.targets.aws.adopt import Finder

        return Finder().find(plan, pieces)

    def replace_rules(self) -> ReplaceRules:
        """pulumi-aws's rules (`replaces.py`), and the stack's own dynamic resources', which
        their providers' `diff` decides: new keys only for another cluster, a new image pin
        only for another image kind or id."""
        from rackform.targets.aws.image_pin import PIN_IDENTITY
        from rackform.targets.aws.replaces import REPLACED_BY, ROLLS, VERSIONED

        dynamic = "pulumi-python:dynamic/rackform:"
        return ReplaceRules(
            {
                **REPLACED_BY,
                f"{dynamic}NodeKeys": {"cluster": "rackform/targets/aws/access.py diff"},
                f"{dynamic}ImagePin": dict.fromkeys(
                    PIN_IDENTITY, "rackform/targets/aws/image_pin.py diff"
                ),
            },
            VERSIONED,
            ROLLS,
        )

    def replacement(self, plan: Plan, resources):
        """The blueprint's rollout strategy (compile.py `rollout`): standalone instances that
        Pulumi deletes before it creates (in parallel: all at once), or a group's instance
        refresh, terminating within the out-of-service budget or launching first."""
        strategy = plan.target_plan.rollout
        first = [
            r["name"] for r in resources if (r.get("options") or {}).get("delete_before_replace")
        ]
        nodes = [r for r in resources if r["type"] == "aws:ec2/instance:Instance"]
        if strategy == "delete-first" and nodes:
            downtime = (
                f"a change that replaces the nodes deletes all {len(nodes)} first (Pulumi replaces "
                "them in parallel): the cluster is down until the new nodes boot and Configure "
                "and Validate finish, and needs no capacity beyond its own"
            )
        elif strategy == "delete-first":
            budget = plan.lifecycle.budget(plan.nodes)
            downtime = (
                "an instance refresh terminates before it launches: at most the out-of-service "
                f"budget ({budget} of {plan.nodes} nodes, lifecycle.max_out_of_service) is out "
                "at a time, and no capacity beyond the group's own is needed"
            )
        else:
            downtime = (
                "replacements launch and configure before the old nodes go: no downtime, but up "
                "to twice the capacity (and vCPU quota) while it runs"
            )
        return {
            "strategy": strategy,
            "why": plan.target_plan.rollout_why,
            "downtime": downtime,
            "delete_first": first,
        }

    def offline_answers(self):
        from rackform.targets.aws.offline import ANSWERS

        return ANSWERS

    def reach(self, plan: Plan, name: str, identity=None, known_hosts=None):
        """The stack's instances, found by the cluster's tags, through its EC2 Instance Connect
        Endpoint (rackform/targets/aws/instances.py)."""
        from rackform.targets.aws.instances import Instances

        return Instances().reach(plan, name, identity, known_hosts)

    def nodes(self, plan: Plan):
        from rackform.targets.aws.instances import Instances

        return Instances().nodes(plan)

    def check_boot(self, plan: Plan, groups, how) -> None:
        """Nothing to refuse: the nodes fetch their artifact from the stack's bucket."""

    def await_boot(self, plan: Plan, groups, how):
        """The groups' in-service instances tagged with their pinned artifact, read from Auto
        Scaling and EC2 (rackform/targets/aws/configured.py)."""
        from rackform.targets.aws.bootstrap import group_artifact
        from rackform.targets.aws.configured import Configured
        from rackform.targets.aws.names import asg_name

        pins = {g.name: group_artifact(plan, g, asg_name(plan, g)).sha256 for g in groups}
        return Configured().wait(plan, groups, pins, how.deadline_s, how.poll_s)

    def replace(self, plan: Plan, node: str) -> str:
        from rackform.targets.aws.instances import Instances

        return Instances().replace(plan, node)

    def reaper(self) -> AwsReaper:
        return AwsReaper()


RUNTIME = AwsRuntime()
