"""What a target adapter is. Each target (aws, bare_metal, colocation) is one package under
`rackform/targets/` whose `adapter.py` holds one `Adapter`: its part of the blueprint schema, the
rules that need the catalog, its compile step, its cost, its stack config and its Pulumi
component. `registry.py` lists them by `type`; nothing else in rackform branches on the target.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, ClassVar

from rackform.blueprint.schema.base import Strict, Violation
from rackform.catalog import Catalog

if TYPE_CHECKING:
    import pulumi

    from rackform.blueprint.schema.model import Blueprint
    from rackform.blueprint.schema.sections import NodeGroup
    from rackform.plan.model import NodeGroupPlan, Plan, RackPlan
    from rackform.plan.pricing import TargetCost


class Adapter:
    type: ClassVar[str]
    schema: ClassVar[type[Strict]]  # the target's model, discriminated on `type`
    fabrics: ClassVar[tuple[str, ...]]  # network fabrics the target can have
    owned: ClassVar[bool]  # hardware bought outright (it pays off only when kept busy)
    # The blueprint lists the nodes (they exist before `up`), so the plan's inventory holds them;
    # otherwise the stack creates them and its outputs name them.
    nodes_listed: ClassVar[bool]

    def on_demand(self, target: Any) -> bool:
        """Capacity rented by the hour with no commitment (the dearest way to run busy)."""
        return False

    def rules(self, bp: Blueprint, catalog: Catalog) -> list[Violation]:
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

    def idle_actions(self, purpose: str) -> tuple[str, ...]:
        """What `rackform reap --apply` can do to an idle cluster of this target and purpose."""
        return ("notify",)

    def idle_rules(self, bp: Blueprint) -> list[Violation]:
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

    def reaper(self) -> Any:
        """What carries out `rackform reap`'s actions on this target (rackform.reap.target's
        `Reaper`): its live tags, and the actions themselves."""
        raise NotImplementedError

    def ssh_user(self, target: Any) -> str:
        """The user Ansible logs in as."""
        raise NotImplementedError

    def compile_group(self, bp: Blueprint, group: NodeGroup, catalog: Catalog) -> NodeGroupPlan:
        raise NotImplementedError

    def compile_target(
        self, bp: Blueprint, groups: tuple[NodeGroupPlan, ...], catalog: Catalog
    ) -> tuple[Any, tuple[RackPlan, ...]]:
        """(what the target derives for its component, the racks with their planned power)."""
        return None, ()

    def role_vars(self, plan: Plan) -> Mapping[str, Any]:
        """Role variables the target adds (e.g. what the machine image preinstalled)."""
        return {}

    def inventory_vars(self, plan: Plan) -> Mapping[str, Any]:
        """Inventory variables for every node (e.g. how the controller's SSH reaches them)."""
        return {}

    def stack_config(self, target: Any) -> Mapping[str, str]:
        """Stack config keys beyond rackform's own (e.g. the AWS provider's region)."""
        return {}

    def check_stack_config(self, plan: Plan, setting: Callable[[str], str | None]) -> None:
        """Refuse a stack whose own config contradicts the blueprint (raises ProgramError);
        `setting("ns:key")` reads a key of the stack's config."""

    def cost(self, plan: Plan) -> TargetCost:
        raise NotImplementedError

    def component(
        self,
        name: str,
        plan: Plan,
        opts: pulumi.ResourceOptions,
        providers: Mapping[str, Any],
    ) -> Any:
        """The Pulumi component that creates (or registers) the nodes: a ComponentResource with
        `nodes` ({node group: [[name, address, port], ...]}) and `node_resources`."""
        raise NotImplementedError
