"""Snoozes a person sets without a commit: `rackform snooze` writes them to the state directory
(every target; share the directory between reapers to share snoozes), and on targets
with live tags onto the cluster itself as well (AWS: rackform:snooze-until), where every reaper
reads them. A snoozed cluster is measured and reported, never acted on, until the time passes.

The file is one JSON object by stack, replaced whole (write to a temporary file, fsync, rename)
under an flock, so two snoozes at once never lose one and a reader never sees half a file."""

from __future__ import annotations

import json
import os
import tempfile
import time
from pathlib import Path

from rackform.lifecycle.directory import StateDir, state_dir
from rackform.lifecycle.lock import FileLock

FILE = "snoozes.json"


def iso(ts: float) -> str:
    """A unix time as reap writes and shows it (snoozes, tags, warnings): 2026-11-25T18:00:00Z."""
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(ts))


def _path(directory: Path | StateDir) -> Path:
    return state_dir(directory).file(FILE)


def read(directory: Path | StateDir) -> dict[str, dict]:
    """Every snooze by stack; a file that is not the JSON this module writes is an error."""
    return _read(_path(directory))


def _read(path: Path) -> dict[str, dict]:
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


def active(directory: Path | StateDir, stack: str, now: float) -> dict | None:
    entry = read(directory).get(stack)
    return entry if entry and entry["until"] > now else None


def set_snooze(directory: Path | StateDir, stack: str, entry: dict | None) -> None:
    """Set (or with None, clear) the stack's snooze."""
    path = _path(directory)
    with FileLock(path.with_name(f"{FILE}.lock")).wait():
        doc = _read(path)
        if entry is None:
            doc.pop(stack, None)
        else:
            doc[stack] = entry
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{FILE}.")
        try:
            with os.fdopen(fd, "w") as f:
                json.dump(doc, f, indent=2, sort_keys=True)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
