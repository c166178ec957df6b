"""What a target adds to the blueprint schema: its section's model (discriminated on `type`), the
fields its node groups add, the fabrics it can have, and the rules that need the catalog or the
whole blueprint. The schema's registry lists one per target; the blueprint model is assembled
from them, so nothing here may import that model: rules read the blueprint through `Cluster`,
which the assembled `Blueprint` satisfies."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar, Protocol

from rackform.blueprint.schema.base import Strict, Violation
from rackform.blueprint.schema.sections import (
    LifecycleSpec,
    NetworkSpec,
    NodeGroup,
    StorageSpec,
    WorkloadSpec,
)
from rackform.catalog import Catalog


class Cluster(Protocol):
    """What a target's rules read of a validated blueprint."""

    @property
    def name(self) -> str: ...

    @property
    def purpose(self) -> str: ...

    @property
    def target(self) -> Any: ...  # the target's own model

    @property
    def node_groups(self) -> tuple[Any, ...]: ...  # NodeGroup with the targets' fields

    @property
    def network(self) -> NetworkSpec: ...

    @property
    def storage(self) -> StorageSpec: ...

    @property
    def workload(self) -> WorkloadSpec | None: ...

    @property
    def lifecycle(self) -> LifecycleSpec: ...

    @property
    def scheduler(self) -> Any: ...  # SlurmScheduler | None

    @property
    def image(self) -> Any: ...  # ImageSpec with the targets' fields | None


class TargetSchema:
    type: ClassVar[str]
    model: ClassVar[type[Strict]]  # the target section, discriminated on `type`
    # Fields this target's node groups add to the shared NodeGroup (None: none); a node group
    # of another target that sets one is refused with the field's name.
    group_fields: ClassVar[type[Strict] | None] = None
    fabrics: ClassVar[tuple[str, ...]]  # network fabrics the target can have
    # Fields this target adds to the blueprint's `image` section (None: none); set on another
    # target's blueprint, each is refused with its name.
    image_fields: ClassVar[type[Strict] | None] = None
    # Why a blueprint of this target cannot name its nodes in `topology` (the stack names them),
    # or None where it lists its hosts and can.
    unnamed_nodes: ClassVar[str | None] = None

    def rules(self, bp: Cluster, catalog: Catalog) -> list[Violation]:
        """Cross-field rules of this target that need the whole blueprint or the catalog."""
        return []

    def group_rules(
        self, purpose: str | None, groups: list[tuple[int, NodeGroup]], catalog: Catalog
    ) -> list[Violation]:
        """The rules of single node groups (catalog look-ups): run on every group that parsed
        when the blueprint as a whole did not, so all mistakes show in one run."""
        return []

    def target_rules(self, raw: Mapping[str, Any], catalog: Catalog) -> list[Violation]:
        """Catalog look-ups of the target section as written (run when the blueprint as a whole
        did not validate, so they show with the other mistakes)."""
        return []

    def scheduler_rules(self, bp: Cluster, catalog: Catalog) -> list[Violation]:
        """Where Slurm's controller runs on this target (a training blueprint with a
        scheduler): by default nowhere, so a scheduler is refused."""
        return [
            Violation(
                ("scheduler",),
                f"Slurm on {bp.target.type} needs a controller, which rackform does not make there",
                "remove scheduler, or use an aws, bare_metal or colocation target",
            )
        ]

    def image_rules(self, bp: Cluster, catalog: Catalog) -> list[Violation]:
        """The `image` section on this target: by default no image is built here, so `bake` is
        refused (a target that builds one says what it needs)."""
        if bp.image is None or not bp.image.bake:
            return []
        return [
            Violation(
                ("image", "bake"),
                f"rackform does not build node images on {self.type} yet",
                "remove image.bake: the nodes are configured after they boot",
            )
        ]

    def idle_actions(self, purpose: str) -> tuple[str, ...]:
        """What `rackform reap --apply` can do to an idle cluster of this target and purpose."""
        return ("notify",)

    def heal_actions(self) -> tuple[str, ...]:
        """What `rackform heal --apply` can do to a failed node of this target: drain it, reset
        its GPUs and reboot it everywhere (over SSH); a target adds what it has the means for."""
        return ("monitor", "drain", "reset", "reboot")

    def shared_kinds(self) -> tuple[str, ...]:
        """The data tiers (storage.shared) this target offers: an existing NFS or Lustre server
        everywhere; a target that can create one adds its own."""
        return ("server",)

    def shared_rules(self, bp: Cluster) -> list[Violation]:
        """storage.shared must be a kind this target offers."""
        shared = bp.storage.shared
        if shared is None:
            return []
        if shared.kind not in self.shared_kinds():
            return [
                Violation(
                    ("storage", "shared", shared.kind),
                    f"{shared.kind} is not a data tier on {self.type}",
                    "use server: an NFS or Lustre server the nodes reach",
                )
            ]
        host = shared.server.host if shared.server is not None else None
        hosts = [h.name for g in bp.node_groups for h in getattr(g, "hosts", ())]
        if host is None or host in hosts:
            return []
        return [
            Violation(
                ("storage", "shared", "server", "host"),
                f"{host!r} is not a host of this blueprint",
                f"name one of {', '.join(hosts)}"
                if hosts
                else "give the server's address: this target's nodes are created by the stack",
            )
        ]

    def health_rules(self, bp: Cluster) -> list[Violation]:
        """Every action lifecycle.health names must be one this target carries out."""
        health = bp.lifecycle.health
        if health is None:
            return []
        allowed = self.heal_actions()
        named = [((f,), a) for f, a in health.actions.model_dump(exclude={"xid"}).items()]
        named += [(("xid", code), a) for code, a in health.actions.xid.items()]
        return [
            Violation(
                ("lifecycle", "health", "actions", *where),
                f"{action} is not a heal action on {self.type}",
                "use one of: " + ", ".join(allowed),
            )
            for where, action in named
            if action not in allowed
        ]

    def idle_rules(self, bp: Cluster) -> list[Violation]:
        """lifecycle.idle.action must be one this target carries out for the cluster's purpose
        (e.g. no power-off on AWS: there is no BMC to reach)."""
        idle = bp.lifecycle.idle
        allowed = self.idle_actions(bp.purpose)
        if idle is None or idle.action in allowed:
            return []
        return [
            Violation(
                ("lifecycle", "idle", "action"),
                f"{idle.action} is not an idle action for a {bp.purpose} cluster on {self.type}",
                "use one of: " + ", ".join(allowed),
            )
        ]
