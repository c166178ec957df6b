"""Preflight's capacity rules at `up`: a node group's capacity reservation or block exists, is of
its type, holds its nodes, sits in the cluster's zone and outlasts the run. EC2's answers come
from DescribeCapacityReservations, which moto (5.x) does not serve: they are recorded in the
documented shape (API reference, DescribeCapacityReservations:
https://docs.aws.amazon.com/AWSEC2/latest/APIReference/API_DescribeCapacityReservations.html)
and given to a real boto3 client through botocore's Stubber, which checks request and response
against botocore's EC2 model."""

from __future__ import annotations

import copy
from datetime import UTC, datetime, timedelta

import boto3
import pytest
from botocore.stub import Stubber
from planhelp import AWS_TRAINING, write_blueprint

from rackform.blueprint.loader import load_effective
from rackform.engine import Blocked, compile_effective, with_capacity
from rackform.preflight.prepared import Prepared
from rackform.preflight.report import run
from rackform.stack.errors import ProgramError
from rackform.targets.aws.capacity import describe, observe
from rackform.targets.aws.runtime import RUNTIME

OP = "describe_capacity_reservations"
BLOCK = "cr-0123456789abcdef0"
NOW = datetime(2026, 12, 5, 12, 0, tzinfo=UTC)


def ec2():
    return boto3.client(
        "ec2", region_name="us-east-1", aws_access_key_id="x", aws_secret_access_key="x"
    )


def described(
    rid=BLOCK,
    *,
    itype="p5.48xlarge",
    zone="us-east-1a",
    total=2,
    state="active",
    end=NOW + timedelta(days=7),
    block=True,
):
    """One reservation as EC2 documents it."""
    return {
        "CapacityReservationId": rid,
        "InstanceType": itype,
        "InstancePlatform": "Linux/UNIX",
        "AvailabilityZone": zone,
        "Tenancy": "default",
        "TotalInstanceCount": total,
        "AvailableInstanceCount": total,
        "State": state,
        "StartDate": NOW - timedelta(hours=1),
        "EndDate": end,
        "EndDateType": "limited",
        "InstanceMatchCriteria": "targeted",
        "ReservationType": "capacity-block" if block else "default",
    }


def blueprint(tmp_path, *, count=2, workload=None):
    doc = copy.deepcopy(AWS_TRAINING)
    doc["node_groups"] = [
        {"name": "gpu", "instance_type": "p5.48xlarge", "count": 1},
        {
            "name": "blk",
            "instance_type": "p5.48xlarge",
            "count": count,
            "market": "capacity-block",
            "reservation_id": BLOCK,
        },
    ]
    if workload:
        doc["workload"] |= workload
    path = write_blueprint(tmp_path, doc)
    plan = compile_effective(load_effective(path))
    return Prepared(plan, run(plan))


def facts(*reservations):
    client = ec2()
    with Stubber(client) as stub:
        stub.add_response(
            OP,
            {"CapacityReservations": list(reservations)},
            {"CapacityReservationIds": sorted({r["CapacityReservationId"] for r in reservations})},
        )
        return describe(client, sorted({r["CapacityReservationId"] for r in reservations}), NOW)


def codes_of(prepared):
    return {lf.finding.code: lf for lf in prepared.report.findings}


def test_offline_nothing_is_read_and_nothing_found(tmp_path):
    p = blueprint(tmp_path)
    assert p.plan.capacity is None
    assert not any(c.startswith("aws-reservation") for c in codes_of(p))
    assert with_capacity(p, None) is p


def test_a_block_that_covers_the_group_in_its_zone_and_outlasts_the_run_passes(tmp_path):
    p = with_capacity(blueprint(tmp_path), facts(described()))
    assert p.plan.capacity.reservations[BLOCK].total == 2
    assert not [c for c in codes_of(p) if "reservation" in c or "capacity" in c]


def test_a_block_smaller_than_the_group_is_an_error_located_at_the_groups_id(tmp_path):
    with pytest.raises(Blocked) as err:
        with_capacity(blueprint(tmp_path, count=3), facts(described(total=2)))
    (line,) = [x for x in err.value.lines if "aws-reservation-short" in x]
    assert "holds 2 instances" in line and "need 3" in line and "blk (3)" in line
    assert "bp.yaml:18:19: node_groups[1].reservation_id: error" in line


def test_a_block_in_another_zone_is_an_error_naming_the_zone(tmp_path):
    with pytest.raises(Blocked) as err:
        with_capacity(blueprint(tmp_path), facts(described(zone="us-east-1b")))
    assert any("aws-reservation-zone" in x and "us-east-1b" in x for x in err.value.lines)


@pytest.mark.parametrize(
    ("raw", "says"),
    [
        (described(state="expired"), "is expired"),
        (described(itype="p5e.48xlarge"), "holds p5e.48xlarge, not p5.48xlarge"),
        (described(rid="cr-0000000000000000a"), "describes no capacity reservation"),
    ],
)
def test_an_unusable_reservation_is_an_error(tmp_path, raw, says):
    with pytest.raises(Blocked) as err:
        with_capacity(blueprint(tmp_path), facts(raw))
    assert any("aws-reservation-unusable" in x and says in x for x in err.value.lines)


def test_a_block_that_ends_before_the_run_is_a_warning_with_the_runs_end(tmp_path):
    # 7B parameters x 1,000B tokens on 24 H100s: far longer than a day's block.
    p = blueprint(tmp_path, workload={"tokens_b": 1000, "expected_utilization_pct": 80})
    p = with_capacity(p, facts(described(end=NOW + timedelta(days=1))))
    f = codes_of(p)["aws-capacity-block-ends"].finding
    assert f.level == "warning"
    assert "1000B tokens at 80% utilization" in f.message
    assert "30 minutes before" in f.message and "capacity-blocks-monitor" in f.message
    # Without a run length only the block's own end counts: 20 minutes left is too little.
    p = with_capacity(blueprint(tmp_path), facts(described(end=NOW + timedelta(minutes=20))))
    assert "would end" not in codes_of(p)["aws-capacity-block-ends"].finding.message
    # A reservation that is no capacity block is never terminated at its end.
    p = with_capacity(blueprint(tmp_path), facts(described(end=NOW, block=False)))
    assert "aws-capacity-block-ends" not in codes_of(p)


def test_pages_are_followed_and_an_unknown_id_is_asked_alone():
    client = ec2()
    other = "cr-0fedcba9876543210"
    with Stubber(client) as stub:
        stub.add_response(
            OP,
            {"CapacityReservations": [described()], "NextToken": "t2"},
            {"CapacityReservationIds": [BLOCK, other]},
        )
        stub.add_response(
            OP,
            {"CapacityReservations": [described(other, total=4)]},
            {"CapacityReservationIds": [BLOCK, other], "NextToken": "t2"},
        )
        got = describe(client, [BLOCK, other], NOW)
        stub.assert_no_pending_responses()
    assert got.reservations[other].total == 4 and got.read_at == NOW
    client = ec2()
    with Stubber(client) as stub:
        stub.add_client_error(OP, "InvalidCapacityReservationId.NotFound", "no such")
        stub.add_response(
            OP, {"CapacityReservations": [described()]}, {"CapacityReservationIds": [BLOCK]}
        )
        stub.add_client_error(
            OP,
            "InvalidCapacityReservationId.NotFound",
            "no such",
            expected_params={"CapacityReservationIds": [other]},
        )
        got = describe(client, [BLOCK, other], NOW)
    assert set(got.reservations) == {BLOCK}


def test_a_failed_read_refuses_up_in_one_line(tmp_path, monkeypatch):
    from rackform.targets.aws import api

    def client(service, region):
        c = ec2()
        stub = Stubber(c)
        stub.add_client_error(OP, "UnauthorizedOperation", "not allowed")
        stub.activate()
        return c

    monkeypatch.setattr(api, "boto3_client", client)
    plan = blueprint(tmp_path).plan
    with pytest.raises(ProgramError, match="UnauthorizedOperation"):
        RUNTIME.capacity(plan)
    # No group on reserved capacity: nothing is read.
    assert (
        observe(compile_effective(load_effective(write_blueprint(tmp_path, AWS_TRAINING)))) is None
    )
