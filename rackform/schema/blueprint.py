"""The Blueprint: one cluster, declared once. Cross-field rules that need the catalog live here
so that every `Blueprint.model_validate` enforces them, wherever it is called from."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field, model_validator

from rackform.catalog import load_catalog
from rackform.schema.base import Strict, Violation, check, closest
from rackform.schema.sections import (
    LifecycleSpec,
    Name,
    NetworkSpec,
    NodeGroup,
    SoftwareSpec,
    StorageSpec,
    ValidationSpec,
    WorkloadSpec,
)
from rackform.schema.target import AwsTarget, ColocationTarget, Target
from rackform.schema.waivers import Waiver, duplicate_waivers

EnvName = Annotated[str, Field(pattern=r"^[a-z][a-z0-9-]{0,30}$")]

# Fabrics each kind of target can have: EFA exists only on AWS, InfiniBand and RoCE only
# on hardware you own or rent whole.
FABRICS = {
    "aws": ("efa", "ethernet"),
    "bare_metal": ("infiniband", "roce", "ethernet"),
    "colocation": ("infiniband", "roce", "ethernet"),
}


class Blueprint(Strict):
    """A GPU cluster: training or inference, on AWS, bare metal or colocation."""

    name: Annotated[Name, Field(description="Cluster name: lowercase letters, digits and dashes.")]
    purpose: Annotated[
        Literal["training", "inference"],
        Field(description="Training and inference never share a cluster."),
    ]
    owner: Annotated[
        str,
        Field(
            description="Who answers for this cluster (team address).",
            pattern=r"^[^@\s]+@[^@\s]+\.[^@\s]+$",
        ),
    ]
    description: Annotated[str, Field(description="Free text.")] = ""
    target: Target
    node_groups: Annotated[
        tuple[NodeGroup, ...], Field(description="Groups of identical GPU nodes.", min_length=1)
    ]
    network: Annotated[NetworkSpec, Field(description="Inter-node fabric.")]
    storage: Annotated[StorageSpec, Field(description="Checkpoint storage.")] = StorageSpec()
    software: Annotated[SoftwareSpec, Field(description="Versions installed on the nodes.")] = (
        SoftwareSpec()
    )
    workload: Annotated[
        WorkloadSpec | None, Field(description="What will run, for sizing and cost findings.")
    ] = None
    validation: Annotated[ValidationSpec, Field(description="Smoke job and thresholds.")] = (
        ValidationSpec()
    )
    lifecycle: Annotated[LifecycleSpec, Field(description="Protection and idle policy.")] = (
        LifecycleSpec()
    )
    waivers: Annotated[
        tuple[Waiver, ...],
        Field(
            description="Preflight findings accepted on purpose, by code, each with the reason reports show. An environment's waivers replace the base's."
        ),
    ] = ()
    environments: Annotated[
        dict[EnvName, dict[str, Any]],
        Field(
            default_factory=dict,
            description="Per-environment overrides of any field above; lists of named items merge by name, and {name: X, remove: true} drops item X.",
        ),
    ]

    @model_validator(mode="after")
    def _rules(self) -> Blueprint:
        out: list[Violation] = []
        out += self._node_group_rules()
        out += self._fabric_rules()
        out += self._workload_rules()
        out += duplicate_waivers(self.waivers)
        if isinstance(self.target, ColocationTarget):
            out += self._power_rules(self.target)
        check(out)
        return self

    def _node_group_rules(self) -> list[Violation]:
        cat = load_catalog()
        out: list[Violation] = []
        seen_groups: set[str] = set()
        seen_hosts: dict[str, Any] = {}
        seen_addrs: dict[tuple[str, int | None], Any] = {}
        aws = isinstance(self.target, AwsTarget)
        for i, g in enumerate(self.node_groups):
            at = ("node_groups", i)
            if g.name in seen_groups:
                out.append(
                    Violation(
                        (*at, "name"),
                        f"node group {g.name!r} is declared twice",
                        "merge the groups or rename one",
                    )
                )
            seen_groups.add(g.name)
            if aws:
                out += _aws_group(g, at, self.purpose, cat)
            else:
                out += _onprem_group(g, at, self.target, cat)
            for j, h in enumerate(g.hosts):
                if h.name in seen_hosts:
                    out.append(
                        Violation(
                            (*at, "hosts", j, "name"),
                            f"host {h.name!r} is listed twice",
                            "host names must be unique in the cluster",
                        )
                    )
                seen_hosts[h.name] = h
                key = (h.address, h.port)
                if key in seen_addrs:
                    out.append(
                        Violation(
                            (*at, "hosts", j, "address"),
                            f"address {h.address} (port {h.port or 'default'}) is already host {seen_addrs[key].name!r}",
                            "every host needs its own address or port",
                        )
                    )
                seen_addrs[key] = h
        return out

    def _fabric_rules(self) -> list[Violation]:
        allowed = FABRICS[self.target.type]
        fabric = self.network.fabric
        if fabric not in allowed:
            why = (
                "EFA exists only on AWS"
                if fabric == "efa"
                else f"{fabric} is not available on {self.target.type}"
            )
            return [Violation(("network", "fabric"), why, "use one of: " + ", ".join(allowed))]
        if fabric == "efa":
            cat = load_catalog()
            out = []
            for i, g in enumerate(self.node_groups):
                it = cat.instances.get(g.instance_type or "")
                if it is not None and it.efa_interfaces.value == 0:
                    out.append(
                        Violation(
                            ("node_groups", i, "instance_type"),
                            f"{it.key} has no EFA interface",
                            "choose an EFA-capable type or fabric: ethernet",
                        )
                    )
            return out
        return []

    def _workload_rules(self) -> list[Violation]:
        w = self.workload
        spot = isinstance(self.target, AwsTarget) and self.target.market == "spot"
        if spot and self.purpose == "training" and (w is None or w.checkpoint_interval_min is None):
            # Spot capacity is reclaimed with two minutes' notice: only a job that checkpoints
            # and resumes can use it without losing its work.
            return [
                Violation(
                    ("target", "market"),
                    "spot training needs a job that checkpoints and resumes; this blueprint states no checkpoint interval",
                    "set workload.checkpoint_interval_min, or use market: on-demand",
                )
            ]
        if w is None:
            return []
        if self.purpose == "training" and w.method == "serve":
            return [
                Violation(
                    ("workload", "method"),
                    "a training cluster cannot serve; training and inference never share a cluster",
                    "declare a separate inference blueprint, or use pretrain/full/lora/qlora",
                )
            ]
        if self.purpose == "inference" and w.method != "serve":
            return [
                Violation(
                    ("workload", "method"),
                    f"an inference cluster cannot run {w.method!r} training; training and inference never share a cluster",
                    "use method: serve, or declare a separate training blueprint",
                )
            ]
        return []

    def _power_rules(self, target: ColocationTarget) -> list[Violation]:
        cat = load_catalog()
        racks = {r.name: r for r in target.racks}
        load_w: dict[str, float] = dict.fromkeys(racks, 0.0)
        out = []
        for i, g in enumerate(self.node_groups):
            gpu = cat.gpus.get(g.gpu or "")
            for j, h in enumerate(g.hosts):
                if h.rack not in racks:
                    fix = closest(h.rack, list(racks)) if h.rack else "add rack: <name> to the host"
                    out.append(
                        Violation(
                            ("node_groups", i, "hosts", j, "rack"),
                            f"host {h.name!r} is in no declared rack",
                            fix,
                        )
                    )
                    continue
                if gpu is not None:
                    load_w[h.rack] += gpu.power_w.value * (g.gpus_per_node or 0)
        for k, r in enumerate(target.racks):
            kw = load_w[r.name] / 1000
            if kw > r.power_kw:
                out.append(
                    Violation(
                        ("target", "racks", k, "power_kw"),
                        f"rack {r.name!r} draws {kw:.1f} kW of GPU power against a {r.power_kw:g} kW budget",
                        "move hosts to another rack or raise the budget",
                    )
                )
        return out


def _aws_group(g: NodeGroup, at: tuple, purpose: str, cat) -> list[Violation]:
    out = []
    if not g.instance_type:
        return [
            Violation(
                (*at, "instance_type"),
                "an AWS node group needs an instance_type",
                "add instance_type: e.g. p5.48xlarge",
            )
        ]
    it = cat.instances.get(g.instance_type)
    if it is None:
        return [
            Violation(
                (*at, "instance_type"),
                f"unknown instance type {g.instance_type!r}",
                closest(g.instance_type, list(cat.instances)),
            )
        ]
    if g.hosts:
        out.append(
            Violation(
                (*at, "hosts"),
                "AWS nodes are created by rackform, not listed",
                "remove hosts (they are for bare_metal / colocation)",
            )
        )
    if g.count is None:
        out.append(Violation((*at, "count"), "an AWS node group needs a count", "add count: N"))
    if g.gpu is not None and g.gpu != it.gpu:
        out.append(
            Violation(
                (*at, "gpu"),
                f"{it.key} carries {it.gpu}, not {g.gpu}",
                "remove gpu: it comes from the instance type",
            )
        )
    if g.gpus_per_node is not None and g.gpus_per_node != it.gpu_count:
        out.append(
            Violation(
                (*at, "gpus_per_node"),
                f"{it.key} has {it.gpu_count} GPUs, not {g.gpus_per_node}",
                "remove gpus_per_node: it comes from the instance type",
            )
        )
    if purpose == "training" and (g.min_count is not None or g.max_count is not None):
        out.append(
            Violation(
                (*at, "min_count" if g.min_count is not None else "max_count"),
                "training node groups do not autoscale",
                "remove min_count / max_count (inference only)",
            )
        )
    if g.min_count is not None and g.max_count is not None and g.min_count > g.max_count:
        out.append(
            Violation(
                (*at, "min_count"),
                f"min_count {g.min_count} exceeds max_count {g.max_count}",
                "lower min_count or raise max_count",
            )
        )
    if g.count is not None:
        if g.min_count is not None and g.count < g.min_count:
            out.append(
                Violation(
                    (*at, "count"),
                    f"count {g.count} is below min_count {g.min_count}",
                    "count is the desired size, between min and max",
                )
            )
        if g.max_count is not None and g.count > g.max_count:
            out.append(
                Violation(
                    (*at, "count"),
                    f"count {g.count} is above max_count {g.max_count}",
                    "count is the desired size, between min and max",
                )
            )
    return out


def _onprem_group(g: NodeGroup, at: tuple, target, cat) -> list[Violation]:
    out = []
    kind = target.type
    if g.instance_type:
        out.append(
            Violation(
                (*at, "instance_type"),
                f"instance_type is for AWS, not {kind}",
                "remove it; list hosts and set gpu and gpus_per_node",
            )
        )
    if not g.hosts:
        out.append(
            Violation(
                (*at, "hosts"),
                f"a {kind} node group lists its hosts",
                "add hosts: [{name: ..., address: ...}]",
            )
        )
    if g.count is not None and g.hosts and g.count != len(g.hosts):
        out.append(
            Violation(
                (*at, "count"),
                f"count {g.count} but {len(g.hosts)} hosts listed",
                "remove count (it defaults to the hosts listed) or fix the list",
            )
        )
    if g.gpu is not None and g.gpu not in cat.gpus:
        out.append(
            Violation((*at, "gpu"), f"unknown GPU model {g.gpu!r}", closest(g.gpu, list(cat.gpus)))
        )
    if g.gpu is not None and not g.gpus_per_node:
        out.append(
            Violation(
                (*at, "gpus_per_node"),
                f"gpu {g.gpu} needs gpus_per_node",
                "add gpus_per_node: e.g. 8",
            )
        )
    if g.gpu is None and g.gpus_per_node:
        out.append(
            Violation((*at, "gpu"), "gpus_per_node without a gpu model", "add gpu: e.g. H100-SXM")
        )
    if g.min_count is not None or g.max_count is not None:
        out.append(
            Violation(
                (*at, "min_count" if g.min_count is not None else "max_count"),
                f"{kind} hosts do not autoscale",
                "remove min_count / max_count",
            )
        )
    return out
