"""Snoozes a person sets without a commit: `rackform snooze` writes them to the reaper's state
directory (every target; share the directory between reapers to share snoozes), and on targets
with live tags onto the cluster itself as well (AWS: rackform:snooze-until), where every reaper
reads them. A snoozed cluster is measured and reported, never acted on, until the time passes.

The file is one JSON object by stack, replaced whole (write to a temporary file, fsync, rename)
under an flock, so two snoozes at once never lose one and a reader never sees half a file."""

from __future__ import annotations

import fcntl
import json
import os
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

FILE = "snoozes.json"


def iso(ts: float) -> str:
    """A unix time as reap writes and shows it (snoozes, tags, warnings): 2026-11-25T18:00:00Z."""
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(ts))


def _path(state_dir: Path) -> Path:
    return state_dir / FILE


def read(state_dir: Path) -> dict[str, dict]:
    """Every snooze by stack; a file that is not the JSON this module writes is an error."""
    path = _path(state_dir)
    try:
        doc = json.loads(path.read_text())
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as exc:
        raise SnoozeError(f"cannot read the snoozes in {path}: {exc}") from None
    if not isinstance(doc, dict) or not all(
        isinstance(v, dict) and isinstance(v.get("until"), int | float) for v in doc.values()
    ):
        raise SnoozeError(f"{path} is not a snooze file (an object of {{until, reason}} by stack)")
    return doc


class SnoozeError(Exception):
    """The snooze file cannot be read or written: one line."""


def active(state_dir: Path, stack: str, now: float) -> dict | None:
    entry = read(state_dir).get(stack)
    return entry if entry and entry["until"] > now else None


@contextmanager
def _locked(state_dir: Path) -> Iterator[None]:
    state_dir.mkdir(parents=True, exist_ok=True)
    fd = os.open(state_dir / f"{FILE}.lock", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def set_snooze(state_dir: Path, stack: str, entry: dict | None) -> None:
    """Set (or with None, clear) the stack's snooze."""
    with _locked(state_dir):
        doc = read(state_dir)
        if entry is None:
            doc.pop(stack, None)
        else:
            doc[stack] = entry
        fd, tmp = tempfile.mkstemp(dir=state_dir, prefix=f".{FILE}.")
        try:
            with os.fdopen(fd, "w") as f:
                json.dump(doc, f, indent=2, sort_keys=True)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, _path(state_dir))
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
