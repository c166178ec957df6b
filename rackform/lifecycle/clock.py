"""The clock a lifecycle decision is given: seconds as a float, read when the caller asks. A run
passes the wall clock (`WALL`) once, at its edge; a test or a simulation passes its own, and the
same decision comes out for the same evidence and time."""

from __future__ import annotations

import time
from collections.abc import Callable

Clock = Callable[[], float]

WALL: Clock = time.time  # unix time: what the audit log, records and Prometheus speak
STEPS: Clock = time.monotonic  # for how long a step took, never for when
