"""A per-rank progress watchdog: if the job makes no progress for `timeout_s`, the rank prints
where it was stuck and leaves at once with EXIT_STALLED, so torchrun sees a failed worker and
stops the others. It backs up the process group's own collective timeout, which cannot catch
a hang outside a collective (a stuck kernel, a dead filesystem, a deadlock in Python)."""

from __future__ import annotations

import os
import sys
import threading
import time

from validators.heartbeat import Heartbeat

EXIT_STALLED = 3


class Watchdog:
    def __init__(self, timeout_s: float, rank: int, exported: Heartbeat | None = None):
        self.timeout_s = timeout_s
        self.rank = rank
        self.exported = exported or Heartbeat(None)
        self.phase = "start"
        self.step: int | None = None
        self._last = time.monotonic()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="smoke-watchdog", daemon=True)

    def start(self) -> Watchdog:
        if self.timeout_s > 0:
            self._thread.start()
        return self

    def beat(self, phase: str | None = None, step: int | None = None) -> None:
        """Record progress; a new phase resets the step."""
        if phase is not None and phase != self.phase:
            self.phase, self.step = phase, None
        if step is not None:
            self.step = step
            self.exported.beat()  # a completed step is progress a reaper can see
        self._last = time.monotonic()

    def stop(self) -> None:
        self._stop.set()

    def _run(self) -> None:
        tick = min(1.0, self.timeout_s / 10)
        while not self._stop.wait(tick):
            idle = time.monotonic() - self._last
            if idle > self.timeout_s:
                where = self.phase + (
                    f" (last completed step {self.step})" if self.step is not None else ""
                )
                print(
                    f"smoke: rank {self.rank}: no progress for {idle:.0f} s (limit "
                    f"{self.timeout_s:g} s) during {where}; a collective, kernel or write is "
                    "stuck; aborting this rank",
                    file=sys.stderr,
                    flush=True,
                )
                # os._exit: a clean exit would wait on the very thing that is stuck.
                os._exit(EXIT_STALLED)
