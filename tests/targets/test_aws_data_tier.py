"""The data tier's own stack on AWS (rackform/targets/aws/data_tier.py), under Pulumi's mocks: it
holds exactly the pieces data_layout lists, protected, depending on nothing of the cluster's;
the cluster's stack reads their ids; each piece's alias is the URN `pulumi state move` gives the
same resource of an existing stack (so a move replaces nothing); pieces found in AWS are
imported, not created again; `rackform destroy --data`'s release lifts the protection."""

from __future__ import annotations

import json

import pytest
from planhelp import AWS_INFERENCE, AWS_TRAINING, write_blueprint

from rackform.blueprint.loader import load_effective
from rackform.engine import compile_effective
from rackform.plan.compile import ADOPT, RELEASE
from rackform.plan.targets.aws.data_layout import former_urns, moved_urn, pieces
from rackform.stack.errors import ProgramError
from rackform.stack.offline import record_data, record_stacks
from rackform.targets.runtimes import runtime

FSX = {"storage": {"shared": {"fsx": {"import_path": "s3://ml-data/tok/"}}}}
EFS = {"storage": {"shared": {"holds": ["home"], "efs": {}}}}


def _plan(tmp_path, doc):
    return compile_effective(load_effective(write_blueprint(tmp_path, doc)))


def _customs(records):
    return [r for r in records if r.custom]


@pytest.mark.parametrize("tier", [FSX, EFS], ids=["fsx", "efs"])
def test_the_data_stack_holds_exactly_the_layouts_pieces_protected(tmp_path, tier):
    plan = _plan(tmp_path, {**AWS_TRAINING, **tier})
    assert plan.data_stack == "t-train-default-data"
    records, outputs = record_data(plan, runtime(plan.target_type))
    assert sorted((r.type, r.name) for r in _customs(records)) == sorted(
        (p.type, p.name) for p in pieces(plan)
    )
    assert all(r.protect for r in records) and not any(r.retain_on_delete for r in records)
    # What the cluster's stack reads: the network's ids and what the nodes mount.
    assert outputs["subnet_id"] == "<t-train-default-nodes>.id"
    assert outputs["security_group_id"] == "<t-train-default-sg>.id"
    assert outputs["file_system_id"] == "<t-train-default-shared>.id"
    assert outputs["dns_name"] == "<t-train-default-shared>.dnsName"


def test_the_cluster_stack_reads_the_data_stacks_network_and_holds_none_of_it(tmp_path):
    plan = _plan(tmp_path, {**AWS_TRAINING, **FSX})
    (_, data_records), (_, records) = record_stacks(plan, runtime(plan.target_type))
    held = {r.name for r in data_records}
    assert not held & {r.name for r in records}
    by_name = {r.name: r for r in records}
    # Everything else of the network is the cluster's, in the data stack's VPC and subnet.
    assert by_name["t-train-default-igw"].inputs["vpcId"] == "<t-train-default-vpc>.id"
    assert by_name["t-train-default-nodes-rta"].inputs["subnetId"] == "<t-train-default-nodes>.id"
    eice = by_name["t-train-default-eice"].inputs
    assert eice["securityGroupIds"] == ["<t-train-default-eice-sg>.id"]
    nic = by_name["t-train-default-gpu-lt"].inputs["networkInterfaces"][0]
    assert nic["subnetId"] == "<t-train-default-nodes>.id"
    assert nic["securityGroups"] == ["<t-train-default-sg>.id"]
    # The nodes mount what the data stack made.
    got = by_name["t-train-default-configure"].inputs["group_vars"]
    assert got["shared_storage_address"] == "<t-train-default-shared>.dnsName"


def test_without_a_kept_file_system_there_is_one_stack_as_before(tmp_path):
    for doc in (
        AWS_TRAINING,
        {**AWS_TRAINING, "storage": {"shared": {"fsx": {"retain": False}}}},
        {
            **AWS_TRAINING,
            "storage": {"shared": {"fsx": {"file_system_id": "fs-0123456789abcdef0"}}},
        },
        {**AWS_INFERENCE, "storage": {"shared": {"holds": ["home"], "efs": {"retain": False}}}},
    ):
        plan = _plan(tmp_path, doc)
        assert plan.data_stack is None and pieces(plan) == ()
        assert [s for s, _ in record_stacks(plan, runtime(plan.target_type))] == [plan.stack]


@pytest.mark.parametrize("tier", [FSX, EFS], ids=["fsx", "efs"])
def test_each_alias_is_the_urn_a_state_move_gives_the_same_resource_of_an_existing_stack(
    tmp_path, tier
):
    """The stack as it was before the data tier had its own (today: the same blueprint with
    retain: false keeps that layout): each piece's URN there, with the stack renamed as `pulumi
    state move` renames it, is the alias the data stack's program declares."""
    kept = _plan(tmp_path, {**AWS_TRAINING, **tier})
    kind = "fsx" if "fsx" in tier["storage"]["shared"] else "efs"
    former = {
        **tier["storage"]["shared"],
        kind: {**tier["storage"]["shared"][kind], "retain": False},
    }
    old = _plan(tmp_path, {**AWS_TRAINING, "storage": {"shared": former}})
    ((_, old_records),) = record_stacks(old, runtime(old.target_type))
    old_by_urn = {engine_urn(r, old_records): r for r in old_records}
    assert set(former_urns(kept)) <= set(old_by_urn)  # every piece was in the cluster's stack
    records, _ = record_data(kept, runtime(kept.target_type))
    by_name = {r.name: r for r in _customs(records)}
    for urn, piece in former_urns(kept).items():
        moved = urn.replace("urn:pulumi:t-train-default::", "urn:pulumi:t-train-default-data::", 1)
        assert moved_urn(kept, piece) == moved
        assert by_name[piece.name].aliases == (moved,)
        # ...and what the program declares is what the old stack held: nothing to update (but
        # the digest tag, which differs here because the two blueprints do: retain).
        assert _but_digest(by_name[piece.name].inputs) == _but_digest(old_by_urn[urn].inputs)


def _but_digest(inputs: dict) -> dict:
    tags = {k: v for k, v in (inputs.get("tags") or {}).items() if k != "rackform:digest"}
    return {**inputs, "tags": tags}


def engine_urn(record, records) -> str:
    """The URN the engine gives a record: its ancestors' types and its own joined by `$`, then
    its name (pulumi sdk/go/common/resource/urn: `urn:pulumi:<Stack>::<Project>::
    <Qualified$Type$Name>::<Name>`; the SDKs' createUrn prefix the parent's whole qualified
    type). The mock monitor prefixes the parent's own type only, so its URNs are not these."""
    by_urn = {r.urn: r for r in records}
    chain, at = [record.type], by_urn.get(record.parent_urn or "")
    while at is not None:
        chain.insert(0, at.type)
        at = by_urn.get(at.parent_urn or "")
    stack = record.urn.split("::")[0].removeprefix("urn:pulumi:")
    return f"urn:pulumi:{stack}::rackform::{'$'.join(chain)}::{record.name}"


def test_pieces_found_in_aws_are_imported_and_a_group_keeps_its_name(tmp_path):
    plan = _plan(tmp_path, {**AWS_TRAINING, **FSX})
    adopt = {
        "t-train-default-vpc": {"id": "vpc-0a"},
        "t-train-default-sg": {"id": "sg-0b", "name": "t-train-default-sg-1f2e3d4"},
        "t-train-default-shared": {"id": "fs-0123456789abcdef0"},
    }
    records, _ = record_data(plan, runtime(plan.target_type), config={ADOPT: json.dumps(adopt)})
    by_name = {r.name: r for r in records}
    assert by_name["t-train-default-vpc"].import_id == "vpc-0a"
    assert by_name["t-train-default-shared"].import_id == "fs-0123456789abcdef0"
    sg = by_name["t-train-default-sg"]
    assert (sg.import_id, sg.inputs["name"]) == ("sg-0b", "t-train-default-sg-1f2e3d4")
    # What was not found is created.
    assert by_name["t-train-default-nodes"].import_id == ""
    assert "name" not in by_name["t-train-default-eice-sg"].inputs


@pytest.mark.parametrize(
    ("value", "says"),
    [
        ('{"t-train-default-igw": {"id": "igw-1"}}', "does not hold"),
        ("not json", "is not JSON"),
        ('{"t-train-default-vpc": "vpc-1"}', "must map names"),
    ],
)
def test_an_adoption_the_program_cannot_follow_is_refused(tmp_path, value, says):
    plan = _plan(tmp_path, {**AWS_TRAINING, **FSX})
    with pytest.raises(ProgramError, match=says):
        record_data(plan, runtime(plan.target_type), config={ADOPT: value})


def test_the_release_lifts_the_protection_for_destroy_data_only(tmp_path):
    plan = _plan(tmp_path, {**AWS_TRAINING, **FSX})
    released, _ = record_data(plan, runtime(plan.target_type), config={RELEASE: "true"})
    assert not any(r.protect for r in released)
    kept, _ = record_data(plan, runtime(plan.target_type), config={RELEASE: ""})
    assert all(r.protect for r in kept)
