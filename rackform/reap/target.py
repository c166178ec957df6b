"""What a target's reaper gives the generic reap run: the cluster's live state as the target
itself reports it, and its idle actions, each subject's outcome. The run never branches on the
target; each target implements this in its own package."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from rackform.lifecycle.outcome import Outcome
from rackform.plan.model import Plan


@dataclass(frozen=True)
class Live:
    """What the target says about the cluster now, read the same way by a dry run and --apply.

    `protected`: a protect tag set outside the blueprint (None where the target has no live
    tags); `started`: unix time the oldest running node started, where known; `snoozed_until` /
    `snooze_reason`: a snooze set outside the blueprint (e.g. the AWS tag rackform:snooze-until),
    None where none is set; `off`: the cluster is already in the state the action leaves it in
    (every host powered off, every instance stopped, every group at zero), so there is nothing
    to do; None where unknown; `error`: the live state could not be read (then nothing is done).
    """

    protected: bool | None = None
    started: float | None = None
    detail: str = ""
    error: str | None = None
    snoozed_until: float | None = None
    snooze_reason: str = ""
    off: bool | None = None


class Reaper(Protocol):
    def live(self, plan: Plan, action: str | None = None) -> Live:
        """The cluster's live state; with `action`, whether it is already `off` for it."""
        ...

    def act(self, plan: Plan, action: str) -> list[Outcome]: ...

    def snooze(self, plan: Plan, until: float, reason: str) -> list[Outcome]:
        """Record a snooze on the cluster itself where the target can (live tags); [] where it
        cannot (then the reaper's state directory holds it)."""
        ...
