"""The lock a run takes before it touches a stack's nodes or its records, and `Held`, what a run
that finds it taken is told: one exception for every lock, whether the lock is this flock on a file
in the state directory or the lease on the cluster's Slurm controller (`lease.controller_lock`).

`FileLock.hold` never waits: a second run finds the lock held and stops, naming the holder from
the words the holder wrote into the file (its pid and since when; anything unprintable in them
escaped). The words are cleared when the holder lets go; the flock itself goes with the holder's
process, however it ends. `FileLock.wait` waits its turn instead, for a short write that must
not interleave with another (the snoozes' file)."""

from __future__ import annotations

import fcntl
import os
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from rackform.printable import printable

WHO_BYTES = 512  # at most this much of a holder's words is read, and 200 characters shown


class Held(Exception):
    """Another run holds the lock: one line, naming the holder where it is known."""


def _busy(path: Path) -> Callable[[str], str]:
    return lambda holder: f"{path} is held by {holder}"


@dataclass(frozen=True)
class FileLock:
    """An flock on `path` (made, with its directory, where missing; 0600). `busy(holder)`: the
    Held message, from the holder's words (`another run` where it wrote none)."""

    path: Path
    busy: Callable[[str], str] | None = None

    def _open(self) -> int:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        return os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)

    @contextmanager
    def hold(self) -> Iterator[None]:
        """Held at once, for as long as the block runs; Held where another run has it."""
        fd = self._open()
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                words = os.pread(fd, WHO_BYTES, 0).decode(errors="replace").strip()
                holder = printable(words, 200) or "another run"
                raise Held((self.busy or _busy(self.path))(holder)) from None
            since = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"pid {os.getpid()} since {since}".encode(), 0)
            try:
                yield
            finally:
                os.ftruncate(fd, 0)
                fcntl.flock(fd, fcntl.LOCK_UN)
        finally:
            os.close(fd)

    @contextmanager
    def wait(self) -> Iterator[None]:
        """Held once every run before this one has let go, for as long as the block runs."""
        fd = self._open()
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)
