"""What the smoke job measures of the NVLink topology, from the plan: the domain map it is
handed (`--nvlink-domain NAME=HOST,...`, one per domain, validators/domain_layout.py reads it)
and the catalog's figures for a full domain of the system (`allreduce_busbw_gbps_domain`,
`alltoall_busbw_gbps_domain`; every system lists them still to be measured, so today the job
reports them not-run with what it measured, and judges the domains against each other).

Only where the blueprint declares a topology (a `topology` section, or a rack-scale system) and
a run spans what it promises: several nodes, and either several domains or a domain that joins
several nodes (an NVL72's trays). A one-node run has nothing between domains to measure (the
node's own all-reduce is node_perf's); a cluster that declares no topology keeps the job as it
was (its nodes are each their own domain, which node_perf and the outliers already compare)."""

from __future__ import annotations

from collections.abc import Mapping

from rackform.catalog.systems import System
from rackform.plan.expectations import Threshold
from rackform.plan.model import Basis, NodeGroupPlan


def domain_expectations(
    plan: Basis, group: NodeGroupPlan, nodes: int, systems: Mapping[str, System]
) -> dict:
    """Expectations' NVLink domain fields for a run of `nodes` nodes of `group` ({} when the
    run spans no domain boundary and no domain of several nodes)."""
    others = {h.name for g in plan.node_groups if g.name != group.name for h in g.hosts}
    domains = [d for d in plan.topology.domains if not set(d.nodes) & others]
    spans = len(domains) > 1 or any(d.spans_nodes for d in domains)
    if not plan.topology.declared or nodes < 2 or not spans:
        return {}
    system = next((systems.get(d.system) for d in domains if d.system), None)
    full = all(len(d.nodes) == d.capacity_nodes for d in domains)
    return {
        "nvlink_domains": tuple((d.name, d.nodes) for d in domains),
        "domain_allreduce_gbps": _figure(system, "allreduce_busbw_gbps_domain", full),
        "domain_alltoall_gbps": _figure(system, "alltoall_busbw_gbps_domain", full),
    }


def _figure(system: System | None, field: str, full: bool) -> Threshold:
    if system is None:
        return Threshold(None, "no catalog system for these domains")
    fig = getattr(system, field)
    if fig is None:
        return Threshold(None, f"catalog {system.key} {field}: to be measured")
    if not full:
        why = f"catalog {system.key} {field} is a full domain's; these domains are not all full"
        return Threshold(None, why)
    return Threshold(
        fig.value, f"catalog {system.key} {field} ({fig.source.key}, {fig.source.date})"
    )
