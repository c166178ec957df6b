"""The serving smoke job's time and report: the deadline it is bounded by, with a backstop for a
job stuck where it cannot look at the clock, and the report rewritten after every phase (whole,
never through a link). Standard library only."""

from __future__ import annotations

import os
import sys
import threading
import time

from validators import nofollow, report
from validators.report import Check
from validators.serving_checks import CHECKS

EXIT_STALLED = 3


class DeadlinePassed(RuntimeError):
    pass


class Deadline:
    """The job's time: `left()` seconds, `check(phase)` raises DeadlinePassed past it; a
    backstop thread, for a job stuck where it cannot check, calls `on_stuck` at the deadline
    plus `grace_s` and leaves the process with EXIT_STALLED."""

    def __init__(self, seconds: float, grace_s: float = 30.0, clock=time.monotonic):
        self.clock, self.at, self.seconds, self.grace_s = clock, clock() + seconds, seconds, grace_s
        self.phase = "start"
        self._done = threading.Event()

    def left(self) -> float:
        return self.at - self.clock()

    def check(self, phase: str | None = None) -> None:
        if phase:
            self.phase = phase
        if self.left() <= 0:
            raise DeadlinePassed(self.phase)

    def backstop(self, on_stuck) -> Deadline:
        def watch() -> None:
            if not self._done.wait(max(0.0, self.left()) + self.grace_s):
                print(
                    f"serving_smoke: stuck during {self.phase}: past the {self.seconds:g} s "
                    f"deadline and {self.grace_s:g} s more; stopping",
                    file=sys.stderr,
                    flush=True,
                )
                on_stuck(self.phase)
                os._exit(EXIT_STALLED)  # a clean exit would wait on what is stuck

        threading.Thread(target=watch, name="serving-deadline", daemon=True).start()
        return self

    def stop(self) -> None:
        self._done.set()


class Job:
    """The checks so far and the report, rewritten after every phase."""

    def __init__(self, path: str | None, facts: dict):
        self.path, self.facts = path, facts
        self.checks: list[Check] = []
        self.metrics: dict = {}
        self.lock = threading.Lock()

    def add(self, *checks: Check) -> None:
        with self.lock:
            self.checks.extend(checks)

    def flush(self, complete: bool = False) -> dict:
        with self.lock:
            done = {c.name for c in self.checks}
            doc = report.make(
                list(self.checks),
                complete=complete,
                pending=[n for n in CHECKS if n not in done],
                job=self.facts,
                metrics=self.metrics,
            )
            if self.path:
                nofollow.write_whole(self.path, report.dumps(doc))
            return doc
