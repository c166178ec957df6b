"""What one action on the world came to, per subject, and the error of an action that could not
start at all: the words every step (a drain, a power-off, a termination, a notification) reports
in."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Outcome:
    """One subject of an action (a host, a stack, an autoscaling group): done or failed, why."""

    subject: str
    ok: bool
    detail: str

    def as_dict(self) -> dict:
        return {"subject": self.subject, "ok": self.ok, "detail": self.detail}


class ActionError(Exception):
    """The action could not start at all (a missing tool, credentials): one line."""
