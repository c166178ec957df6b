"""An audit log: what reap, heal and rolling changes did and began, one JSON object a line.

The log is JSON lines, only ever appended: each entry is one `write` of a whole line to a file
opened with O_APPEND, then fsync, so an earlier entry is never rewritten and a run killed
mid-way leaves at most a cut last line, which readers skip. Before an action starts, an entry
says so; a rerun that finds it (within the cluster's window) does not act again, whether or not
the first run lived to record the result.

The decisions read it through an incremental view (`audit_view`): each run reads only the
entries appended since the last, whatever the log's length.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from pathlib import Path

from rackform.lifecycle.audit_view import Fold, view


class AuditLog:
    def __init__(self, path: Path):
        self.path = path

    def append(self, entry: dict) -> None:
        line = (json.dumps({"ts": time.time(), **entry}, sort_keys=True) + "\n").encode()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        try:
            # A line cut by an earlier kill would swallow this one: start on a fresh line.
            if os.fstat(fd).st_size and not self._ends_with_newline():
                line = b"\n" + line
            os.write(fd, line)
            os.fsync(fd)
        finally:
            os.close(fd)

    def _ends_with_newline(self) -> bool:
        with self.path.open("rb") as f:
            f.seek(-1, os.SEEK_END)
            return f.read(1) == b"\n"

    def entries(self) -> Iterator[dict]:
        """Every whole entry, oldest first (a line cut by a kill is skipped)."""
        if not self.path.exists():
            return
        with self.path.open("rb") as f:
            for raw in f:
                try:
                    entry = json.loads(raw)
                except ValueError:
                    continue
                if isinstance(entry, dict):
                    yield entry

    def _latest(self, stack: str, action: str) -> dict:
        return view(self.path, STANDING).get(stack, {}).get(action, {})

    def acted_since(self, stack: str, action: str, since: float) -> dict | None:
        """The latest action on `stack` begun after `since` that did not fail, if any."""
        last = self._latest(stack, action).get("action")
        if last is None or _ts(last) < since:
            return None
        return last if last.get("state") in ("started", "done", "partial") else None

    def warning(self, stack: str, action: str) -> dict | None:
        """The warning that `stack` is idle and `action` follows, still standing: the latest
        warn entry not withdrawn (activity since) nor followed by the action itself."""
        return self._latest(stack, action).get("warning")


def _ts(entry: dict) -> float:
    ts = entry.get("ts", 0)
    return ts if isinstance(ts, int | float) else 0


def _standing(state: dict, e: dict) -> None:
    """Per stack and action: the latest action entry, and the first warning of the streak that
    still stands (a withdrawal or the action itself ends it)."""
    stack, action, event = e.get("stack"), e.get("action"), e.get("event")
    if not isinstance(stack, str) or not isinstance(action, str):
        return
    now = state.setdefault(stack, {}).setdefault(action, {"action": None, "warning": None})
    if event == "action":
        now["action"], now["warning"] = e, None
    elif event == "warn" and e.get("state") == "sent":
        now["warning"] = now["warning"] or e  # the first warning of a standing streak
    elif event == "withdrawn":
        now["warning"] = None


# The decisions read the log through this view: only what was appended since the last run.
STANDING = Fold("standing", dict, _standing)
