"""`rackform goodput`'s simulation time for a 512-node, 7-day run (the goodput guide's example,
examples/goodput/h100-512.yaml, at the catalog's Llama 3 failure rate), requeue-only and
elastic: median of --repeat runs over different seeds, and the same at --rate-x times the rate
(more failures, more of heal's decisions). The blueprint's compile is timed apart.

    .venv/bin/python benchmarks/goodput_bench.py [--repeat 5] [--days 7] [--rate-x 10]

Prints figures; asserts nothing.
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT)]

from rackform.engine import prepare  # noqa: E402
from rackform.goodput.scenario import MODES, from_plan  # noqa: E402
from rackform.goodput.simulate import simulate  # noqa: E402

BLUEPRINT = ROOT / "examples" / "goodput" / "h100-512.yaml"


def timed(sc, mode: str, days: float, repeat: int) -> tuple[float, float, int]:
    """Median seconds, median goodput, median failures over `repeat` seeds."""
    secs, goodput, failures = [], [], []
    for seed in range(repeat):
        t = time.perf_counter()
        r = simulate(sc, mode, seed, days)
        secs.append(time.perf_counter() - t)
        goodput.append(r.goodput)
        failures.append(sum(r.failures.values()))
    return statistics.median(secs), statistics.median(goodput), int(statistics.median(failures))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--days", type=float, default=7.0)
    ap.add_argument("--rate-x", type=float, default=10.0)
    args = ap.parse_args()
    t = time.perf_counter()
    plan = prepare(BLUEPRINT).plan
    print(f"compile {BLUEPRINT.relative_to(ROOT)}: {time.perf_counter() - t:.2f} s")
    sc = from_plan(plan)
    faster = dataclasses.replace(sc.rate, per_node_hour=sc.rate.per_node_hour * args.rate_x)
    for label, s in (("catalog rate", sc), (f"{args.rate_x:g} x the rate", sc.with_(rate=faster))):
        for mode in MODES:
            sec, g, n = timed(s, mode, args.days, args.repeat)
            print(
                f"{s.nodes} nodes, {args.days:g} days, {label}, {mode}: {sec:.3f} s "
                f"(median of {args.repeat}), goodput {g:.1%}, {n} failures"
            )


if __name__ == "__main__":
    main()
