"""The out-of-service budget a cluster's maintenance shares (`lifecycle.max_out_of_service`:
`rackform heal`'s remediations and a rolling change, together) and `lifecycle.rollout`: how a
software change reaches running nodes batch by batch. Defaults a team can use as they are: a
canary node first, batches within one rack (a node group where the hosts name no rack) and no
larger than the budget, running jobs checkpointed and requeued, a stop at the first failure."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Annotated, Any, Literal

from pydantic import Field

from rackform.blueprint.schema.base import Strict, Violation

_SHARE = re.compile(r"^(\d+)%$")

BUDGET_DESCRIPTION = (
    "The most nodes out of service at once for maintenance: `rackform heal`'s remediations and a"
    " rolling change's batches share it. A count, or a share such as '10%'. Default: one node or"
    " 10% of the cluster, whichever is more. A budget that could take every node of a cluster of"
    " several nodes out at once is refused."
)


def parse_budget(v: int | str | None) -> int | str | None:
    """The budget as given, normalized ('10 %' is not accepted, '010%' is '10%')."""
    if v is None:
        return v
    if isinstance(v, int):
        if v < 1:
            raise ValueError("must be at least 1 node, or a share such as '10%'")
        return v
    m = _SHARE.match(v.strip())
    if not m or not 0 < int(m.group(1)) <= 100:
        raise ValueError(f"{v!r} is neither a node count nor a share such as '10%'")
    return f"{int(m.group(1))}%"


def budget(v: int | str | None, nodes: int) -> int:
    """The most of `nodes` out of service at once (never less than one)."""
    if v is None:
        return max(1, nodes // 10)
    if isinstance(v, int):
        return v
    return max(1, nodes * int(v[:-1]) // 100)


class RolloutPolicy(Strict):
    """How `rackform configure --rolling` changes node software under running jobs."""

    canary: Annotated[
        bool,
        Field(
            description="The first batch is one node, validated before any other node is touched."
        ),
    ] = True
    batch_size: Annotated[
        int | None,
        Field(
            description="Nodes in a batch. Default: the out-of-service budget. Never more than the budget, nor than the largest failure domain (a rack where the hosts name theirs, else a node group): a batch never spans two.",
            ge=1,
        ),
    ] = None
    jobs: Annotated[
        Literal["requeue", "wait"],
        Field(
            description="A drained batch's running jobs: `requeue` signals them to checkpoint and requeues them (Slurm's grace time); `wait` lets them finish, up to `wait_minutes`, then requeues what is left."
        ),
    ] = "requeue"
    wait_minutes: Annotated[
        int,
        Field(
            description="jobs: wait: how long a batch waits for its jobs to finish.",
            ge=1,
            le=10080,
        ),
    ] = 60
    validate_minutes: Annotated[
        int,
        Field(
            description="The most a batch's re-validation (host checks and a smoke job on those nodes) may take before the batch counts as failed.",
            ge=1,
            le=600,
        ),
    ] = 30
    pause_on_failure: Annotated[
        bool,
        Field(
            description="Stop at the first batch that fails: its nodes stay drained with their reports, the nodes not yet reached keep the old software and their jobs. false: go on with the next batch while the failed nodes stay drained (never past the budget)."
        ),
    ] = True


def failure_domains(groups: Sequence[Any]) -> dict[str, list[str]]:
    """Each failure domain's nodes, in order: a rack where a node group's hosts name theirs
    (hosts of one group without a rack share the group's domain), else the node group. Nodes a
    target creates itself (AWS) have no names before they exist: `group[i]` stands for the
    group's i-th. `groups`: a blueprint's node groups or a plan's (`name`, `count`, `hosts`)."""
    out: dict[str, list[str]] = {}
    for g in groups:
        hosts = getattr(g, "hosts", None) or ()
        if not hosts:
            out[f"node group {g.name}"] = [f"{g.name}[{i}]" for i in range(g.count or 0)]
            continue
        for h in hosts:
            where = f"rack {h.rack}" if h.rack else f"node group {g.name}"
            out.setdefault(where, []).append(h.name)
    return {d: nodes for d, nodes in out.items() if nodes}


def rollout_rules(lifecycle: Any, groups: Sequence[Any]) -> list[Violation]:
    """A budget that could take every node of a cluster of several out at once, and a batch
    larger than the budget or than the largest failure domain (a batch never spans two)."""
    domains = failure_domains(groups)
    nodes = sum(len(n) for n in domains.values())
    out: list[Violation] = []
    allowed = lifecycle.budget(nodes)
    if nodes > 1 and allowed >= nodes:
        out.append(
            Violation(
                ("lifecycle", "max_out_of_service"),
                f"{lifecycle.max_out_of_service!r} could take all {nodes} nodes out of service at"
                " once",
                f"allow at most {nodes - 1}, or a share such as '10%'",
            )
        )
    size = lifecycle.rollout.batch_size
    largest = max((len(n) for n in domains.values()), default=0)
    if size is not None and size > allowed and not out:
        out.append(
            Violation(
                ("lifecycle", "rollout", "batch_size"),
                f"a batch of {size} nodes is more than the out-of-service budget ({allowed} of"
                f" {nodes} nodes)",
                f"use at most {allowed}, or raise lifecycle.max_out_of_service",
            )
        )
    elif size is not None and nodes and size > largest:
        out.append(
            Violation(
                ("lifecycle", "rollout", "batch_size"),
                f"a batch of {size} nodes is larger than any failure domain (the largest,"
                f" {max(domains, key=lambda d: len(domains[d]))}, has {largest}): a batch never"
                " spans two",
                f"use at most {largest}",
            )
        )
    return out
