"""What EC2 says of the capacity reservations and capacity blocks a cluster's node groups launch
into, as preflight's capacity rules read it: facts observed at `up` (EC2 DescribeCapacity-
Reservations), never in the offline plan, which has none (`Plan.capacity` is None there)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime


@dataclass(frozen=True)
class Reservation:
    """One capacity reservation (a capacity block is one too) as EC2 describes it."""

    id: str
    instance_type: str
    zone: str  # its Availability Zone
    total: int  # TotalInstanceCount: the instances it holds
    state: str  # active | scheduled | expired | cancelled | pending | failed | ...
    end: datetime | None  # EndDate (None: no end, an open-ended reservation)
    capacity_block: bool  # ReservationType capacity-block


@dataclass(frozen=True)
class Capacity:
    """The reservations of the plan's node groups, as read at `read_at` (timezone-aware): an id
    EC2 did not describe is absent."""

    read_at: datetime
    reservations: Mapping[str, Reservation]
