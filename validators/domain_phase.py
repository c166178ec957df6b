"""The smoke job's NVLink domain phase: each rank's node placed in the plan's domain map
(`--nvlink-domain`), the domains measured (validators/domain_collectives.py) and judged
(validators/domain_checks.py). A node the map does not name makes every domain check not-run,
naming it: the job cannot tell which domain it is in, and guesses nothing."""

from __future__ import annotations

import os
from datetime import timedelta

import torch.distributed as dist

from validators import domain_checks
from validators.domain_collectives import Slowdown, measure
from validators.domain_layout import Layout, domain_of, node_name, parse_map
from validators.report import Check, not_run

# Every check the phase reports (some once per domain or link), in order. (`names` too: the
# checks reference and the audit find check names assigned to it, rackform/docs_gen.py.)
CHECKS = names = (
    "domain_allreduce_busbw",
    "domain_allreduce_peers",
    "domain_alltoall_busbw",
    "domain_alltoall_peers",
    "cross_domain_allreduce_busbw",
    "cross_domain_peers",
    "alltoall_busbw",
    "domain_link_peers",
)


def run(
    args, device, cpu_group, metrics: dict, beat, slow: Slowdown | None = None,
    judge_peers: bool | None = None,
) -> list[Check]:  # fmt: skip
    """Every rank calls it; every rank gets the same checks. `slow`: the test hook
    (domain_collectives.Slowdown), never given by the smoke job. The peer checks are judged
    on GPUs only; `judge_peers` (the tests' seam: the device kind is data) judges them here."""
    mapping = parse_map(args.nvlink_domain)
    host = node_name(os.environ)
    here: list = [None] * dist.get_world_size()
    dist.all_gather_object(here, (host, domain_of(host, mapping)), group=cpu_group)
    lost = sorted({h for h, d in here if d is None})
    if lost:
        why = (
            f"node {', '.join(lost)} is in no domain of the plan's map (named by SLURMD_NODENAME,"
            " else the host name): the job cannot tell its domain"
        )
        return [not_run(n, why) for n in CHECKS]
    layout = Layout.of([d for _h, d in here])
    timeout = timedelta(seconds=args.collective_timeout_s)
    figs = measure(layout, device, cpu_group, timeout, beat, slow)
    metrics["nvlink_domains"] = {
        "domains": {
            d: list(dict.fromkeys(here[r][0] for r in ranks)) for d, ranks in layout.domains
        },
        **figs.as_dict(),
    }
    on_gpu, frac = device.type == "cuda", args.domain_peer_fraction
    judged = on_gpu if judge_peers is None else judge_peers
    sized = {d: (figs.domain_allreduce.get(d), figs.domain_ranks[d]) for d in layout.names}
    a2a = {d: (figs.domain_alltoall.get(d), figs.domain_ranks[d]) for d in layout.names}
    # Only domains of several ranks have a figure to compare with their peers.
    multi = [d for d in layout.names if figs.domain_ranks[d] > 1]
    return [
        *domain_checks.catalog_checks(
            "domain_allreduce_busbw", sized, args.domain_allreduce_min, on_gpu, "all-reduce"
        ),
        *domain_checks.peer_checks(
            "domain_allreduce_peers",
            {d: figs.domain_allreduce.get(d) for d in multi},
            "all-reduce busbw within the domain",
            fraction=frac,
            judged=judged,
        ),
        *domain_checks.catalog_checks(
            "domain_alltoall_busbw", a2a, args.domain_alltoall_min, on_gpu, "all-to-all"
        ),
        *domain_checks.peer_checks(
            "domain_alltoall_peers",
            {d: figs.domain_alltoall.get(d) for d in multi},
            "all-to-all busbw within the domain",
            fraction=frac,
            judged=judged,
        ),
        domain_checks.cross_check(figs.cross_allreduce, len(layout.domains), on_gpu),
        *_positions(figs.cross_allreduce, len(layout.domains), frac, judged),
        domain_checks.alltoall_check(figs.alltoall, dist.get_world_size(), figs.alltoall_why),
        *_links(figs.links, len(layout.domains), frac, judged),
    ]


def _positions(cross: dict, domains: int, fraction: float, judged: bool) -> list[Check]:
    """Each position's all-reduce across the domains against the others': on nodes of one
    domain each (HGX), position k is every node's GPU k, on its own rail of the fabric."""
    if domains < 2:
        return [not_run("cross_domain_peers", "one NVLink domain: nothing across domains")]
    what = "all-reduce busbw across the domains among the k-th rank of each"
    return domain_checks.peer_checks(
        "cross_domain_peers", cross, what, "position", fraction, judged
    )


def _links(links: dict, domains: int, fraction: float, judged: bool) -> list[Check]:
    if domains < 2:
        return [not_run("domain_link_peers", "one NVLink domain: no link between domains")]
    what = "point-to-point GB/s each way between the domains' first ranks"
    return domain_checks.peer_checks("domain_link_peers", links, what, "link", fraction, judged)
