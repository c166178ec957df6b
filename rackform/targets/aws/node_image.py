"""The baked node image on AWS (`image.bake`): EC2 Image Builder resources in the stack, built
during `up` (or `rackform image build`), whose AMI the launch templates use instead of the
plain image.

- The build component fetches the bake's artifact from the stack's artifact bucket (the kind a
  node that configures itself fetches: the collection, its roles and the cluster's
  configuration variables) and runs the bake script (`boot.bake`) on it: the site playbook over
  `localhost`, only the tags the plan bakes (`baked_tags`); then it reboots
  (the driver's kernel module loads at boot; the component's Reboot step, after which the next
  step runs: EC2 Image Builder user guide, "Action modules supported by AWSTOE", Reboot),
  converges again, and records what it baked in the image.
- The recipe starts from the pinned base image (`ImagePin`).
- The builder: the stack's subnet and security group (it reaches the artifact through the S3
  gateway endpoint, the package mirrors through the NAT gateway), an instance profile with the
  two managed policies Image Builder's builder needs, AmazonSSMManagedInstanceCore and
  EC2InstanceProfileForImageBuilder (EC2 Image Builder user guide, "Set up IAM prerequisites:
  instance profile"), and a GPU instance type (`image.builder_instance_type`: the driver role
  installs a driver only where it finds a GPU). A failed build terminates its instance
  (`terminate_instance_on_failure`).
- The distribution tags the AMI with the cluster's tags, `rackform:roles` (the roles' hash) and
  `rackform:image-contents`.
- The image (`aws.imagebuilder.Image`): created during `up`; the launch templates take its
  output AMI, so they depend on it: a build that fails fails `up` before any launch template
  changes, and the nodes keep the previous image.

Every input of a component, recipe and image replaces it (the compiler's replace rules), and a
component's and a recipe's name and version must be new for each: their names carry a hash of what
they build from. No pipeline: a scheduled rebuild would make AMIs no launch template uses (the
templates take this Image's), so the image is rebuilt when what it is built from changes, or on
request."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pulumi
import pulumi_aws as aws
import yaml

from rackform.blueprint.targets.aws.image_fields import builder_type
from rackform.boot.artifact import build_artifact
from rackform.boot.groups import bake_spec
from rackform.paths import cache_dir
from rackform.plan.bake import contents_line
from rackform.plan.model import Plan
from rackform.targets.aws.bootstrap import ArtifactBucket
from rackform.targets.aws.network import AwsNetwork
from rackform.targets.aws.nodes import ROOT_GB, ROOT_VOLUME
from rackform.targets.aws.tags import aws_tags

BAKE_SCRIPT = Path(__file__).resolve().parents[2] / "boot" / "bake.py"
BUILDER_POLICIES = ("AmazonSSMManagedInstanceCore", "EC2InstanceProfileForImageBuilder")
# A component's document, inline: at most 16,000 characters (EC2 Image Builder API reference,
# CreateComponent, `data`).
COMPONENT_DATA_LIMIT = 16_000
# The driver, CUDA's libraries, EFA, DCGM and the smoke job's torch, and a reboot: longer than
# the provider's default of 60 minutes for an image (website/docs/r/imagebuilder_image, Timeouts).
BUILD_TIMEOUT = "3h"
VERSION = "1.0.0"  # names change with what is built, so every version is the first


def component_document(url: str, sha: str) -> str:
    """The build component: the bake script written to the builder, converge, reboot, converge
    again, record (AWSTOE document schema 1.0: phases, steps, ExecuteBash and Reboot)."""
    script = BAKE_SCRIPT.read_text(encoding="utf-8")
    run = f"python3 /opt/rackform/bake.py {{}} '{url}' {sha}"
    steps = [
        {
            "name": "WriteBakeScript",
            "action": "CreateFile",
            "inputs": [{"path": "/opt/rackform/bake.py", "content": script, "overwrite": True}],
        },
        {"name": "Converge", "action": "ExecuteBash", "inputs": {"commands": [run.format("converge")]}},
        {"name": "LoadTheDriver", "action": "Reboot", "inputs": {"delaySeconds": 0}},
        {"name": "ConvergeAgain", "action": "ExecuteBash", "inputs": {"commands": [run.format("converge")]}},
        {"name": "Record", "action": "ExecuteBash", "inputs": {"commands": [run.format("record")]}},
    ]  # fmt: skip
    doc = {
        "name": "rackform-node-image",
        "description": "The cluster's node-independent roles, baked (rackform/plan/bake.py)",
        "schemaVersion": 1.0,
        "phases": [{"name": "build", "steps": steps}],
    }
    text = yaml.safe_dump(doc, sort_keys=False, width=1000)
    if len(text) > COMPONENT_DATA_LIMIT:
        raise ValueError(
            f"the build component is {len(text)} characters; Image Builder takes {COMPONENT_DATA_LIMIT}"
        )
    return text


def short(*parts: str) -> str:
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()[:12]


def first_ami(resources) -> str | None:
    """The AMI an Image built: its output resources' first AMI."""
    amis = (resources or [{}])[0].get("amis") or []
    return amis[0].get("image") if amis else None


class NodeImage(pulumi.ComponentResource):
    """The Image Builder resources; `ami` is the AMI the image built."""

    ami: pulumi.Output[str]

    def __init__(
        self,
        name: str,
        plan: Plan,
        *,
        base: pulumi.Input[str],
        bucket: ArtifactBucket,
        network: AwsNetwork,
        assume_role_policy: str,
        opts: pulumi.ResourceOptions | None = None,
    ):
        super().__init__("rackform:aws:NodeImage", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        tp, stack = plan.target_plan, plan.stack
        spec = bake_spec(plan)
        artifact = build_artifact(spec, cache_dir() / "artifacts")
        url = bucket.publish("image", artifact)
        record = spec["image"]

        role = aws.iam.Role(
            f"{name}-builder-role",
            description=f"rackform {stack} node image builder (Image Builder, SSM)",
            assume_role_policy=assume_role_policy,
            tags=aws_tags(plan, f"{name}-builder-role"),
            opts=child,
        )
        attached = [
            aws.iam.RolePolicyAttachment(
                f"{name}-builder-{policy}",
                role=role.name,
                policy_arn=f"arn:{tp.partition}:iam::aws:policy/{policy}",
                opts=child,
            )
            for policy in BUILDER_POLICIES
        ]
        profile = aws.iam.InstanceProfile(
            f"{name}-builder-profile",
            role=role.name,
            tags=aws_tags(plan, f"{name}-builder-profile"),
            opts=child,
        )
        component_name = f"{stack}-node-{artifact.sha256[:12]}"
        component = aws.imagebuilder.Component(
            f"{name}-component",
            name=component_name,
            version=VERSION,
            platform="Linux",
            description=f"rackform {stack}: the node-independent roles (artifact {artifact.sha256[:12]})",
            data=url.apply(lambda u: component_document(u, artifact.sha256)),
            tags=aws_tags(plan, component_name),
            opts=child,
        )
        recipe_name = pulumi.Output.from_input(base).apply(
            lambda ami: f"{stack}-node-{short(ami, artifact.sha256, str(ROOT_GB))}"
        )
        recipe = aws.imagebuilder.ImageRecipe(
            f"{name}-recipe",
            name=recipe_name,
            version=VERSION,
            parent_image=base,
            components=[{"component_arn": component.arn}],
            # The nodes' root volume (nodes.py): the image's snapshot may not be larger.
            block_device_mappings=[ROOT_VOLUME],
            tags=aws_tags(plan, f"{name}-recipe"),
            opts=child,
        )
        infrastructure = aws.imagebuilder.InfrastructureConfiguration(
            f"{name}-builder",
            name=f"{stack}-node-image-builder",
            description=f"rackform {stack}: where the node image is built",
            instance_types=[builder_type(plan.image)],
            instance_profile_name=profile.name,
            subnet_id=network.subnet.id,
            security_group_ids=[network.security_group.id],
            terminate_instance_on_failure=True,
            instance_metadata_options={"http_tokens": "required", "http_put_response_hop_limit": 2},
            resource_tags=aws_tags(plan, f"{name}-builder"),
            tags=aws_tags(plan, f"{name}-builder"),
            opts=pulumi.ResourceOptions(parent=self, depends_on=attached),
        )
        ami_tags = {
            **aws_tags(plan, f"{stack}-node-image"),
            "rackform:roles": record["roles"],
            "rackform:image-contents": contents_line(record["contents"]),
        }
        distribution = aws.imagebuilder.DistributionConfiguration(
            f"{name}-distribution",
            name=f"{stack}-node-image",
            description=f"rackform {stack}: the node image, tagged with what it holds",
            distributions=[
                {
                    "region": plan.target.region,
                    "ami_distribution_configuration": {
                        "name": f"{stack}-node-{{{{ imagebuilder:buildDate }}}}",
                        "ami_tags": ami_tags,
                    },
                }
            ],
            tags=aws_tags(plan, f"{name}-distribution"),
            opts=child,
        )
        self.image = aws.imagebuilder.Image(
            f"{name}-build",
            image_recipe_arn=recipe.arn,
            infrastructure_configuration_arn=infrastructure.arn,
            distribution_configuration_arn=distribution.arn,
            # No test instance: the roles check what they install during the build (nvidia-smi,
            # dcgm-exporter's metrics), and the nodes are validated by the smoke job.
            image_tests_configuration={"image_tests_enabled": False},
            tags=aws_tags(plan, f"{name}-build"),
            # The builder fetches the artifact through the bucket's policy.
            opts=pulumi.ResourceOptions(
                parent=self,
                depends_on=[bucket.policy],
                custom_timeouts=pulumi.CustomTimeouts(create=BUILD_TIMEOUT),
            ),
        )
        self.ami = self.image.output_resources.apply(first_ami)
        self.register_outputs({"ami": self.ami})
