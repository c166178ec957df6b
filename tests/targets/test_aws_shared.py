"""FSx for Lustre as the shared tier, under Pulumi's mocks (the AWS API is what this machine
cannot reach): the file system in the nodes' subnet and security group with the blueprint's
capacity and throughput, the datasets' bucket linked the way its deployment type allows, kept
on destroy unless the blueprint says otherwise (in the data tier's own stack, protected, with
the network it sits in), and nothing created for an existing one."""

from __future__ import annotations

import pytest
from planhelp import AWS_TRAINING, of_type, one, variant
from planhelp import plan_all as plan


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
    # Kept: in the data tier's stack, protected (never retained in a stack destroy destroys).
    assert fs.urn.startswith("urn:pulumi:t-train-default-data::") and fs.protect
    assert not fs.retain_on_delete
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
    # Not kept: it goes with the cluster's stack, deleted before the subnet it sits in.
    assert fs.urn.startswith("urn:pulumi:t-train-default::") and not fs.protect
    assert not fs.retain_on_delete
    assert of_type(records, "DataRepositoryAssociation") == []


def test_an_existing_file_system_is_named_not_created(tmp_path):
    records = plan(tmp_path, fsx(file_system_id="fs-0123456789abcdef0"))
    assert of_type(records, "fsx/lustreFileSystem:LustreFileSystem") == []


def test_no_shared_tier_no_file_system(tmp_path):
    assert of_type(plan(tmp_path, AWS_TRAINING), "LustreFileSystem") == []


def _configure_vars(records) -> dict:
    return one(records, "rackform:Configure").inputs["group_vars"]


def test_the_nodes_mount_the_file_system_the_stack_created(tmp_path):
    records = plan(tmp_path, fsx(storage_tib=2.4))
    fs = one(records, "fsx/lustreFileSystem:LustreFileSystem")
    got = _configure_vars(records)
    # The role mounts DNS@tcp:/MOUNTNAME, both known only once the file system exists.
    assert got["shared_storage_type"] == "lustre"
    assert got["shared_storage_address"] == f"<{fs.name}>.dnsName"
    assert got["shared_storage_export"] == f"<{fs.name}>.mountName"
    assert got["shared_storage_options"] == ["relatime", "flock"]
    assert got["shared_storage_mount"] == "/shared"
    # Validation's variables carry them too (its host checks look at the mount).
    assert one(records, "rackform:Validate").inputs["group_vars"]["shared_storage_export"] == (
        f"<{fs.name}>.mountName"
    )


def test_an_existing_file_system_is_read_for_what_the_nodes_mount(tmp_path):
    got = _configure_vars(plan(tmp_path, fsx(file_system_id="fs-0123456789abcdef0")))
    # Read from AWS by id (`LustreFileSystem.get`), never created or destroyed.
    assert got["shared_storage_address"] == "<t-train-default-shared-existing>.dnsName"
    assert got["shared_storage_export"] == "<t-train-default-shared-existing>.mountName"


def test_without_a_shared_tier_the_role_has_nothing_to_do(tmp_path):
    got = _configure_vars(plan(tmp_path, AWS_TRAINING))
    assert got["shared_storage_type"] == "none"
    assert not any(k.startswith("shared_storage_address") for k in got)


def _cost(tmp_path, doc):
    from planhelp import write_blueprint

    from rackform.blueprint.loader import load_effective
    from rackform.engine import compile_effective

    return compile_effective(load_effective(write_blueprint(tmp_path, doc))).cost


def test_the_file_system_is_in_the_clusters_cost_and_so_in_the_diffs_delta(tmp_path):
    without = _cost(tmp_path, AWS_TRAINING)
    with_fsx = _cost(tmp_path, fsx(storage_tib=4.8, mbps_per_tib=250))
    (line,) = [ln for ln in with_fsx.compute if ln.item.startswith("FSx")]
    # 4,800 GB x $0.210/GB-month (PERSISTENT_2 at 250 MB/s/TiB, the catalog's us-east-1 price).
    assert line.usd_per_month == 4800 * 0.210
    assert "4,800 GB x 250 MB/s/TiB at $0.21/GB-month" in line.item
    assert "aws-fsx-lustre-pricing" in line.source
    # `rackform diff`'s cost delta is the difference of the totals: the file system's month.
    assert with_fsx.usd_per_month - without.usd_per_month == pytest.approx(4800 * 0.210)
    scratch = _cost(tmp_path, fsx(deployment="SCRATCH_2", storage_tib=1.2))
    assert [ln.usd_per_month for ln in scratch.compute if ln.item.startswith("FSx")] == [
        pytest.approx(1200 * 0.140)
    ]


def test_an_existing_file_system_is_not_this_stacks_cost(tmp_path):
    cost = _cost(tmp_path, fsx(file_system_id="fs-0123456789abcdef0"))
    assert not [ln for ln in cost.compute if ln.item.startswith("FSx")]
    assert "the shared tier fs-0123456789abcdef0 is not created here: not priced" in cost.notes


def test_the_catalog_prices_every_throughput_the_schema_offers():
    from rackform.blueprint.schema.shared import PER_TIB
    from rackform.catalog.preflight import load_preflight_figures

    prices = load_preflight_figures().shared.fsx_usd_per_gb_month.value
    assert {d: sorted(p) for d, p in prices.items()} == {d: sorted(t) for d, t in PER_TIB.items()}


def efs(**kw) -> dict:
    return variant(AWS_TRAINING, **{"storage": {"shared": {"holds": ["home"], "efs": kw}}})


def test_efs_with_a_mount_target_in_the_nodes_subnet_mounted_as_nfs_41(tmp_path):
    records = plan(tmp_path, efs())
    fs = one(records, "efs/fileSystem:FileSystem")
    assert fs.inputs["encrypted"] is True and fs.inputs["throughputMode"] == "elastic"
    mt = one(records, "efs/mountTarget:MountTarget")
    assert fs.protect and mt.protect and "-data::" in mt.urn
    (subnet,) = [r for r in of_type(records, "ec2/subnet:Subnet") if r.name.endswith("-nodes")]
    assert mt.inputs["subnetId"] == f"<{subnet.name}>.id"
    assert mt.inputs["fileSystemId"] == f"<{fs.name}>.id"
    got = _configure_vars(records)
    # EFS's recommended NFS settings, its DNS name from the stack, the file system's root.
    assert got["shared_storage_type"] == "nfs" and got["shared_storage_nfs_version"] == "4.1"
    assert got["shared_storage_address"] == f"<{fs.name}>.dnsName"
    assert got["shared_storage_export"] == "/"
    assert got["shared_storage_options"] == [
        "rsize=1048576", "wsize=1048576", "timeo=600", "retrans=2", "noresvport",
    ]  # fmt: skip


def test_an_existing_efs_is_read_not_created_nor_priced(tmp_path):
    records = plan(tmp_path, efs(file_system_id="fs-0abc1234", retain=False))
    assert of_type(records, "efs/fileSystem:FileSystem") == []
    assert of_type(records, "efs/mountTarget:MountTarget") == []
    got = _configure_vars(records)
    assert got["shared_storage_address"] == "<t-train-default-shared-existing>.dnsName"
    cost = _cost(tmp_path, efs())
    assert "the EFS shared tier is billed by what it holds and moves: not priced" in cost.notes
