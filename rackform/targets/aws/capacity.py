"""The capacity reservations and capacity blocks a cluster's node groups launch into, as EC2
describes them (DescribeCapacityReservations, paged: API reference,
https://docs.aws.amazon.com/AWSEC2/latest/APIReference/API_DescribeCapacityReservations.html),
read by `up` before anything is created so preflight's capacity rules can check them. moto (5.x)
serves no such call: its tests give botocore's Stubber answers in the documented shape."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from rackform.plan.model import Plan
from rackform.plan.targets.aws.capacity import Capacity, Reservation

CAPACITY_BLOCK = "capacity-block"  # ReservationType of a capacity block


def _reservation(raw: dict) -> Reservation:
    end = raw.get("EndDate")
    return Reservation(
        id=raw["CapacityReservationId"],
        instance_type=raw.get("InstanceType", ""),
        zone=raw.get("AvailabilityZone", ""),
        total=int(raw.get("TotalInstanceCount", 0)),
        state=raw.get("State", ""),
        end=None if end is None else end.astimezone(UTC),
        capacity_block=raw.get("ReservationType") == CAPACITY_BLOCK,
    )


def describe(client: Any, ids: list[str], now: datetime) -> Capacity:
    """The reservations `ids` as EC2 describes them at `now`. An id EC2 does not know fails the
    whole call (InvalidCapacityReservationId.NotFound): each is then asked alone, so the known
    ones are still described and the unknown one is simply absent."""
    from botocore.exceptions import ClientError

    found: dict[str, Reservation] = {}
    try:
        for page in client.get_paginator("describe_capacity_reservations").paginate(
            CapacityReservationIds=ids
        ):
            for raw in page.get("CapacityReservations", []):
                found[raw["CapacityReservationId"]] = _reservation(raw)
    except ClientError as exc:
        if "NotFound" not in exc.response.get("Error", {}).get("Code", ""):
            raise
        for one in ids:
            try:
                out = client.describe_capacity_reservations(CapacityReservationIds=[one])
            except ClientError as each:
                if "NotFound" in each.response.get("Error", {}).get("Code", ""):
                    continue
                raise
            for raw in out.get("CapacityReservations", []):
                found[raw["CapacityReservationId"]] = _reservation(raw)
    return Capacity(now, found)


def observe(
    plan: Plan,
    client: Callable[[str, str], Any] | None = None,
    now: Callable[[], datetime] = lambda: datetime.now(UTC),
) -> Capacity | None:
    """What EC2 says of the plan's reservations now; None where no group launches into one."""
    ids = sorted({g.reservation_id for g in plan.node_groups if g.reserved})
    if not ids:
        return None
    if client is None:
        from rackform.targets.aws.api import boto3_client as client
    return describe(client("ec2", plan.target.region), ids, now())
