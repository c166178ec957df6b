"""Each node's lifecycle state, from Slurm's node states and reasons and the stack's records
(the rolling change's and heal's, rackform/rollout/record.py): what `rackform status` shows.

| state | when |
| --- | --- |
| in service | Slurm runs jobs there (idle, allocated, mixed, ...) |
| draining | drained, a job still running |
| in maintenance | drained by a rollout or heal batch that is under way |
| validating | its batch applied, re-validation under way |
| quarantined | drained by heal for a person, its batch failed, or left drained by a rollout that
  ended (abandoned): stays out until someone acts |
| drained | drained by someone else (the reason says who and why) |
| down | down, failed, not responding |
| unknown | Slurm does not know it |
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rackform.rollout.record import APPLIED, DONE, FAILED, Held, Record, RecordError, Store
from rackform.rollout.slurm import out_of_service

# Slurm reasons rackform writes: a batch under way (`rackform rollout|heal <digest> batch N`,
# rackform/rollout/roll.py), and heal's drain for a person (`rackform heal: <evidence>`).
OURS = ("rackform rollout ", "rackform heal ")
TICKET = "rackform heal:"


@dataclass(frozen=True)
class NodeStatus:
    node: str
    state: str
    slurm: str  # sinfo's state
    reason: str
    batch: str = ""  # `rollout batch 2 (applied)`, `heal (drained)`

    def as_json(self) -> dict[str, Any]:
        out = {"node": self.node, "state": self.state, "slurm": self.slurm}
        for key in ("reason", "batch"):
            if getattr(self, key):
                out[key] = getattr(self, key)
        return out


def _batches(rec: Record | None) -> dict[str, tuple[int, str]]:
    """node -> (batch number, its status) where the record is under way or stopped."""
    if rec is None or not rec.live:
        return {}
    return {n: (i + 1, b.status) for i, b in enumerate(rec.batches) for n in b.nodes}


def node_status(
    nodes: list[str],
    slurm: Mapping[str, tuple[str, str]],
    rollout: Record | None,
    heal: Record | None,
) -> list[NodeStatus]:
    rolled, healed = _batches(rollout), _batches(heal)
    out = []
    for n in nodes:
        state, reason = slurm.get(n, ("", ""))
        reason = "" if reason.lower() in ("none", "(null)") else reason
        base = state.rstrip("*~#!%$@^-").lower()
        where = ""
        status: tuple[int, str] | None = None
        if n in rolled:
            status, where = rolled[n], f"rollout batch {rolled[n][0]} ({rolled[n][1]})"
        elif n in healed:
            status, where = healed[n], f"heal ({healed[n][1]})"
        step = status[1] if status else ""
        if not state:
            what = "unknown"
        elif not out_of_service(state):
            what = "in service"
        elif any(w in base for w in ("down", "fail")) or state.endswith("*"):
            what = "down"
        elif step == FAILED or reason.startswith(TICKET):
            what = "quarantined"
        elif step == APPLIED:
            what = "validating"
        elif step not in ("", DONE):
            what = "in maintenance"
        elif reason.startswith(OURS):  # left drained by a rollout or heal run that ended
            what = "quarantined"
        elif base == "draining":
            what = "draining"
        else:
            what = "drained"
        out.append(NodeStatus(n, what, state, reason, where))
    return out


def progress(rec: Record | None) -> dict[str, Any] | None:
    """A rollout's progress: status, batches done of all, the batch it stands at, why."""
    if rec is None:
        return None
    done = sum(b.status == DONE for b in rec.batches)
    at = rec.next_batch()
    out = {
        "status": rec.status,
        "digest": rec.digest,
        "class": rec.cls,
        "batches": len(rec.batches),
        "done": done,
        "at": None if at is None else at + 1,
    }
    return {**out, "why": rec.why} if rec.why else out


def in_maintenance(directory: Path, stack: str) -> str | None:
    """Why the stack is in maintenance now (a rolling change stopped or under way, heal
    remediating, a run holding the stack's lock), or None: what keeps `rackform reap` from
    calling it idle. A record that cannot be read counts as maintenance (never as none)."""
    try:
        rollout = Store(directory, stack).read()
        heal = Store(directory, stack, kind="heal").read()
        if (directory / f"{stack}.lock").exists():  # never made here: reap's dry run writes nothing
            with Store(directory, stack).lock():
                pass
    except Held as exc:
        return str(exc)
    except (RecordError, OSError) as exc:
        return f"its maintenance record cannot be read: {exc}"
    if rollout is not None and rollout.live:
        at = rollout.next_batch()
        return (
            f"a rolling change is {rollout.status} at batch {(at or 0) + 1} of"
            f" {len(rollout.batches)}"
        )
    if heal is not None and any(b.status not in (DONE, FAILED) for b in heal.batches):
        nodes = [n for b in heal.batches if b.status not in (DONE, FAILED) for n in b.nodes]
        return f"heal is remediating {', '.join(nodes)}"
    return None
