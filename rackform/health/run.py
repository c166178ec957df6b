"""One `rackform heal` run over prepared blueprints: each cluster's nodes read from Prometheus,
judged, and the cluster's breaker and budget applied. A cluster whose telemetry cannot be read is judged not at all:
its nodes are `unknown` and the reason is kept."""

from __future__ import annotations

from dataclasses import dataclass, field

from rackform.blueprint.schema.health import HealthPolicy
from rackform.blueprint.schema.rollout import budget
from rackform.health import signals
from rackform.health.reported import Reported
from rackform.health.reported import evidence as reported_evidence
from rackform.health.verdict import FAILED, SUSPECT, UNKNOWN, NodeHealth, judge_cluster
from rackform.lifecycle.breaker import Breaker
from rackform.preflight.prepared import Prepared
from rackform.telemetry.labels import Key
from rackform.telemetry.prometheus import Prometheus, TelemetryError

DEFAULT_POLICY = HealthPolicy()


@dataclass
class ClusterHealth:
    source: str
    cluster: str
    environment: str
    target: str
    declared: bool  # lifecycle.health in the blueprint: without it heal reports, never acts
    policy: HealthPolicy
    max_out_of_service: int | str | None = None  # the lifecycle's, shared with rollouts
    nodes: list[NodeHealth] = field(default_factory=list)
    breaker: Breaker | None = None
    error: str | None = None

    @property
    def budget(self) -> int:
        return budget(self.max_out_of_service, len(self.nodes))

    def as_json(self) -> dict:
        out: dict = {
            "source": self.source,
            "cluster": self.cluster,
            "environment": self.environment,
            "target": self.target,
            "policy": "declared" if self.declared else "default (report only)",
            "budget": self.budget,
            "breaker": self.breaker.as_json() if self.breaker else None,
            "nodes": [n.as_json() for n in self.nodes],
        }
        if self.error:
            out["error"] = self.error
        return out


def roster(p: Prepared) -> dict[str, tuple[str, int]]:
    """The nodes the blueprint lists (bare metal, colocation): name -> (group, GPUs). The GPU
    groups' nodes; in a cluster without GPUs (the testbed's VMs), every node, with none."""
    return {
        h.name: (g.name, g.gpus_per_node if g.has_gpus else 0)
        for g in p.plan.writing_groups
        for h in g.hosts
    }


def unlisted(p: Prepared) -> tuple[str, int] | None:
    """Where the blueprint lists no hosts (AWS: the instances are the target's), the group and
    GPUs a node found in the telemetry has: the one GPU group's, or (for several groups, which
    the scrape labels do not tell apart) the most GPUs any group's node has."""
    groups = [g for _, g in p.plan.gpu_groups]
    if not groups or any(g.hosts for g in groups):
        return None
    if len(groups) == 1:
        return groups[0].name, groups[0].gpus_per_node
    return "any", max(g.gpus_per_node for g in groups)


def judge(
    p: Prepared,
    prom: Prometheus,
    at: float,
    out_now: frozenset[str] = frozenset(),
    reported: Reported | None = None,
    since: dict[str, float] | None = None,
) -> ClusterHealth:
    """`out_now`: the nodes Slurm has out of service now (drained, down): they use the budget.
    `reported`: the cluster's last validation report, read for each node rackform has not
    re-validated since (`since`: node -> when it last passed a re-validation)."""
    plan = p.plan
    declared = plan.lifecycle.health
    policy = declared or DEFAULT_POLICY
    ch = ClusterHealth(
        plan.source,
        plan.name,
        plan.environment,
        plan.target_type,
        declared is not None,
        policy,
        plan.lifecycle.max_out_of_service,
    )
    key = Key(plan.name, plan.environment, plan.purpose)
    mount = plan.checkpoint.mount
    try:
        ch.nodes = signals.read(prom, key, roster(p), policy, at, mount, unlisted(p))
    except TelemetryError as exc:
        ch.error = str(exc)
        ch.nodes = [NodeHealth(n, g, seen=False) for n, (g, _) in roster(p).items()]
        return ch
    found = reported_evidence(reported, policy, since) if reported else {}
    for n in ch.nodes:
        n.out_of_service = n.node in out_now
        n.evidence += found.get(n.node, [])
    held = None if declared else "the blueprint declares no lifecycle.health: report only"
    ch.breaker = judge_cluster(ch.nodes, policy, held, ch.budget)
    return ch


def warnings(clusters: list[ClusterHealth]) -> list[str]:
    """What a person should hear about even on a good run: XID codes NVIDIA's catalog (as
    rackform has it) does not know, monitored until the policy names them."""
    out = []
    for c in clusters:
        for n in c.nodes:
            out += [
                f"{c.cluster}/{n.node}: {e.detail} (name it in lifecycle.health.actions.xid)"
                for e in n.evidence
                if e.fault == "xid" and "is not in NVIDIA's catalog" in e.detail
            ]
    return out


def exit_status(clusters: list[ClusterHealth]) -> tuple[int, str]:
    """3: some cluster's telemetry could not be read; 6: some node is failed or suspect; 5:
    some node is unknown (no telemetry); 0: every node healthy."""
    unread = [c.cluster for c in clusters if c.error]
    if unread:
        return 3, "telemetry could not be read for: " + ", ".join(unread)
    bad = [f"{c.cluster}/{n.node}" for c in clusters for n in c.nodes
           if n.verdict in (FAILED, SUSPECT)]  # fmt: skip
    if bad:
        return 6, "unhealthy: " + ", ".join(bad)
    unknown = [f"{c.cluster}/{n.node}" for c in clusters for n in c.nodes if n.verdict == UNKNOWN]
    if unknown:
        return 5, "no telemetry: " + ", ".join(unknown)
    return 0, "every node healthy"
