"""One rank of the NVLink domain phase on CPU (gloo), for tests/validators/test_domain_phase.py:
the harness starts one process per rank, each with its fake node's name in SLURMD_NODENAME
(as Slurm gives a node's), RANK/WORLD_SIZE and the store's address (env://). Rank 0 writes the
checks and the figures to the file named first. `--slow-domain D:S` / `--slow-link A:B:S` pass
the measurement's test hook (domain_collectives.Slowdown): that domain's ranks, or that link's
sender, sleep S seconds before each timed operation; the figures are still measured."""

from __future__ import annotations

import argparse
import json
import sys
from datetime import timedelta

import torch
import torch.distributed as dist

from validators import domain_phase
from validators.args import parse
from validators.domain_collectives import Slowdown

torch.set_num_threads(1)


def main(argv: list[str]) -> int:
    out, *rest = argv
    p = argparse.ArgumentParser()
    p.add_argument("--slow-domain")
    p.add_argument("--slow-link")
    hook, job = p.parse_known_args(rest)
    slow = None
    if hook.slow_domain:
        d, s = hook.slow_domain.rsplit(":", 1)
        slow = Slowdown(float(s), domain=d)
    elif hook.slow_link:
        a, b, s = hook.slow_link.split(":")
        slow = Slowdown(float(s), link=(a, b))
    args = parse(["--device", "cpu", *job])
    dist.init_process_group("gloo", timeout=timedelta(seconds=60))
    try:
        metrics: dict = {}
        # Judged as on GPUs (the device kind is data): what is tested is the judgement.
        checks = domain_phase.run(
            args, torch.device("cpu"), None, metrics, lambda: None, slow, judge_peers=True
        )
        if dist.get_rank() == 0:
            doc = {"checks": [c.to_dict() for c in checks], "metrics": metrics}
            with open(out, "w") as fh:
                json.dump(doc, fh)
    finally:
        dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
