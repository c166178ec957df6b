"""The per-rank watchdog: a rank that stops making progress leaves on its own, quickly, saying
where it was stuck; one that keeps beating is left alone."""

from __future__ import annotations

import subprocess
import sys
import time

from smoke_helpers import ROOT, env

from validators.watchdog import EXIT_STALLED

STUCK = """
import time
from validators.watchdog import Watchdog
wd = Watchdog(1.0, rank=3).start()
wd.beat("checkpoint")
wd.beat(step=7)
time.sleep(60)  # stuck: no more beats
"""

BUSY = """
import time
from validators.watchdog import Watchdog
wd = Watchdog(1.0, rank=0).start()
for i in range(15):
    wd.beat("training", i)
    time.sleep(0.1)
wd.stop()
time.sleep(1.2)  # stopped: no longer watching
print("finished")
"""


def _py(code: str) -> tuple[subprocess.CompletedProcess, float]:
    t0 = time.monotonic()
    r = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env=env(),
        cwd=ROOT,
        timeout=60,
    )
    return r, time.monotonic() - t0


def test_stuck_rank_exits_with_where_it_was():
    r, took = _py(STUCK)
    assert r.returncode == EXIT_STALLED
    assert took < 10
    assert "smoke: rank 3: no progress for" in r.stderr
    assert "during checkpoint (last completed step 7)" in r.stderr


def test_busy_rank_is_left_alone():
    r, _ = _py(BUSY)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "finished"
