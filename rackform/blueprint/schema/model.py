"""The Blueprint: one cluster, declared once. The target is a union of every registered target's
model (`rackform.blueprint.targets.schemas`), a node group is the shared NodeGroup with every target's own
fields, and each target's catalog-dependent rules run here too, so every
`Blueprint.model_validate` enforces them wherever it is called from."""

from __future__ import annotations

from typing import Annotated, Any, Literal, Union

from pydantic import Field, ValidationError, model_validator

from rackform.blueprint.schema import sections
from rackform.blueprint.schema.base import Strict, Violation, check, repeated
from rackform.blueprint.schema.image import ImageSpec as SharedImageSpec
from rackform.blueprint.schema.rollout import rollout_rules
from rackform.blueprint.schema.scheduler import SlurmScheduler, scheduler_rules
from rackform.blueprint.schema.sections import (
    FABRICS,
    LifecycleSpec,
    Name,
    NetworkSpec,
    SoftwareSpec,
    StorageSpec,
    ValidationSpec,
    WorkloadSpec,
)
from rackform.blueprint.schema.topology import TopologySpec, topology_rules
from rackform.blueprint.schema.waivers import Waiver, duplicate_waivers
from rackform.blueprint.targets.schemas import SCHEMAS
from rackform.catalog import load_catalog

# "default" names the base blueprint on every command line (`--env default`), so no
# environment may take it.
DEFAULT_ENV = "default"
EnvName = Annotated[str, Field(pattern=r"^[a-z][a-z0-9-]{0,30}$")]


class Promotion(Strict):
    """How an environment receives a blueprint: only by promotion from another environment."""

    source: Annotated[
        EnvName,
        Field(
            alias="from",
            description="The environment whose validated digest this one takes (or default).",
        ),
    ]


Target = Annotated[
    Union[tuple(s.model for s in SCHEMAS.values())],  # noqa: UP007 (built from the registry)
    Field(discriminator="type", description="Where the cluster runs (discriminated on `type`)."),
]

# The fields each target adds to a node group, once each (bare metal and colocation share theirs).
_GROUP_FIELDS = tuple(dict.fromkeys(s.group_fields for s in SCHEMAS.values() if s.group_fields))

# A node group as a blueprint writes it: what every target shares, then each target's own
# fields. Node groups sit beside the target in the file, not inside it, so their model cannot be
# chosen by the target's `type`; a field of another target is refused by `foreign_fields`.
NodeGroup = type(
    "NodeGroup",
    (*reversed(_GROUP_FIELDS), sections.NodeGroup),  # the shared fields come first
    {"__module__": __name__},
)


# The `image` section as a blueprint writes it: what every target shares, then each target's own
# fields (a field of another target is refused by `foreign_image_fields`).
_IMAGE_FIELDS = tuple(dict.fromkeys(s.image_fields for s in SCHEMAS.values() if s.image_fields))
ImageSpec = type("ImageSpec", (*reversed(_IMAGE_FIELDS), SharedImageSpec), {"__module__": __name__})


def _foreign(
    kind: str, section: str, shared: type[Strict], items: list[tuple[tuple, Any]], says
) -> list[Violation]:
    """Fields another target adds to a section (`section`: the target schema's attribute of its
    own fields), set in a section of a `kind` blueprint; `items`: (path, model) of each section
    of the blueprint, `says(field, owners)` the message."""
    own = getattr(SCHEMAS[kind], section)
    mine = set(shared.model_fields) | set(own.model_fields if own else ())

    def owners(field: str) -> str:
        theirs = [(t, getattr(s, section)) for t, s in SCHEMAS.items()]
        return " and ".join(t for t, f in theirs if f and field in f.model_fields)

    return [
        Violation((*at, field), says(field, owners(field)), f"remove {field}")
        for at, m in items
        for field in type(m).model_fields
        if field in m.model_fields_set and field not in mine
    ]


def foreign_fields(kind: str, groups: list[tuple[int, Any]]) -> list[Violation]:
    """A node group field that another target adds, set on a group of this target."""
    items = [(("node_groups", i), g) for i, g in groups]
    return _foreign(
        kind,
        "group_fields",
        sections.NodeGroup,
        items,
        lambda field, owners: f"{field} is for {owners} node groups, not {kind}",
    )


def foreign_image_fields(kind: str, image: Any) -> list[Violation]:
    """An `image` field that another target adds, set on a blueprint of this target."""
    return _foreign(
        kind,
        "image_fields",
        SharedImageSpec,
        [] if image is None else [(("image",), image)],
        lambda field, owners: f"image.{field} is for {owners} blueprints, not {kind}",
    )


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
    topology: Annotated[
        TopologySpec | None,
        Field(
            description="NVLink domains and the scale-out fabric's switches, for Slurm's topology.conf, job placement and preflight; none: each node is its own NVLink domain (a rack-scale system's trays form domains) and each rack a leaf under one root."
        ),
    ] = None
    workload: Annotated[
        WorkloadSpec | None, Field(description="What will run, for sizing and cost findings.")
    ] = None
    validation: Annotated[ValidationSpec, Field(description="Smoke job and thresholds.")] = (
        ValidationSpec()
    )
    lifecycle: Annotated[LifecycleSpec, Field(description="Protection and idle policy.")] = (
        LifecycleSpec()
    )
    image: Annotated[
        ImageSpec | None,
        Field(
            description="The node image: whether what every node installs alike is baked into a machine image the nodes launch from (none: the nodes install everything after they boot)."
        ),
    ] = None
    scheduler: Annotated[
        SlurmScheduler | None,
        Field(
            description="A job scheduler on the nodes (training clusters): Slurm with partitions, priority tiers and preemption by requeue."
        ),
    ] = None
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

    promotion: Annotated[
        dict[EnvName, Promotion],
        Field(
            default_factory=dict,
            description="Environments that take this blueprint only by promotion, e.g. prod: {from: staging}: `rackform up` (and `pulumi up`) on prod then needs a promotion record (`rackform promote`) backed by staging's own Validate-stage report, signed by a key promotion-keys.yaml lists for staging. Base blueprint only; in no environment's blueprint digest, but in the pin a promotion checks, and every change to it shows in `rackform diff`.",
        ),
    ]

    @model_validator(mode="after")
    def _rules(self) -> Blueprint:
        out: list[Violation] = []
        out += self._unique_names()
        out += self._fabric_rules()
        out += self._workload_rules()
        out += duplicate_waivers(self.waivers)
        out += self._promotion_rules()
        out += scheduler_rules(self)
        if self.scheduler is not None and self.purpose == "training":
            out += SCHEMAS[self.target.type].scheduler_rules(self, load_catalog())
        out += rollout_rules(self.lifecycle, self.node_groups)
        out += topology_rules(self, SCHEMAS[self.target.type].unnamed_nodes)
        if DEFAULT_ENV in self.environments:
            out.append(
                Violation(
                    ("environments", DEFAULT_ENV),
                    f"{DEFAULT_ENV!r} names the base blueprint (`--env {DEFAULT_ENV}`), not an environment",
                    "rename the environment, e.g. to base or dev",
                )
            )
        out += foreign_fields(self.target.type, list(enumerate(self.node_groups)))
        out += foreign_image_fields(self.target.type, self.image)
        out += SCHEMAS[self.target.type].image_rules(self, load_catalog())
        out += SCHEMAS[self.target.type].rules(self, load_catalog())
        out += SCHEMAS[self.target.type].idle_rules(self)
        out += SCHEMAS[self.target.type].health_rules(self)
        out += SCHEMAS[self.target.type].shared_rules(self)
        check(out)
        return self

    def _promotion_rules(self) -> list[Violation]:
        """Promotion names environments of this file. An environment's own blueprint carries
        no environments (nor promotion: the loader keeps it to the base), so this checks the
        base."""
        out: list[Violation] = []
        known = [DEFAULT_ENV, *self.environments]
        for env, rule in self.promotion.items():
            if env not in self.environments:
                out.append(
                    Violation(
                        ("promotion", env),
                        f"promotion names {env!r}, which is not an environment of this blueprint",
                        f"environments are {', '.join(self.environments) or 'none'}",
                    )
                )
            if rule.source not in known or rule.source == env:
                out.append(
                    Violation(
                        ("promotion", env, "from"),
                        f"{env} cannot be promoted from {rule.source!r}",
                        f"name another environment: {', '.join(e for e in known if e != env)}",
                    )
                )
        return out

    def _unique_names(self) -> list[Violation]:
        return [
            Violation(
                ("node_groups", i, "name"),
                f"node group {self.node_groups[i].name!r} is declared twice",
                "merge the groups or rename one",
            )
            for i in repeated(g.name for g in self.node_groups)
        ]

    def _fabric_rules(self) -> list[Violation]:
        return fabric_rule(self.network.fabric, self.target.type)

    def _workload_rules(self) -> list[Violation]:
        w = self.workload
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
        if w.min_nodes is not None:
            nodes = sum(
                g.count if g.count is not None else len(getattr(g, "hosts", None) or [])
                for g in self.node_groups
            )
            if w.method == "serve":
                return [
                    Violation(
                        ("workload", "min_nodes"),
                        "min_nodes is the fewest nodes an elastic training job goes on with; a serving cluster trains nothing",
                        "remove workload.min_nodes",
                    )
                ]
            if w.min_nodes > nodes:
                return [
                    Violation(
                        ("workload", "min_nodes"),
                        f"min_nodes {w.min_nodes} but the node groups have {nodes} nodes",
                        f"lower workload.min_nodes to {nodes} or fewer",
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


def partial_rules(data: Any) -> list[Violation]:
    """When the blueprint as a whole does not validate, its cross-field rules never run. So
    that every mistake shows in one run, the catalog look-ups of each node group that parses
    on its own run here (the target's kind read from its `type` tag)."""
    if not isinstance(data, dict) or not isinstance(data.get("target"), dict):
        return []
    kind = data["target"].get("type")
    target = SCHEMAS.get(kind) if isinstance(kind, str) else None
    groups = data.get("node_groups")
    if target is None or not isinstance(groups, list):
        return []
    parsed = []
    for i, raw in enumerate(groups):
        try:
            parsed.append((i, NodeGroup.model_validate(raw)))
        except ValidationError:
            continue  # its own errors are reported already
    purpose = data.get("purpose") if data.get("purpose") in ("training", "inference") else None
    out = foreign_fields(kind, parsed)
    out += target.group_rules(purpose, parsed, load_catalog())
    out += target.target_rules(data["target"], load_catalog())
    network = data.get("network")
    fabric = network.get("fabric") if isinstance(network, dict) else None
    if isinstance(fabric, str) and fabric in FABRICS:  # else the schema's own error says so
        out += fabric_rule(fabric, kind)
    return out


def fabric_rule(fabric: str, target: str) -> list[Violation]:
    """A fabric the target cannot have (each target's schema lists its own, `fabrics`): the
    one rule, for a blueprint that validates and for one that does not as a whole."""
    allowed = SCHEMAS[target].fabrics
    if fabric in allowed:
        return []
    why = "EFA exists only on AWS" if fabric == "efa" else f"{fabric} is not available on {target}"
    return [Violation(("network", "fabric"), why, "use one of: " + ", ".join(allowed))]
