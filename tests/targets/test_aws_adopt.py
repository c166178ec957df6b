"""Finding the data tier's pieces by their tags (rackform/targets/aws/adopt.py), against moto's
server on loopback (EC2, EFS, FSx) and, where moto has no answer (FSx data repository
associations) or cannot be put in a state (a file system being deleted), a stand-in client."""

from __future__ import annotations

import pytest
from planhelp import AWS_TRAINING, write_blueprint

from rackform.blueprint.loader import load_effective
from rackform.engine import compile_effective
from rackform.plan.targets.aws.data_layout import pieces
from rackform.targets.aws.adopt import Finder, LookupFailed

STACK = "t-train-default"


def _plan(tmp_path, shared):
    doc = {**AWS_TRAINING, "storage": {"shared": shared}}
    return compile_effective(load_effective(write_blueprint(tmp_path, doc)))


def _tags(plan, name, **changes):
    every = {**plan.tag_map, "Name": name, **changes}
    return [{"Key": k, "Value": v} for k, v in every.items()]


def test_efs_and_its_mount_target_in_the_found_subnet(tmp_path, aws):
    plan = _plan(tmp_path, {"holds": ["home"], "efs": {}})
    ec2, efs = aws.client("ec2", "us-east-1"), aws.client("efs", "us-east-1")
    vpc = ec2.create_vpc(
        CidrBlock="10.0.0.0/16",
        TagSpecifications=[{"ResourceType": "vpc", "Tags": _tags(plan, f"{STACK}-vpc")}],
    )["Vpc"]["VpcId"]
    subnet = ec2.create_subnet(
        VpcId=vpc,
        CidrBlock="10.0.0.0/17",
        AvailabilityZone="us-east-1a",
        TagSpecifications=[{"ResourceType": "subnet", "Tags": _tags(plan, f"{STACK}-nodes")}],
    )["Subnet"]["SubnetId"]
    other = ec2.create_subnet(VpcId=vpc, CidrBlock="10.0.128.0/24", AvailabilityZone="us-east-1b")
    other = other["Subnet"]["SubnetId"]
    fs = efs.create_file_system(CreationToken="t", Tags=_tags(plan, f"{STACK}-shared"))
    efs.create_file_system(
        CreationToken="u", Tags=_tags(plan, f"{STACK}-shared", **{"rackform:environment": "prod"})
    )
    mount = efs.create_mount_target(FileSystemId=fs["FileSystemId"], SubnetId=subnet)
    efs.create_mount_target(FileSystemId=fs["FileSystemId"], SubnetId=other)

    found = Finder(lambda service, region: aws.client(service, region)).find(plan, pieces(plan))
    assert found[f"{STACK}-vpc"] == {"id": vpc}
    assert found[f"{STACK}-nodes"] == {"id": subnet}
    assert found[f"{STACK}-shared"] == {"id": fs["FileSystemId"]}
    assert found[f"{STACK}-shared-mount"] == {"id": mount["MountTargetId"]}
    assert f"{STACK}-sg" not in found  # nothing carries its tags: created anew


class StandIn:
    """An FSx client answering DescribeFileSystems and DescribeDataRepositoryAssociations from
    lists, as the FSx API reference shapes them."""

    def __init__(self, file_systems=(), associations=()):
        self.file_systems, self.associations = list(file_systems), list(associations)

    def get_paginator(self, name):
        assert name == "describe_file_systems"
        return self

    def paginate(self):
        return [{"FileSystems": self.file_systems}]

    def describe_data_repository_associations(self):
        return {"Associations": self.associations}


def _fsx_only(client):
    def factory(service, region):
        if service != "fsx":
            raise AssertionError(f"no {service} call expected")
        return client

    return factory


def test_a_file_system_being_deleted_is_not_adopted_and_its_association_is_found(tmp_path):
    plan = _plan(tmp_path, {"fsx": {"import_path": "s3://ml-data/tok/"}})
    ours = {t["Key"]: t["Value"] for t in _tags(plan, f"{STACK}-shared")}

    def fs(fs_id, lifecycle, tags=ours):
        return {
            "FileSystemId": fs_id,
            "FileSystemType": "LUSTRE",
            "Lifecycle": lifecycle,
            "Tags": [{"Key": k, "Value": v} for k, v in tags.items()],
        }

    client = StandIn(
        [fs("fs-0aaa", "DELETING"), fs("fs-0bbb", "AVAILABLE")],
        [
            {"AssociationId": "dra-0other", "Lifecycle": "AVAILABLE", "Tags": []},
            {
                "AssociationId": "dra-0ours",
                "Lifecycle": "AVAILABLE",
                "Tags": _tags(plan, f"{STACK}-shared-datasets"),
            },
        ],
    )
    wanted = tuple(p for p in pieces(plan) if p.lookup in ("fsx", "datasets"))
    found = Finder(_fsx_only(client)).find(plan, wanted)
    assert found == {
        f"{STACK}-shared": {"id": "fs-0bbb"},
        f"{STACK}-shared-datasets": {"id": "dra-0ours"},
    }


def test_two_matches_are_refused_in_one_line(tmp_path):
    plan = _plan(tmp_path, {"fsx": {}})
    tags = _tags(plan, f"{STACK}-shared")
    client = StandIn(
        [
            {"FileSystemId": i, "FileSystemType": "LUSTRE", "Lifecycle": "AVAILABLE", "Tags": tags}
            for i in ("fs-0b", "fs-0a")
        ]
    )
    wanted = tuple(p for p in pieces(plan) if p.lookup == "fsx")
    with pytest.raises(
        LookupFailed,
        match=r"^2 resources carry the tags of t-train-default-shared \(fs-0a, fs-0b\)",
    ):
        Finder(_fsx_only(client)).find(plan, wanted)


def test_an_aws_error_is_one_line(tmp_path, no_aws):
    plan = _plan(tmp_path, {"fsx": {}})
    with pytest.raises(LookupFailed) as got:
        Finder().find(plan, pieces(plan))  # real boto3, no credentials
    assert "could not look in AWS for what t-train-default-data does not hold" in str(got.value)
    assert "\n" not in str(got.value)
