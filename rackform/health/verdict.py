"""The pure rules of `rackform heal`: a node's verdict and action from its evidence, then the
cluster's: the breaker (too many nodes unhealthy at once: act on none) and the out-of-service
budget (act on as many as it leaves free, the most disruptive faults first; the rest wait,
named); then, of the nodes heal acts on, which are a person's (a ticket), which are replaced
and which remediated. Nothing here reads the world or a clock: the evidence, and the failures
counted in the policy's window, are the caller's."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from rackform.blueprint.schema.health import HEAL_ACTIONS, HealthPolicy
from rackform.blueprint.schema.rollout import budget as default_budget
from rackform.lifecycle.breaker import Breaker
from rackform.lifecycle.breaker import breaker as fleet_breaker
from rackform.lifecycle.budget import free as room
from rackform.lifecycle.budget import used

HEALTHY, SUSPECT, FAILED, UNKNOWN = "healthy", "suspect", "failed", "unknown"
# Actions that take a node out of service (a drain first, for every one of them).
OUT_OF_SERVICE = frozenset(HEAL_ACTIONS) - {"monitor"}
GIVE_UP_AFTER = 2  # failed remediations of one node in the window: then a person's


def severity(action: str) -> int:
    """Least to most disruptive: none, monitor, drain, reset, reboot, power-cycle, replace."""
    return -1 if action == "none" else HEAL_ACTIONS.index(action)


@dataclass(frozen=True)
class Evidence:
    """One fault a node shows: its class (a FaultActions field), what was seen (the series,
    its labels, the value and when), and the action the policy gives for it."""

    fault: str
    detail: str
    action: str
    series: str = ""
    value: float | str | None = None
    at: float | None = None
    gpu: str | None = None

    def as_json(self) -> dict:
        out = {"fault": self.fault, "detail": self.detail, "action": self.action}
        for key in ("series", "value", "at", "gpu"):
            if getattr(self, key) not in (None, ""):
                out[key] = getattr(self, key)
        return out


@dataclass
class NodeHealth:
    node: str
    group: str
    seen: bool  # any series of this node in the window: without one it is `unknown`
    evidence: list[Evidence] = field(default_factory=list)
    out_of_service: bool = False  # already drained or down (a person's, a rollout's, heal's)
    # Filled by `judge_cluster`: whether heal acts on it now, and why not where it does not.
    acts: bool = False
    waits: str = ""

    @property
    def verdict(self) -> str:
        if not self.seen:
            return UNKNOWN
        if not self.evidence:
            return HEALTHY
        return FAILED if any(e.action in OUT_OF_SERVICE for e in self.evidence) else SUSPECT

    @property
    def action(self) -> str:
        """The most disruptive action its evidence asks for; none for a healthy or unknown
        node (never acted on)."""
        if self.verdict in (HEALTHY, UNKNOWN):
            return "none"
        return max((e.action for e in self.evidence), key=severity)

    def as_json(self) -> dict:
        out = {
            "node": self.node,
            "group": self.group,
            "verdict": self.verdict,
            "action": self.action,
            "acts": self.acts,
            "evidence": [e.as_json() for e in self.evidence],
        }
        if self.waits:
            out["waits"] = self.waits
        if self.out_of_service:
            out["out_of_service"] = True
        return out


def breaker(nodes: list[NodeHealth], policy: HealthPolicy) -> Breaker:
    """Tripped when more than `breaker_fraction` of the nodes (and more than one) look
    unhealthy (suspect or failed) at once."""
    bad = sum(n.verdict in (SUSPECT, FAILED) for n in nodes)
    return fleet_breaker(bad, len(nodes), policy.breaker_fraction)


def judge_cluster(
    nodes: list[NodeHealth],
    policy: HealthPolicy,
    report_only: str | None = None,
    budget: int | None = None,
) -> Breaker:
    """Decide which nodes heal acts on now (sets `acts` and `waits` on each): none behind a
    tripped breaker, under notify_only or where `report_only` says why not; else the failed
    nodes whose action takes them out of service, most disruptive first (then by name), as many
    as the budget (the lifecycle's `max_out_of_service`; default one node or 10%) leaves free
    after the nodes already out."""
    b = breaker(nodes, policy)
    budget = default_budget(None, len(nodes)) if budget is None else budget
    free = room(budget, sum(n.out_of_service for n in nodes))
    wanting = sorted(
        (n for n in nodes if n.action in OUT_OF_SERVICE and not n.out_of_service),
        key=lambda n: (-severity(n.action), n.node),
    )
    for n in wanting:
        if b.tripped:
            n.waits = "the breaker is tripped"
        elif report_only or policy.notify_only:
            n.waits = report_only or "the health policy is notify_only"
        elif free <= 0:
            n.waits = used(budget, len(nodes), free)
        else:
            n.acts = True
            free -= 1
    return b


@dataclass(frozen=True)
class Triage:
    """The nodes heal acts on, by what it does: drained for a person, replaced, remediated."""

    ticket: list[NodeHealth]
    swap: list[NodeHealth]
    remediate: list[NodeHealth]


def triage(acting: list[NodeHealth], failed: Mapping[str, int]) -> Triage:
    """`failed`: how often each node's remediation failed in the policy's window. A `drain`, and
    a node that failed GIVE_UP_AFTER times, is a person's; a `replace` is given up; the rest
    are remediated."""
    ticket = [n for n in acting if n.action == "drain"]
    ticket += [n for n in acting if n not in ticket and failed.get(n.node, 0) >= GIVE_UP_AFTER]
    swap = [n for n in acting if n not in ticket and n.action == "replace"]
    rest = [n for n in acting if n not in ticket and n not in swap]
    return Triage(ticket, swap, rest)


def ticket_why(n: NodeHealth, policy: HealthPolicy) -> str:
    """What a person is told of a node heal leaves to them (the drain's reason, the ticket)."""
    why = "; ".join(e.detail for e in n.evidence) or n.action
    if n.action == "drain":
        return why
    return (
        f"{n.action} failed {GIVE_UP_AFTER} times in {policy.retry_window_hours} h:"
        f" replace or repair the node ({why})"
    )
