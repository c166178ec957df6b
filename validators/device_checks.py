"""What each node has (hostname, GPUs seen by CUDA) and the checks on it: node count, GPU
count and GPU model against the blueprint's expectations, one check per node."""

from __future__ import annotations

import re
import socket

import torch
import torch.distributed as dist

from validators.report import Check, compare, failed, not_run


def node_facts(device: torch.device, cpu_group) -> list[dict]:
    """Every rank's view, gathered on every rank (gloo; no GPU needed to exchange them)."""
    n = torch.cuda.device_count() if torch.cuda.is_available() else 0
    mine = {
        "host": socket.gethostname(),
        "rank": dist.get_rank(),
        "gpus": n,
        "names": [torch.cuda.get_device_name(i) for i in range(n)],
        "device": str(device),
    }
    out: list = [None] * dist.get_world_size()
    dist.all_gather_object(out, mine, group=cpu_group)
    return out


def device_checks(args, facts: list[dict], nodes: int) -> list[Check]:
    out = [node_count(nodes, args.expect_nodes, sorted({f["host"] for f in facts}))]
    by_host: dict[str, dict] = {}
    for f in facts:
        by_host.setdefault(f["host"], f)
    many = len(by_host) > 1
    for host, f in sorted(by_host.items()):
        node = host if many else ""
        out.append(_count(args, f, node))
        out.append(_model(args, f, node))
    return out


def node_count(nodes: int, expected: int | None, hosts: list[str]) -> Check:
    """The nodes torchrun brought into the job (its rendezvous admits exactly --nnodes)
    against the count the blueprint declares for the node group. A run of fewer nodes, such
    as `rackform smoke` on one machine of a larger group, fails saying how many it covered."""
    seen = f"hosts: {', '.join(hosts)}" if len(hosts) <= 8 else f"{len(hosts)} hosts"
    if expected is None:
        return not_run(
            "node_count",
            f"no expected node count given (no blueprint); {seen}",
            measured=nodes,
            unit="nodes",
        )
    if nodes != expected:
        why = (
            f"the run covered {nodes} of the {expected} nodes expected"
            if nodes < expected
            else f"the run spans {nodes} nodes, {expected} expected"
        )
        return failed(
            "node_count",
            f"{why} ({seen})",
            measured=nodes,
            expected=expected,
            unit="nodes",
            op="==",
        )
    return compare("node_count", nodes, expected, "nodes", "==", detail=seen)


def _count(args, f: dict, node: str) -> Check:
    detail = "CUDA devices visible to the job"
    return compare(
        "gpu_count",
        f["gpus"],
        args.expect_gpus,
        "GPUs",
        "==",
        detail=detail,
        node=node,
        no_threshold="no expected GPU count given (no blueprint)",
    )


def _model(args, f: dict, node: str) -> Check:
    names = sorted(set(f["names"]))
    measured = ", ".join(names) if names else None
    want = args.expect_gpu_model
    if want is None:
        why = "no expected GPU model given (no blueprint)" if names else "no GPU and none expected"
        return not_run("gpu_model", why, measured=measured, node=node)
    if not names:
        return failed(
            "gpu_model",
            f"no GPU found; the blueprint expects {want}",
            expected=want,
            op="==",
            node=node,
        )
    if not args.expect_gpu_pattern:
        return not_run(
            "gpu_model",
            f"no device-name pattern known for {want}",
            measured=measured,
            expected=want,
            node=node,
        )
    pat = re.compile(args.expect_gpu_pattern)
    odd = [n for n in f["names"] if not pat.search(n)]
    detail = f"device names must match /{args.expect_gpu_pattern}/"
    if odd:
        return failed(
            "gpu_model",
            f"{len(odd)} of {len(f['names'])} GPUs are not {want}: {', '.join(sorted(set(odd)))}",
            measured=measured,
            expected=want,
            op="==",
            node=node,
        )
    return Check("gpu_model", "pass", measured, want, "", "==", detail, node)
