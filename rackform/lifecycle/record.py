"""A stack's lifecycle records, in the state directory: what a rolling change or heal is doing
to its nodes, batch by batch, and what the nodes run.

`<stack>.json` is the rollout: its batches in order and the stage each stands at (`states.Stage`),
written whole after every step (a temporary file, fsync, rename), so a run killed at any moment
leaves the last step it finished, and a later run resumes there without touching a finished
batch twice; `<stack>.heal.json` is heal's, the same way. `<stack>.applied.json` is what the
nodes run since the last configuration that finished: the roles' variables a later rolling
change is compared with, and what the last rolling run measured (the next estimate's basis).
`<stack>.log` is the stack's audit log (JSON lines, appended only). The stack's lock is an flock
on `<stack>.lock`, which heal and rolling changes share: a second run finds it held and stops,
naming it."""

from __future__ import annotations

import json
import os
import time
from contextlib import AbstractContextManager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from rackform.lifecycle.audit import AuditLog
from rackform.lifecycle.directory import StateDir, state_dir
from rackform.lifecycle.lock import FileLock
from rackform.lifecycle.states import STEPS, Stage

PENDING, DRAINED, APPLIED = Stage.PENDING, Stage.DRAINED, Stage.APPLIED
VALIDATED, DONE, FAILED, ROLLED_BACK = Stage.VALIDATED, Stage.DONE, Stage.FAILED, Stage.ROLLED_BACK


class RecordError(Exception):
    """A record that cannot be read or used (hand-edited, another rollout's): one line."""


@dataclass
class Batch:
    nodes: list[str]
    status: Stage = Stage.PENDING
    why: str = ""
    seconds: dict[str, float] = field(default_factory=dict)  # step -> seconds it took
    # What became of the jobs on the batch at its drain (lifecycle/elastic.Released.as_json).
    jobs: list[dict[str, Any]] = field(default_factory=list)


@dataclass
class Record:
    stack: str
    digest: str  # the blueprint digest the rollout brings the nodes to
    cls: str
    batches: list[Batch]
    old: dict[str, Any]  # the roles' variables before (a rollback applies them again)
    new: dict[str, Any]  # ...and after
    roles: list[str] = field(default_factory=list)  # the roles the change touches ([]: every role)
    status: str = "running"  # running | stopped | done | rolled back | abandoned
    why: str = ""
    started: float = field(default_factory=time.time)

    def as_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, doc: Any, where: Path) -> Record:
        try:
            batches = [Batch(**b) for b in doc.pop("batches")]
            rec = cls(**doc, batches=batches)
        except (TypeError, KeyError, AttributeError) as exc:
            raise RecordError(f"{where}: not a rollout record ({exc})") from None
        bad = [b.status for b in rec.batches if b.status not in (*STEPS, FAILED, ROLLED_BACK)]
        if bad:
            raise RecordError(f"{where}: unknown batch status {bad[0]!r}")
        for b in rec.batches:
            b.status = Stage(b.status)
        return rec

    @property
    def live(self) -> bool:
        """Under way or stopped: a later run resumes it (done, rolled back, abandoned: over)."""
        return self.status in ("running", "stopped")

    def next_batch(self) -> int | None:
        return next((i for i, b in enumerate(self.batches) if b.status != DONE), None)


def _write_json(path: Path, doc: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    with tmp.open("w", encoding="utf-8") as f:
        json.dump(doc, f, indent=2, sort_keys=True)
        f.write("\n")
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def _read_json(path: Path) -> Any:
    if not path.exists():
        return None
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise RecordError(f"{path}: cannot read ({exc})") from None


class Store:
    """One stack's files in the state directory (`directory`: a path, or the StateDir that
    finds files an earlier release left elsewhere). `kind`: whose record (`rollout`, the
    rolling change's, `<stack>.json`; `heal`, the remediations', `<stack>.heal.json`); the lock
    and the audit log are the stack's, shared: heal and a rollout never take nodes out at once."""

    def __init__(self, directory: Path | StateDir, stack: str, kind: str = "rollout"):
        self.state, self.stack = state_dir(directory), stack
        self.path = self.state.file(
            f"{stack}.json" if kind == "rollout" else f"{stack}.{kind}.json"
        )
        self.log = AuditLog(self.state.file(f"{stack}.log"))

    @property
    def lock_path(self) -> Path:
        return self.state.file(f"{self.stack}.lock")

    def read(self) -> Record | None:
        doc = _read_json(self.path)
        return None if doc is None else Record.from_json(doc, self.path)

    def write(self, rec: Record) -> None:
        _write_json(self.path, rec.as_json())

    def applied(self) -> dict[str, Any] | None:
        """The roles' variables the nodes run since the last configuration that finished."""
        path = self.state.file(f"{self.stack}.applied.json")
        doc = _read_json(path)
        if doc is not None and not isinstance(doc.get("variables"), dict):
            raise RecordError(f"{path}: no `variables`")
        return doc

    def set_applied(
        self,
        variables: dict[str, Any],
        nodes: dict[str, Any],
        digest: str,
        measured: dict[str, Any] | None = None,
    ) -> None:
        """`measured`: what the rolling run that got there measured (`rollout.measured`);
        without one (a full configure, a rollout that timed nothing), the last one is kept."""
        doc = {"variables": variables, "nodes": nodes, "digest": digest, "at": time.time()}
        if measured is None:
            try:
                measured = (self.applied() or {}).get("measured")
            except RecordError:
                measured = None  # the record is rewritten whole; what it measured is lost
        if measured is not None:
            doc["measured"] = measured
        _write_json(self.state.file(f"{self.stack}.applied.json"), doc)

    def audit(self, event: str, **fields: Any) -> None:
        self.log.append({"stack": self.stack, "event": event, **fields})

    def lock(self) -> AbstractContextManager[None]:
        """The stack's lock, held while the block runs; lock.Held, naming the holder, where
        another run has it."""
        return FileLock(
            self.lock_path,
            lambda holder: f"{self.stack}: a rolling change or heal is in progress ({holder})",
        ).hold()


def new_record(
    stack: str, digest: str, cls: str, batches: list[list[str]], old, new, roles=()
) -> Record:
    """`roles`: the roles the change touches, the ones a batch's apply runs (none: every role)."""
    rec = Record(stack, digest, cls, [Batch(list(b)) for b in batches], dict(old), dict(new))
    rec.roles = list(roles)
    return rec
