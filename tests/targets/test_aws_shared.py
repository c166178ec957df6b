"""FSx for Lustre as the shared tier, under Pulumi's mocks (the AWS API is what this machine
cannot reach): the file system in the nodes' subnet and security group with the blueprint's
capacity and throughput, the datasets' bucket linked the way its deployment type allows, kept
on destroy unless the blueprint says otherwise, and nothing created for an existing one."""

from __future__ import annotations

from planhelp import AWS_TRAINING, of_type, one, plan, variant


def fsx(**kw) -> dict:
    return variant(AWS_TRAINING, **{"storage": {"shared": {"fsx": kw}}})


def test_a_persistent_2_file_system_with_its_datasets_bucket(tmp_path):
    records = plan(
        tmp_path, fsx(storage_tib=4.8, mbps_per_tib=500, import_path="s3://ml-data/tok/")
    )
    fs = one(records, "fsx/lustreFileSystem:LustreFileSystem")
    assert (fs.inputs["storageCapacity"], fs.inputs["deploymentType"]) == (4800, "PERSISTENT_2")
    assert fs.inputs["perUnitStorageThroughput"] == 500
    assert fs.inputs["fileSystemTypeVersion"] == "2.15"
    (subnet,) = [r for r in of_type(records, "ec2/subnet:Subnet") if r.name.endswith("-nodes")]
    # The nodes' own group (its rule admits all traffic between members: Lustre's ports too).
    sg = [
        r
        for r in of_type(records, "ec2/securityGroup:SecurityGroup")
        if r.name == "t-train-default-sg"
    ]
    assert fs.inputs["subnetIds"] == f"<{subnet.name}>.id"
    assert fs.inputs["securityGroupIds"] == [f"<{sg[0].name}>.id"]
    assert "importPath" not in fs.inputs  # PERSISTENT_2 links its bucket by association
    assert fs.retain_on_delete
    dra = one(records, "fsx/dataRepositoryAssociation:DataRepositoryAssociation")
    assert dra.inputs["dataRepositoryPath"] == "s3://ml-data/tok"
    assert dra.inputs["fileSystemPath"] == "/datasets"
    assert dra.inputs["fileSystemId"] == f"<{fs.name}>.id"


def test_scratch_takes_its_bucket_as_the_import_path_and_no_per_unit_setting(tmp_path):
    records = plan(tmp_path, fsx(deployment="SCRATCH_2", storage_tib=1.2, import_path="s3://ml-data",
                                 retain=False))  # fmt: skip
    fs = one(records, "fsx/lustreFileSystem:LustreFileSystem")
    assert fs.inputs["storageCapacity"] == 1200 and "perUnitStorageThroughput" not in fs.inputs
    assert fs.inputs["importPath"] == "s3://ml-data"
    assert not fs.retain_on_delete
    assert of_type(records, "DataRepositoryAssociation") == []


def test_an_existing_file_system_is_named_not_created(tmp_path):
    records = plan(tmp_path, fsx(file_system_id="fs-0123456789abcdef0"))
    assert of_type(records, "fsx/lustreFileSystem:LustreFileSystem") == []


def test_no_shared_tier_no_file_system(tmp_path):
    assert of_type(plan(tmp_path, AWS_TRAINING), "LustreFileSystem") == []
