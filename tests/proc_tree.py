"""A process and everything below it, for tests that lose a "node" at once: torchrun starts
each worker in a session of its own, so neither a process group nor a session is the whole
node."""

from __future__ import annotations

import os
import signal
from contextlib import suppress
from pathlib import Path


def tree(pid: int) -> list[int]:
    """`pid` and every process below it (from /proc's parent ids)."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            ppid = int(stat.read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(ppid, []).append(int(stat.parent.name))
    out, todo = [], [pid]
    while todo:
        out.append(todo.pop())
        todo += children.get(out[-1], [])
    return out


def kill_tree(*tops: int) -> None:
    """SIGKILL to each of `tops` and everything below them, every one stopped first so that
    none sees another go before it goes itself: a node lost at once."""
    pids = {p for top in tops for p in tree(top)}
    for sig in (signal.SIGSTOP, signal.SIGKILL):
        for p in pids:
            with suppress(ProcessLookupError):
                os.kill(p, sig)
