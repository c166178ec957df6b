"""The checkpoint tier on AWS (`storage.object` in an S3 bucket of AWS's): what the nodes'
instance role may do there, and no more: list the tier's prefix, and read, write and delete the
objects under it (a job copies its checkpoints up, prunes the old ones and restores the newest).

IAM, from the Amazon S3 user guide ("Policy actions for Amazon S3", "Controlling access to a bucket
with user policies"): ListObjectsV2 is authorized by `s3:ListBucket` on the bucket, narrowed with
the `s3:prefix` condition key; GetObject, PutObject (and the multipart upload boto3's upload_file
uses for large files: `s3:PutObject` covers creating and completing it, `s3:AbortMultipartUpload`
its abort) and DeleteObject by their actions on `bucket/prefix/*`
(https://docs.aws.amazon.com/AmazonS3/latest/userguide/security_iam_service-with-iam.html). The
nodes reach S3 through the VPC's gateway endpoint, off the NAT gateway's per-GB charge."""

from __future__ import annotations

import json

from rackform.blueprint.schema.object_tier import ObjectStorage


def on_aws(tier: ObjectStorage | None) -> bool:
    """A tier in AWS's S3 (not an S3-compatible store of a site's, named by its endpoint)."""
    return tier is not None and tier.endpoint_url is None


def tier_policy(partition: str, tier: ObjectStorage) -> str:
    bucket = f"arn:{partition}:s3:::{tier.bucket}"
    under = f"{tier.prefix}/*" if tier.prefix else "*"
    listing: dict = {
        "Sid": "ListTheTier",
        "Effect": "Allow",
        "Action": "s3:ListBucket",
        "Resource": bucket,
    }
    if tier.prefix:
        listing["Condition"] = {"StringLike": {"s3:prefix": [tier.prefix, under]}}
    return json.dumps(
        {
            "Version": "2012-10-17",
            "Statement": [
                listing,
                {
                    "Sid": "CopyRestoreAndPruneCheckpoints",
                    "Effect": "Allow",
                    "Action": [
                        "s3:GetObject",
                        "s3:PutObject",
                        "s3:DeleteObject",
                        "s3:AbortMultipartUpload",
                    ],
                    "Resource": f"{bucket}/{under}",
                },
            ],
        },
        sort_keys=True,
    )
