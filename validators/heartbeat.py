"""The job's progress as a Prometheus gauge, for `rackform reap`: the unix time of the last
completed step, written in node_exporter's textfile-collector format (a `.prom` file replaced
whole by rename, so the collector never reads half of it). A node's first local rank writes it;
node_exporter's textfile collector (--collector.textfile.directory), scraped with the cluster's
labels, turns it into `rackform_job_heartbeat_timestamp_seconds`. A user's job exports the same
gauge however it likes; reap reads a heartbeat that stopped while GPU memory is held as a
stalled job, and one that advanced as a busy one.

Standard library only: shipped to nodes with the smoke job."""

from __future__ import annotations

import os
import tempfile
import time

METRIC = "rackform_job_heartbeat_timestamp_seconds"
# At most one write this often: a step every few milliseconds must not become a write each.
MIN_INTERVAL_S = 5.0


class Heartbeat:
    def __init__(self, path: str | None, clock=time.time):
        self.path = path
        self._clock = clock
        self._last = float("-inf")

    def beat(self) -> None:
        if not self.path:
            return
        now = self._clock()
        if now - self._last < MIN_INTERVAL_S:
            return
        self._last = now
        directory = os.path.dirname(os.path.abspath(self.path))
        body = (
            f"# HELP {METRIC} Unix time of the job's last completed step.\n"
            f"# TYPE {METRIC} gauge\n{METRIC} {now:.3f}\n"
        )
        try:
            fd, tmp = tempfile.mkstemp(dir=directory, prefix=".heartbeat.")
            with os.fdopen(fd, "w") as f:
                f.write(body)
            os.replace(tmp, self.path)
        except OSError:
            pass  # progress reporting must never fail the job it reports on
