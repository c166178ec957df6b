"""Each node's lifecycle state from Slurm's node states and reasons and the stack's records (the
rolling change's and heal's), as `rackform status` shows it; a rollout's progress; and why a
stack is in maintenance, which keeps reap from calling it idle."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rackform.lifecycle.directory import StateDir
from rackform.lifecycle.lock import Held
from rackform.lifecycle.record import DONE, FAILED, Record, RecordError, Store
from rackform.lifecycle.states import NodeState, node_state


@dataclass(frozen=True)
class NodeStatus:
    node: str
    state: NodeState
    slurm: str  # sinfo's state
    reason: str
    batch: str = ""  # `rollout batch 2 (applied)`, `heal (drained)`

    def as_json(self) -> dict[str, Any]:
        out = {"node": self.node, "state": str(self.state), "slurm": self.slurm}
        for key in ("reason", "batch"):
            if getattr(self, key):
                out[key] = getattr(self, key)
        return out


def _batches(rec: Record | None) -> dict[str, tuple[int, str]]:
    """node -> (batch number, its stage) where the record is under way or stopped."""
    if rec is None or not rec.live:
        return {}
    return {n: (i + 1, b.status) for i, b in enumerate(rec.batches) for n in b.nodes}


def node_status(
    nodes: list[str],
    slurm: Mapping[str, tuple[str, str]],
    rollout: Record | None,
    heal: Record | None,
) -> list[NodeStatus]:
    """Each of `nodes`' state, from sinfo's (state, reason) by node and the two records."""
    rolled, healed = _batches(rollout), _batches(heal)
    out = []
    for n in nodes:
        state, reason = slurm.get(n, ("", ""))
        reason = "" if reason.lower() in ("none", "(null)") else reason
        where, stage = "", ""
        if n in rolled:
            stage, where = rolled[n][1], f"rollout batch {rolled[n][0]} ({rolled[n][1]})"
        elif n in healed:
            stage, where = healed[n][1], f"heal ({healed[n][1]})"
        out.append(NodeStatus(n, node_state(state, reason, stage), state, reason, where))
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


def maintenance(rollout: Record | None, heal: Record | None) -> str | None:
    """Why the records say the stack is in maintenance (a rolling change stopped or under way,
    heal remediating), or None."""
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


def in_maintenance(directory: Path | StateDir, stack: str) -> str | None:
    """Why the stack is in maintenance now (its records, or a run holding the stack's lock), or
    None: what keeps `rackform reap` from calling it idle. A record that cannot be read counts
    as maintenance (never as none)."""
    try:
        store = Store(directory, stack)
        rollout = store.read()
        heal = Store(directory, stack, kind="heal").read()
        if store.lock_path.exists():  # never made here: reap's dry run writes nothing
            with store.lock():
                pass
    except Held as exc:
        return str(exc)
    except (RecordError, OSError) as exc:
        return f"its maintenance record cannot be read: {exc}"
    return maintenance(rollout, heal)
