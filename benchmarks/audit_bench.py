"""What one reap run pays to read the audit log, as the log grows: every cluster's standing
warning and latest action, read whole each run (as before the incremental view) against the
view (rackform/reap/audit_view.py), which reads only what the last run appended. The log holds
--clusters clusters' entries; each run appends --per-run of them first. Medians of --repeat.

    .venv/bin/python benchmarks/audit_bench.py [--sizes 1000,10000,100000] [--clusters 64]

Prints figures; asserts nothing.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from rackform.lifecycle.audit import AuditLog  # noqa: E402


def whole(log: AuditLog, stack: str, action: str) -> None:
    """The read before the view: every entry, for each question."""
    for _ in log.entries():
        pass


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="1000,10000,100000")
    ap.add_argument("--clusters", type=int, default=64)
    ap.add_argument("--per-run", type=int, default=20)
    ap.add_argument("--repeat", type=int, default=5)
    a = ap.parse_args()
    stacks = [f"gpu-train-{i:03d}-prod" for i in range(a.clusters)]
    print(f"{'entries':>9} {'whole ms':>9} {'view ms':>8} {'ratio':>7}   (one run: {a.clusters}"
          f" clusters, 2 questions each, {a.per_run} entries appended first)")  # fmt: skip
    for n in map(int, a.sizes.split(",")):
        with tempfile.TemporaryDirectory() as tmp:
            log = AuditLog(Path(tmp) / "audit.jsonl")
            with log.path.open("w") as f:  # the history, written at once
                for i in range(n):
                    f.write(f'{{"ts": {i}, "stack": "{stacks[i % a.clusters]}", "action": "stop",'
                            f' "event": "warn", "state": "sent", "run": "r{i}"}}\n')  # fmt: skip
            log.warning(stacks[0], "stop")  # the view's first read (the one whole read)
            old, new = [], []
            for r in range(a.repeat):
                for i in range(a.per_run):
                    log.append({"ts": n + r * a.per_run + i, "stack": stacks[i % a.clusters],
                                "action": "stop", "event": "withdrawn"})  # fmt: skip
                t = time.perf_counter()
                for s in stacks:
                    whole(log, s, "stop")
                    whole(log, s, "stop")
                old.append(time.perf_counter() - t)
                t = time.perf_counter()
                for s in stacks:
                    log.acted_since(s, "stop", 0)
                    log.warning(s, "stop")
                new.append(time.perf_counter() - t)
            o, v = statistics.median(old) * 1000, statistics.median(new) * 1000
            print(f"{n:>9} {o:>9.1f} {v:>8.1f} {o / v:>6.0f}x")


if __name__ == "__main__":
    main()
