"""`rackform reap`'s decision time for 1, 64 and 512 clusters (by default) against one local
Prometheus holding three hours of dcgm-exporter history for all of them (bare-metal clusters of
two hosts with two GPUs each, backfilled with promtool, as in tests/reap). Decision time is the
Prometheus queries plus every verdict, for already compiled blueprints: median of --repeat runs,
and its ratio to the 1-cluster time. The queries are batched (one per distinct idle window), so
the ratio grows far slower than the cluster count. Compiling the blueprints is timed apart.

    .venv/bin/python benchmarks/reap_bench.py [--repeat 5] [--sizes 1,64,512]

Needs prometheus and promtool (scripts/setup.sh --test). Prints figures; asserts nothing.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "tests"), str(ROOT / "tests" / "reap")]

from clusters import bare_metal, history  # noqa: E402
from servers import prometheus  # noqa: E402

from rackform.engine import prepare  # noqa: E402
from rackform.reap.run import decide_all  # noqa: E402
from rackform.telemetry.prometheus import Prometheus  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--sizes", default="1,64,512")
    args = ap.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    names = [f"c{i:04d}" for i in range(max(sizes))]
    with tempfile.TemporaryDirectory() as tmp:
        t = time.perf_counter()
        gpus = [g for i, n in enumerate(names) for g in history(n, 2 if i % 3 else 70)]
        files = []
        for n in names:
            path = Path(tmp) / f"{n}.yaml"
            path.write_text(bare_metal(n))
            files.append(path)
        t = time.perf_counter()
        prepared = [prepare(f) for f in files]
        compile_s = time.perf_counter() - t
        t = time.perf_counter()
        with prometheus(gpus, Path(tmp) / "prom") as url:
            start_s = time.perf_counter() - t
            prom = Prometheus(url)
            print(f"{len(gpus)} GPU series, 3 h of history: backfill and start {start_s:.1f} s; "
                  f"compiling {len(files)} blueprints {compile_s:.1f} s")  # fmt: skip
            base = None
            print(f"{'clusters':>8} {'decide s':>9} {'ratio':>6} {'per cluster ms':>15}")
            for n in sizes:
                runs = []
                for _ in range(args.repeat):
                    t = time.perf_counter()
                    decisions = decide_all(prepared[:n], prom, time.time())
                    runs.append(time.perf_counter() - t)
                assert len(decisions) == n
                med = statistics.median(runs)
                base = base or med
                print(f"{n:>8} {med:>9.3f} {med / base:>6.1f} {med / n * 1000:>15.2f}")


if __name__ == "__main__":
    main()
