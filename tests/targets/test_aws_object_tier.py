"""The checkpoint tier in AWS's S3 (`storage.object`), under Pulumi's mocks (the AWS API is what
this machine cannot reach): the nodes' role may list the tier's prefix and read, write and delete
under it, and nothing else of the bucket; the VPC reaches S3 through a gateway endpoint. A site's
S3-compatible store (an endpoint_url) gets neither: its credentials are the site's."""

from __future__ import annotations

import json

from planhelp import AWS_TRAINING, of_type, plan, variant


def _tier(**kw) -> dict:
    return variant(AWS_TRAINING, storage={"object": kw})


def _checkpoint_policy(records) -> dict | None:
    found = [
        r for r in of_type(records, "iam/rolePolicy:RolePolicy") if r.name.endswith("-checkpoints")
    ]
    return json.loads(found[0].inputs["policy"]) if found else None


def test_the_nodes_may_copy_prune_and_restore_under_the_prefix_only(tmp_path):
    records = plan(tmp_path, _tier(url="s3://team-ckpt/runs/llama"))
    doc = _checkpoint_policy(records)
    listing, objects = doc["Statement"]
    assert listing["Action"] == "s3:ListBucket"
    assert listing["Resource"] == "arn:aws:s3:::team-ckpt"
    assert listing["Condition"] == {"StringLike": {"s3:prefix": ["runs/llama", "runs/llama/*"]}}
    assert objects["Resource"] == "arn:aws:s3:::team-ckpt/runs/llama/*"
    assert set(objects["Action"]) == {
        "s3:GetObject", "s3:PutObject", "s3:DeleteObject", "s3:AbortMultipartUpload",
    }  # fmt: skip
    (endpoint,) = of_type(records, "ec2/vpcEndpoint:VpcEndpoint")
    assert endpoint.inputs["serviceName"] == "com.amazonaws.us-east-1.s3"
    assert endpoint.inputs["vpcEndpointType"] == "Gateway"


def test_a_whole_bucket_tier_lists_the_bucket_without_a_prefix_condition(tmp_path):
    listing, objects = _checkpoint_policy(plan(tmp_path, _tier(url="s3://team-ckpt")))["Statement"]
    assert "Condition" not in listing and objects["Resource"] == "arn:aws:s3:::team-ckpt/*"


def test_a_sites_s3_compatible_store_gets_no_aws_grant(tmp_path):
    records = plan(tmp_path, _tier(url="s3://ckpt/x", endpoint_url="https://minio.lab:9000"))
    assert _checkpoint_policy(records) is None
    assert of_type(records, "ec2/vpcEndpoint:VpcEndpoint") == []


def test_no_tier_no_grant(tmp_path):
    records = plan(tmp_path, AWS_TRAINING)
    assert _checkpoint_policy(records) is None
    assert of_type(records, "ec2/vpcEndpoint:VpcEndpoint") == []
