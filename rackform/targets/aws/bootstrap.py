"""Where nodes that configure themselves (an inference autoscaling group's) and the node image's
builder get their artifact on AWS: a private S3 bucket of the stack's, readable only through the
VPC's S3 gateway endpoint.

The node fetches the artifact with a plain HTTPS GET, no credentials and no AWS CLI on the
image: the bucket policy allows `s3:GetObject` to requests that arrive through this VPC
endpoint (`aws:SourceVpce`), and Block Public Access stays fully on, which such a policy
passes, since S3 counts a policy limited to a fixed `aws:SourceVpce` as non-public (S3 user
guide, "Blocking public access to your Amazon S3 storage", section "The meaning of public").
The object's key carries the artifact's sha256, which the user data checks again.
"""

from __future__ import annotations

import json

import pulumi
import pulumi_aws as aws

from rackform.boot.artifact import Artifact
from rackform.boot.groups import group_artifact as boot_group_artifact
from rackform.plan.model import NodeGroupPlan, Plan
from rackform.targets.aws.tags import aws_tags

HOOK = "rackform-configure"
# How long a joining node may go without a sign of progress before the hook abandons it.
HOOK_TIMEOUT_S = 3600
# How often a configuring node sends RecordLifecycleActionHeartbeat, which "extends the timeout
# by the length of time defined using the PutLifecycleHook API call" (Auto Scaling API
# reference, RecordLifecycleActionHeartbeat): a bootstrap longer than HOOK_TIMEOUT_S (the
# driver, EFA and the smoke environment, a reboot, a slow mirror) is not abandoned while it
# runs. A sixth of the timeout: five heartbeats may fail before it expires. A hook waits at
# most 48 hours or 100 times its heartbeat timeout, whichever is smaller (Auto Scaling API
# reference, LifecycleHook, GlobalTimeout), so a stuck bootstrap still ends.
HEARTBEAT_S = HOOK_TIMEOUT_S // 6


def group_artifact(plan: Plan, group: NodeGroupPlan, asg_name: str) -> Artifact:
    """The group's artifact (`groups.group_spec`), with what a joining node does on AWS:
    its lifecycle hook and heartbeat."""
    aws = {"region": plan.target.region, "asg": asg_name, "hook": HOOK, "heartbeat_s": HEARTBEAT_S}
    return boot_group_artifact(plan, group, aws)


def bucket_policy(bucket_arn: str, endpoint_id: str) -> str:
    return json.dumps(
        {
            "Version": "2012-10-17",
            "Statement": [
                {
                    "Sid": "NodesThroughTheVpcEndpoint",
                    "Effect": "Allow",
                    "Principal": "*",
                    "Action": "s3:GetObject",
                    "Resource": f"{bucket_arn}/bootstrap/*",
                    "Condition": {"StringEquals": {"aws:SourceVpce": endpoint_id}},
                }
            ],
        },
        sort_keys=True,
    )


class ArtifactBucket(pulumi.ComponentResource):
    """The bucket, its access block and policy; `publish` adds one artifact."""

    def __init__(
        self,
        name: str,
        plan: Plan,
        endpoint: aws.ec2.VpcEndpoint,
        opts: pulumi.ResourceOptions | None = None,
    ):
        super().__init__("rackform:aws:ArtifactBucket", name, None, opts)
        self.plan = plan
        child = pulumi.ResourceOptions(parent=self)
        self.bucket = aws.s3.Bucket(name, force_destroy=True, tags=aws_tags(plan, name), opts=child)
        block = aws.s3.BucketPublicAccessBlock(
            f"{name}-private",
            bucket=self.bucket.id,
            block_public_acls=True,
            block_public_policy=True,
            ignore_public_acls=True,
            restrict_public_buckets=True,
            opts=child,
        )
        self.policy = aws.s3.BucketPolicy(
            f"{name}-policy",
            bucket=self.bucket.id,
            policy=pulumi.Output.all(self.bucket.arn, endpoint.id).apply(
                lambda pair: bucket_policy(*pair)
            ),
            opts=pulumi.ResourceOptions(parent=self, depends_on=[block]),
        )
        self.register_outputs({"bucket": self.bucket.id})

    def publish(self, label: str, artifact: Artifact) -> pulumi.Output[str]:
        """Upload the artifact (`label`: whose it is, a node group or the node image); its URL
        (virtual-hosted style, the region's endpoint)."""
        key = f"bootstrap/{artifact.sha256}.tar.gz"
        obj = aws.s3.BucketObjectv2(
            f"{self._name}-{label}-artifact",
            bucket=self.bucket.id,
            key=key,
            source=pulumi.FileAsset(str(artifact.path)),
            content_type="application/gzip",
            tags=aws_tags(self.plan, f"{self._name}-{label}-artifact"),
            opts=pulumi.ResourceOptions(parent=self),
        )
        region = self.plan.target.region
        return pulumi.Output.all(self.bucket.bucket, obj.key).apply(
            lambda pair: f"https://{pair[0]}.s3.{region}.amazonaws.com/{pair[1]}"
        )


def node_policy(partition: str, region: str, asg_names: list[str]) -> str:
    """What a joining node may do on its own behalf: tag itself once configured, and send
    heartbeats for and complete its group's launch hook. Tagging is limited to the instance making the call
    (`ec2:SourceInstanceARN`, EC2 user guide, "IAM roles for Amazon EC2": condition keys)."""
    groups = [
        f"arn:{partition}:autoscaling:{region}:*:autoScalingGroup:*:autoScalingGroupName/{n}"
        for n in asg_names
    ]
    return json.dumps(
        {
            "Version": "2012-10-17",
            "Statement": [
                {
                    "Sid": "TagItselfConfigured",
                    "Effect": "Allow",
                    "Action": "ec2:CreateTags",
                    "Resource": f"arn:{partition}:ec2:{region}:*:instance/*",
                    "Condition": {
                        "StringEquals": {"aws:ARN": "${ec2:SourceInstanceARN}"},
                        "ForAllValues:StringEquals": {"aws:TagKeys": ["rackform:configured"]},
                    },
                },
                {
                    "Sid": "CompleteItsLaunchHook",
                    "Effect": "Allow",
                    "Action": [
                        "autoscaling:CompleteLifecycleAction",
                        "autoscaling:RecordLifecycleActionHeartbeat",
                    ],
                    "Resource": groups,
                },
            ],
        },
        sort_keys=True,
    )
