"""Replacing a node: drained, its jobs released (or waited for: an elastic job shrunk off it,
any other requeued, lifecycle/elastic.py) so they go on or resume from their checkpoints, and only then, with no job left on it, given up for a new machine through
the target (`give_up(node)`, which terminates it and says what it did). The node stays drained
under its name: its successor comes back configured and validated, and a person returns it to
service. Without a scheduler (a serving group) there is nothing to drain: the node is given up
at once. Each give-up, done or refused, is an audit entry."""

from __future__ import annotations

from collections.abc import Callable

from rackform.lifecycle.maintenance import Jobs, Result, Scheduler, empty
from rackform.lifecycle.outcome import ActionError
from rackform.lifecycle.record import Store


def replace(
    node: str,
    why: str,
    slurm: Scheduler | None,
    jobs: Jobs,
    store: Store,
    give_up: Callable[[str], str] | None,
    trigger: str = "heal",
) -> Result:
    """`why`: the evidence, in the drain's reason; ok where the node was given up."""
    released: tuple = ()
    if slurm is not None:
        reason = f"rackform {trigger}: replaced ({why})"[:200]
        bad = [o for o in slurm.drain([node], reason) if not o.ok]
        if bad:
            return Result(False, f"draining: {bad[0].detail}")
        e = empty(slurm, [node], jobs, store, trigger)
        released = tuple(e.released)
        if e.left:
            return Result(False, "drained; jobs still running: " + "; ".join(e.left), released)
    try:
        if give_up is None:
            raise ActionError("this target does not replace nodes")
        done = give_up(node)
    except ActionError as exc:
        store.audit("replace", kind=trigger, node=node, ok=False, why=str(exc))
        return Result(False, f"drained; not replaced: {exc}", released)
    store.audit("replace", kind=trigger, node=node, ok=True, why=done)
    return Result(True, done, released)
