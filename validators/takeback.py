"""Whether an elastic job running short of nodes takes them back, decided by the numbers. Pure
and standard library only: the job asks it at each checkpoint (validators/elastic.py,
`requeue_when_back`) and the goodput simulation at each checkpoint boundary
(rackform/goodput/simulate.py), the same function for both.

Slurm cannot add a node to a running job: a take-back is a requeue at full size, a restart of
every node (the relaunch, Slurm's requeue delay, the checkpoint read back) during which the
whole job trains nothing. Going on short costs only the share of the nodes it lost. With N
nodes at full size, `lost` of them missing and `remaining` seconds left to the job, going on
trains remaining x (N - lost) / N and a take-back (remaining - cost) x 1: the take-back pays
only where

    remaining x lost / N  >  cost   (the restart, plus Slurm's requeue delay where one applies)

and only where the nodes to run at full size are there: the nodes it lost idle again, or as
many idle nodes in its partition as it lost (Slurm gives the requeued job those).

The time left: Slurm's for the job (its time limit less the time used). A job without a limit
(Slurm says UNLIMITED) has nothing that bounds the run: `math.inf`, and any restart pays once the
nodes are there (the rule before this one). Unknown (Slurm silent or not yet set, `None`): no
take-back; the job asks again at its next checkpoint. A value that is no count or time (a
negative, NaN, more running than the job has): no take-back, and the decision says so."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

# What a take-back costs where the job has measured none: a relaunch and the checkpoint read
# back, minutes (the goodput simulation's assumption for a relaunch, `Assumptions.relaunch_s`).
DEFAULT_RESTART_S = 300.0

# The kinds of answer: the job records a decision when its kind changes, not every checkpoint.
FULL, MISSING, UNKNOWN, SHORT, PAYS, BAD = (
    "full size", "nodes not there", "time left unknown", "does not pay", "pays", "malformed",
)  # fmt: skip


@dataclass(frozen=True)
class Decision:
    take: bool
    kind: str
    why: str
    nodes: int = 0  # at full size
    running: int = 0
    available: int = 0  # nodes at hand to make up the loss
    remaining_s: float | None = None
    cost_s: float = 0.0  # the restart and the requeue delay
    gain_s: float | None = None  # remaining x lost / nodes: full-job seconds a take-back wins

    def as_dict(self) -> dict:
        d = asdict(self)
        for k in ("remaining_s", "cost_s", "gain_s"):
            v = d[k]
            d[k] = None if v is None else ("unlimited" if math.isinf(v) else round(v, 1))
        return d


def _count(v: object) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v >= 0


def _secs(v: object, inf_ok: bool = False) -> bool:
    ok = isinstance(v, (int, float)) and not isinstance(v, bool) and v >= 0 and not math.isnan(v)
    return ok and (inf_ok or not math.isinf(v))


def _t(s: float) -> str:
    return "unlimited" if math.isinf(s) else f"{s:.0f} s"


def decide(nodes: int, running: int, available: int, remaining_s: float | None,
           restart_s: float, requeue_delay_s: float = 0.0) -> Decision:  # fmt: skip
    """Whether a job of `nodes` at full size, running on `running`, with `available` idle
    nodes to make up the loss and `remaining_s` left (None: unknown; math.inf: no limit),
    takes its nodes back at a cost of `restart_s` plus `requeue_delay_s`."""
    if not (_count(nodes) and _count(running) and _count(available)) or running > nodes:
        return Decision(False, BAD, f"malformed counts: {nodes!r} nodes, {running!r} running,"
                        f" {available!r} idle")  # fmt: skip
    if not (_secs(restart_s) and _secs(requeue_delay_s)):
        return Decision(False, BAD, f"malformed restart cost: {restart_s!r} + {requeue_delay_s!r}")
    if remaining_s is not None and not _secs(remaining_s, inf_ok=True):
        return Decision(False, BAD, f"malformed time left: {remaining_s!r}")
    lost, cost = nodes - running, restart_s + requeue_delay_s
    base = dict(nodes=nodes, running=running, available=available, remaining_s=remaining_s,
                cost_s=cost)  # fmt: skip
    if lost == 0:
        return Decision(False, FULL, f"on all {nodes} nodes", **base)
    if available < lost:
        return Decision(False, MISSING, f"{lost} of {nodes} nodes lost, {available} idle to"
                        " take their place", **base)  # fmt: skip
    if remaining_s is None:
        return Decision(False, UNKNOWN, f"{lost} of {nodes} nodes lost and {available} idle,"
                        " but the job's time left is unknown", **base)  # fmt: skip
    gain = remaining_s * lost / nodes
    said = (f"{lost} of {nodes} nodes lost, {available} idle; time left {_t(remaining_s)} x"
            f" {lost}/{nodes} lost = {_t(gain)}")  # fmt: skip
    if gain > cost:
        return Decision(True, PAYS, f"{said} > restart {cost:.0f} s: take back", gain_s=gain,
                        **base)  # fmt: skip
    return Decision(False, SHORT, f"{said} <= restart {cost:.0f} s: go on short", gain_s=gain,
                    **base)  # fmt: skip
