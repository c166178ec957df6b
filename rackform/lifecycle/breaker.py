"""The breaker: too much of a fleet looking broken at once is far more often a monitoring or
driver fault than that many failed nodes, so when it trips nothing is taken out on that
evidence. Pure: the count of unhealthy nodes is the caller's verdict."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Breaker:
    tripped: bool
    unhealthy: int
    nodes: int
    why: str = ""

    def as_json(self) -> dict:
        out = {"tripped": self.tripped, "unhealthy": self.unhealthy, "nodes": self.nodes}
        return {**out, "why": self.why} if self.why else out


def breaker(unhealthy: int, nodes: int, fraction: float, who: str = "heal") -> Breaker:
    """Tripped when more than `fraction` of the `nodes` (and more than one) look unhealthy at
    once; `who`: the trigger that then acts on none of them."""
    tripped = unhealthy > 1 and unhealthy > fraction * nodes
    why = (
        f"{unhealthy} of {nodes} nodes look unhealthy at once (more than"
        f" {fraction:.0%}): a fleet-wide signal is far more often a monitoring or"
        f" driver fault than that many failed GPUs; {who} acts on none of them"
        if tripped
        else ""
    )
    return Breaker(tripped, unhealthy, nodes, why)
