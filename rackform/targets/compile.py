"""What a target adds to compile and cost: its node groups as the plan holds them, what it
derives for its component (e.g. the AWS subnets), what kind of capacity it is, and its price.
The compile registry (`rackform.targets.compilers`) lists one per target. Pure, like the plan:
nothing here touches a cloud, a host or a disk."""

from __future__ import annotations

from typing import Any, ClassVar

from rackform.blueprint.schema.model import Blueprint, NodeGroup
from rackform.catalog import Catalog
from rackform.plan.model import Basis, NodeGroupPlan, Offer, RackPlan
from rackform.plan.pricing import TargetCost
from rackform.plan.slurm import ControllerInstance
from rackform.preflight.base import Rule


class TargetCompiler:
    type: ClassVar[str]
    owned: ClassVar[bool]  # hardware bought outright (it pays off only when kept busy)
    # The blueprint lists the nodes (they exist before `up`), so the plan's inventory holds them;
    # otherwise the stack creates them and its outputs name them.
    nodes_listed: ClassVar[bool]
    # Preflight rules of this target's own, run on its plans only (each sets `target`).
    preflight_rules: ClassVar[tuple[Rule, ...]] = ()
    # Whether those rules count the repository's other stacks (`plan.siblings`): the engine
    # reads the blueprints beside this one only then.
    reads_siblings: ClassVar[bool] = False

    def on_demand(self, target: Any) -> bool:
        """Capacity rented by the hour with no commitment (the dearest way to run busy)."""
        return False

    def compile_group(self, bp: Blueprint, group: NodeGroup, catalog: Catalog) -> NodeGroupPlan:
        raise NotImplementedError

    def node_names(self, stack: str, group: NodeGroupPlan) -> tuple[str, ...]:
        """The group's nodes by the names the inventory will hold: its listed hosts'."""
        return tuple(h.name for h in group.hosts)

    def slurm_controller(self, bp: Blueprint, stack: str) -> ControllerInstance | None:
        """The Slurm controller the target's stack creates, where it makes one; None: the
        blueprint's `scheduler.controller` host is the controller."""
        return None

    def compile_target(
        self, bp: Blueprint, groups: tuple[NodeGroupPlan, ...], catalog: Catalog
    ) -> tuple[Any, tuple[RackPlan, ...]]:
        """(what the target derives for its component, the racks with their planned power)."""
        return None, ()

    def offers(self, catalog: Catalog, groups: tuple[NodeGroupPlan, ...]) -> tuple[Offer, ...]:
        """The nodes this target could run instead, for right-sizing: by default a server as
        large as the blueprint's largest (its GPUs per node) with each of the catalog's GPU
        models, since the site buys or leases what it lists."""
        per_node = max((g.gpus_per_node for g in groups if g.gpu), default=0)
        if per_node == 0:
            return ()
        return tuple(Offer(f"{per_node} x {key}", key, per_node) for key in catalog.gpus)

    def image_pin(self, target: Any, target_plan: Any) -> dict[str, str]:
        """The machine image the nodes boot, as a promotion pins it; none where the hosts exist
        before `up` (their OS is whatever they run: the host checks record it)."""
        return {}

    def cost(self, plan: Basis) -> TargetCost:
        """The price of the plan's capacity, by line (compile adds checkpoint storage and a
        training run's cost, which every target shares)."""
        raise NotImplementedError
