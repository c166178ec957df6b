"""A rolling change's record and lock, per stack, in rackform's state directory (--state-dir,
else $RACKFORM_ROLLOUT_DIR, else ~/.rackform/rollout; a volume the pipeline keeps where runs
come from more than one machine).

`<stack>.json` is the rollout: its batches in order and where each stands, written whole after
every step (a temporary file, fsync, rename), so a run killed at any moment leaves the last step
it finished, and a later run resumes there without touching a finished batch twice.
`<stack>.applied.json` is what the nodes run since the last configuration that finished: the
roles' variables a later rolling change is compared with, and what the last rolling run measured
(the next estimate's basis). `<stack>.log` is the audit log (JSON
lines, appended only). The lock is an flock on `<stack>.lock`: a second run finds it held and
stops, naming it."""

from __future__ import annotations

import fcntl
import json
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from rackform.printable import printable
from rackform.reap.audit import AuditLog

DEFAULT_DIR = Path("~/.rackform/rollout")
DIR_ENV = "RACKFORM_ROLLOUT_DIR"

# Where a batch stands, in the order a batch goes through them; `failed` stops there.
PENDING, DRAINED, APPLIED, VALIDATED, DONE, FAILED, ROLLED_BACK = (
    "pending",
    "drained",
    "applied",
    "validated",
    "done",
    "failed",
    "rolled back",
)
STEPS = (PENDING, DRAINED, APPLIED, VALIDATED, DONE)


class RecordError(Exception):
    """A record that cannot be read or used (hand-edited, another rollout's): one line."""


class Held(RecordError):
    """Another run holds the stack's rollout lock."""


def state_dir(given: Path | None = None) -> Path:
    return (given or Path(os.environ.get(DIR_ENV) or DEFAULT_DIR)).expanduser()


@dataclass
class Batch:
    nodes: list[str]
    status: str = PENDING
    why: str = ""
    seconds: dict[str, float] = field(default_factory=dict)  # step -> seconds it took


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
    """One stack's files in the state directory. `kind`: whose record (`rollout`, the rolling
    change's, `<stack>.json`; `heal`, the remediations', `<stack>.heal.json`); the lock and the
    audit log are the stack's, shared: heal and a rollout never take nodes out at once."""

    def __init__(self, directory: Path, stack: str, kind: str = "rollout"):
        self.dir, self.stack = directory, stack
        self.path = directory / (f"{stack}.json" if kind == "rollout" else f"{stack}.{kind}.json")
        self.log = AuditLog(directory / f"{stack}.log")

    def read(self) -> Record | None:
        doc = _read_json(self.path)
        return None if doc is None else Record.from_json(doc, self.path)

    def write(self, rec: Record) -> None:
        _write_json(self.path, rec.as_json())

    def applied(self) -> dict[str, Any] | None:
        """The roles' variables the nodes run since the last configuration that finished."""
        doc = _read_json(self.dir / f"{self.stack}.applied.json")
        if doc is not None and not isinstance(doc.get("variables"), dict):
            raise RecordError(f"{self.dir / f'{self.stack}.applied.json'}: no `variables`")
        return doc

    def set_applied(
        self,
        variables: dict[str, Any],
        nodes: dict[str, Any],
        digest: str,
        measured: dict[str, Any] | None = None,
    ) -> None:
        """`measured`: what the rolling run that got there measured (rollout/measured.py);
        without one (a full configure, a rollout that timed nothing), the last one is kept."""
        doc = {"variables": variables, "nodes": nodes, "digest": digest, "at": time.time()}
        if measured is None:
            try:
                measured = (self.applied() or {}).get("measured")
            except RecordError:
                measured = None  # the record is rewritten whole; what it measured is lost
        if measured is not None:
            doc["measured"] = measured
        _write_json(self.dir / f"{self.stack}.applied.json", doc)

    def audit(self, event: str, **fields: Any) -> None:
        self.log.append({"stack": self.stack, "event": event, **fields})

    @contextmanager
    def lock(self) -> Iterator[None]:
        self.dir.mkdir(parents=True, exist_ok=True)
        path = self.dir / f"{self.stack}.lock"
        with path.open("a+") as f:
            try:
                fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                f.seek(0)
                holder = printable(f.read(512).strip(), 200) or "another run"
                raise Held(
                    f"{self.stack}: a rolling change or heal is in progress ({holder})"
                ) from None
            f.seek(0)
            f.truncate()
            f.write(f"pid {os.getpid()} since {time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())}")
            f.flush()
            try:
                yield
            finally:
                f.truncate(0)
                fcntl.flock(f, fcntl.LOCK_UN)
