"""Which input changes replace which AWS resource, as the provider decides: data, recorded from
pulumi-aws, which bridges terraform-provider-aws and keeps its `ForceNew` / `RequiresReplace`
attributes as replacements (a Pulumi preview then shows `replace`). The mocks cannot know any of
this, so `rackform diff` reads it from here.

Keys are Pulumi input names (camelCase, as the recorded inputs carry them); each value says
where the rule comes from, in terraform-provider-aws (`internal/service/...`, the schema of
the resource) or its documentation (website/docs/r/...). Only the types and inputs rackform's
program uses are listed; an input not listed updates in place.
"""

from __future__ import annotations

from rackform.plan.targets.replace_rules import ReplaceRules

TF = "terraform-provider-aws internal/service/"

REPLACED_BY: dict[str, dict[str, str]] = {
    "aws:ec2/vpc:Vpc": {"cidrBlock": TF + "ec2/vpc_.go: cidr_block ForceNew"},
    "aws:ec2/subnet:Subnet": {
        # A subnet lives in one zone with one block: moving it is a new subnet, and a
        # create-before-delete one with the same CIDR conflicts (`stack.replacement`
        # says so in the reason).
        "availabilityZone": TF + "ec2/vpc_subnet.go: availability_zone ForceNew",
        "cidrBlock": TF + "ec2/vpc_subnet.go: cidr_block ForceNew",
        "vpcId": TF + "ec2/vpc_subnet.go: vpc_id ForceNew",
    },
    "aws:ec2/eip:Eip": {"domain": TF + "ec2/ec2_eip.go: domain ForceNew"},
    "aws:ec2/natGateway:NatGateway": {
        "allocationId": TF + "ec2/vpc_nat_gateway.go: allocation_id ForceNew",
        "subnetId": TF + "ec2/vpc_nat_gateway.go: subnet_id ForceNew",
    },
    "aws:ec2/routeTable:RouteTable": {"vpcId": TF + "ec2/vpc_route_table.go: vpc_id ForceNew"},
    "aws:ec2/routeTableAssociation:RouteTableAssociation": {
        "subnetId": TF + "ec2/vpc_route_table_association.go: subnet_id ForceNew"
    },
    "aws:ec2/securityGroup:SecurityGroup": {
        "description": TF + "ec2/vpc_security_group.go: description ForceNew",
        "vpcId": TF + "ec2/vpc_security_group.go: vpc_id ForceNew",
        "name": TF + "ec2/vpc_security_group.go: name ForceNew",
    },
    "aws:ec2transitgateway/instanceConnectEndpoint:InstanceConnectEndpoint": {
        # The endpoint sits in one subnet: a new subnet is a new endpoint (and its 20
        # connections, and its address the nodes' security group admits).
        "subnetId": TF + "ec2/ec2_instance_connect_endpoint.go: subnet_id RequiresReplace",
        "securityGroupIds": TF
        + "ec2/ec2_instance_connect_endpoint.go: security_group_ids RequiresReplace",
        "preserveClientIp": TF
        + "ec2/ec2_instance_connect_endpoint.go: preserve_client_ip RequiresReplace",
    },
    "aws:ec2/placementGroup:PlacementGroup": {
        "strategy": TF + "ec2/ec2_placement_group.go: strategy ForceNew",
        "name": TF + "ec2/ec2_placement_group.go: name ForceNew",
    },
    "aws:ec2/launchTemplate:LaunchTemplate": {
        "name": TF + "ec2/ec2_launch_template.go: name ForceNew"
    },
    "aws:ec2/instance:Instance": {
        # "Updating Launch Template specification will force new instance"
        # (terraform-provider-aws PR #10807, website/docs/r/instance.html.markdown): a new
        # template version is a new instance. instance_type alone updates in place (stop,
        # modify, start): the GPU nodes take it from the template, Slurm's controller instance
        # sets it directly, and a new one resizes it in
        # place. So do its user_data (user_data_replace_on_change defaults to false),
        # vpc_security_group_ids, iam_instance_profile and metadata_options.
        "launchTemplate": TF + "ec2/ec2_instance.go: launch_template ForceNew (PR #10807)",
        "ami": TF + "ec2/ec2_instance.go: ami ForceNew",
        "availabilityZone": TF + "ec2/ec2_instance.go: availability_zone ForceNew",
        "placementGroup": TF + "ec2/ec2_instance.go: placement_group ForceNew",
        "subnetId": TF + "ec2/ec2_instance.go: subnet_id ForceNew",
        "keyName": TF + "ec2/ec2_instance.go: key_name ForceNew",
        "ebsBlockDevices": TF + "ec2/ec2_instance.go: ebs_block_device ForceNew",
        "associatePublicIpAddress": TF
        + "ec2/ec2_instance.go: associate_public_ip_address ForceNew",
    },
    "aws:autoscaling/group:Group": {"name": TF + "autoscaling/group.go: name ForceNew"},
    "aws:ec2/vpcEndpoint:VpcEndpoint": {
        "vpcId": TF + "ec2/vpc_endpoint.go: vpc_id ForceNew",
        "serviceName": TF + "ec2/vpc_endpoint.go: service_name ForceNew",
        "vpcEndpointType": TF + "ec2/vpc_endpoint.go: vpc_endpoint_type ForceNew",
    },
    "aws:iam/role:Role": {"name": TF + "iam/role.go: name ForceNew"},
    "aws:iam/instanceProfile:InstanceProfile": {
        "name": TF + "iam/instance_profile.go: name ForceNew"
    },
    "aws:iam/rolePolicy:RolePolicy": {"role": TF + "iam/role_policy.go: role ForceNew"},
    "aws:iam/rolePolicyAttachment:RolePolicyAttachment": {
        "role": TF + "iam/role_policy_attachment.go: role ForceNew",
        "policyArn": TF + "iam/role_policy_attachment.go: policy_arn ForceNew",
    },
    "aws:s3/bucket:Bucket": {"bucket": TF + "s3/bucket.go: bucket ForceNew"},
    "aws:s3/bucketPublicAccessBlock:BucketPublicAccessBlock": {
        "bucket": TF + "s3/bucket_public_access_block.go: bucket ForceNew"
    },
    "aws:s3/bucketPolicy:BucketPolicy": {"bucket": TF + "s3/bucket_policy.go: bucket ForceNew"},
    # The node image (EC2 Image Builder): a component, recipe and image are
    # immutable, every argument but tags ForceNew; the infrastructure and distribution
    # configurations update in place but for their name.
    "aws:imagebuilder/component:Component": {
        k: TF + f"imagebuilder/component.go: {v} ForceNew"
        for k, v in {
            "name": "name",
            "version": "version",
            "data": "data",
            "platform": "platform",
        }.items()
    },
    "aws:imagebuilder/imageRecipe:ImageRecipe": {
        k: TF + f"imagebuilder/image_recipe.go: {v} ForceNew"
        for k, v in {
            "name": "name",
            "version": "version",
            "parentImage": "parent_image",
            "components": "component",
            "blockDeviceMappings": "block_device_mapping",
        }.items()
    },
    "aws:imagebuilder/image:Image": {
        k: TF + f"imagebuilder/image.go: {v} ForceNew"
        for k, v in {
            "imageRecipeArn": "image_recipe_arn",
            "infrastructureConfigurationArn": "infrastructure_configuration_arn",
            "distributionConfigurationArn": "distribution_configuration_arn",
            "imageTestsConfiguration": "image_tests_configuration",
        }.items()
    },
    "aws:imagebuilder/infrastructureConfiguration:InfrastructureConfiguration": {
        "name": TF + "imagebuilder/infrastructure_configuration.go: name ForceNew"
    },
    "aws:imagebuilder/distributionConfiguration:DistributionConfiguration": {
        "name": TF + "imagebuilder/distribution_configuration.go: name ForceNew"
    },
    "aws:s3/bucketObjectv2:BucketObjectv2": {
        "bucket": TF + "s3/object.go: bucket ForceNew",
        "key": TF + "s3/object.go: key ForceNew",
    },
}

# A launch template is versioned: a change to what it launches is a new version (its
# `latestVersion` output changes), never a new template; its own name, description, tags and
# default-version settings are the template's, not a version's (terraform-provider-aws
# internal/service/ec2/ec2_launch_template.go, resourceLaunchTemplateUpdate: a new version
# unless only these changed).
VERSIONED: dict[str, tuple[str, frozenset[str]]] = {
    "aws:ec2/launchTemplate:LaunchTemplate": (
        "latestVersion",
        frozenset({"defaultVersion", "description", "name", "tags", "updateDefaultVersion"}),
    )
}

# Updates that replace a resource's running instances without replacing the resource: an
# autoscaling group with `instance_refresh` starts an instance refresh when its launch template
# (or mixed instances policy) changes (website/docs/r/autoscaling_group.html.markdown,
# "instance_refresh": "start an Instance Refresh when this Auto Scaling Group is updated").
ROLLS: dict[str, frozenset[str]] = {
    "aws:autoscaling/group:Group": frozenset({"launchTemplate", "mixedInstancesPolicy"})
}

# What replaces the stack's image pin (its provider's `diff`): another image kind or explicit id,
# never a newer image of the same kind.
PIN_IDENTITY = ("image",)

_DYNAMIC = "pulumi-python:dynamic/rackform:"

# pulumi-aws's rules, and the stack's own dynamic resources', which their providers' `diff`
# decides: new keys only for another cluster, a new image pin only for another image kind or id.
RULES = ReplaceRules(
    {
        **REPLACED_BY,
        f"{_DYNAMIC}NodeKeys": {"cluster": "rackform/targets/aws/access.py diff"},
        f"{_DYNAMIC}ImagePin": dict.fromkeys(
            PIN_IDENTITY, "rackform/targets/aws/image_pin.py diff"
        ),
        # Never replaced: a changed set of instances is read again, in place (its `diff`).
        f"{_DYNAMIC}InstanceTopology": {},
    },
    VERSIONED,
    ROLLS,
)
