"""The out-of-service budget: how many of a cluster's nodes may be out of service at once
(the blueprint's `lifecycle.max_out_of_service`), and what that leaves for the next batch or
node. Every node out counts, whoever took it out (heal, a rolling change, a person). Pure: the
nodes out come from the caller's read of Slurm."""

from __future__ import annotations

from collections.abc import Collection


def free(allowed: int, out: int) -> int:
    """How many more nodes may go out with `out` already out (none or fewer: the budget is
    used)."""
    return allowed - out


def used(allowed: int, nodes: int, free_now: int) -> str:
    """Why a node waits where the budget is used."""
    return (
        f"the out-of-service budget ({allowed} of {nodes} nodes) is used ({allowed - free_now} out)"
    )


def batch_waits(number: int, batch: Collection[str], others: Collection[str], allowed: int) -> str:
    """Why batch `number` waits with `others` (nodes not in it) out of service, or "" where the
    budget has room for all of it."""
    if len(others) + len(batch) <= allowed:
        return ""
    return (
        f"batch {number} ({len(batch)} nodes) waits: {len(others)} node(s) already out of"
        f" service ({', '.join(sorted(others))}) and the budget is {allowed}"
    )
