"""`rackform reap` on the stub: the cluster's live state as the stub cloud reports it (its
`protect` tag, when its machines started, whether any still run), and `stop`, which releases
the machines and records the action in the stub cloud."""

from __future__ import annotations

from rackform.lifecycle.outcome import Outcome
from rackform.plan.model import Plan
from rackform.reap.target import Live
from stub_target import cloud


class StubReaper:
    def live(self, plan: Plan, action: str | None = None) -> Live:
        c = cloud.cluster(plan.stack)
        if c is None:
            return Live(error=f"the stub cloud has no cluster {plan.stack}")
        if c["tags"].get("protect") == "true":
            return Live(protected=True, detail="stub:protect=true")
        running = sum(len(ms) for ms in c["machines"].values())
        detail = f"{running} machines running" if running else "no machine running"
        return Live(protected=False, started=c["started"], off=not running, detail=detail)

    def act(self, plan: Plan, action: str) -> list[Outcome]:
        doc = cloud.read()
        c = doc["clusters"][plan.stack]
        names = [m[0] for ms in c["machines"].values() for m in ms]
        c["machines"] = {g: [] for g in c["machines"]}
        doc["acts"].append({"stack": plan.stack, "action": action})
        cloud.write(doc)
        return [Outcome(n, True, "stopped") for n in names]

    def snooze(self, plan: Plan, until: float, reason: str) -> list[Outcome]:
        return []  # no tags written: the reaper's state directory holds the snooze
