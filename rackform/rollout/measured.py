"""What a rolling run measured: each batch's steps (drain with its jobs' requeue, apply,
re-validate) in seconds, summed up as the median over the batches that finished. A rollout that
finishes keeps it with the record of what the nodes run (`<stack>.applied.json`, `measured`), and
the next rollout's estimate (`rackform diff`, a rolling `rackform configure`) is made from it
instead of the catalog's per-node minutes (the catalog's rollout.yaml).

The apply step ran the roles that rollout changed (and a reboot where it needed one): its time is
shared among them in the proportions of the catalog's minutes, so a later change to one of those
roles is estimated from this cluster's own pace; a role it did not run keeps the catalog's."""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from statistics import median
from typing import Any

from rackform.lifecycle.directory import StateDir
from rackform.lifecycle.record import DONE, Record, RecordError, Store

STEPS = ("drain", "apply", "validate")


@dataclass(frozen=True)
class Measured:
    at: float  # when the rollout finished (epoch seconds)
    batches: int  # how many batches the medians are of
    cls: str  # that rollout's class (a reboot's time is part of its apply step)
    roles: tuple[str, ...]  # the roles its apply step ran (empty: every role)
    drain_s: float
    apply_s: float
    validate_s: float

    def as_json(self) -> dict[str, Any]:
        return {**asdict(self), "roles": list(self.roles)}

    @classmethod
    def from_json(cls, doc: Any) -> Measured | None:
        """None for what is not a measurement (absent, or a hand edit that broke it): the
        estimate then falls back to the catalog, as before any rollout."""
        if not isinstance(doc, Mapping):
            return None
        try:
            m = cls(
                float(doc["at"]),
                int(doc["batches"]),
                str(doc["cls"]),
                tuple(str(r) for r in doc.get("roles") or ()),
                float(doc["drain_s"]),
                float(doc["apply_s"]),
                float(doc["validate_s"]),
            )
        except (KeyError, TypeError, ValueError):
            return None
        seconds = (m.drain_s, m.apply_s, m.validate_s)
        return m if m.batches > 0 and all(s >= 0 for s in seconds) else None

    def describe(self) -> str:
        day = time.strftime("%Y-%m-%d", time.gmtime(self.at))
        return (
            f"measured by this cluster's last rolling change ({day}, median of {self.batches}"
            f" batch{'es' if self.batches != 1 else ''}: drain {_min(self.drain_s)}, apply"
            f" {_min(self.apply_s)}, re-validation {_min(self.validate_s)})"
        )


def _min(seconds: float) -> str:
    return f"{seconds / 60:.1f} min"


def measure(rec: Record, at: float | None = None) -> Measured | None:
    """The medians over the record's batches that finished with every step timed; None when
    none did (a rollout that measured nothing leaves the last measurement as it was)."""
    timed = [b.seconds for b in rec.batches if b.status == DONE and set(STEPS) <= set(b.seconds)]
    if not timed:
        return None
    med = {s: median(t[s] for t in timed) for s in STEPS}
    return Measured(
        time.time() if at is None else at,
        len(timed),
        rec.cls,
        tuple(rec.roles),
        med["drain"],
        med["apply"],
        med["validate"],
    )


def last_measured(directory: Path | StateDir, stack: str) -> Measured | None:
    """What the stack's last rolling change measured, from its record in the state directory;
    None where there is none (or it cannot be read: the estimate is the catalog's then)."""
    try:
        doc = Store(directory, stack).applied()
    except RecordError:
        return None
    return Measured.from_json((doc or {}).get("measured"))
