"""What a target adds to compile: its node groups as the plan holds them, what it derives for
its component (e.g. the AWS subnets), what kind of capacity it is and its price; how Ansible
reaches its nodes (the user, inventory and role variables) and the stack config its provider
needs; what is known of its stack before it runs (which resources are nodes, which input
changes replace them, what the offline plan's mocks answer, the data tier's pieces); and what
`rackform init` writes for it. Pure, like the plan: nothing here touches a cloud, a host or a
disk."""

from __future__ import annotations

import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar

from rackform.blueprint.schema.model import Blueprint, NodeGroup
from rackform.catalog import Catalog
from rackform.plan.model import Basis, NodeGroupPlan, Offer, Plan, RackPlan
from rackform.plan.pricing import TargetCost
from rackform.plan.slurm import ControllerInstance
from rackform.plan.targets.offline import OfflineAnswers
from rackform.plan.targets.replace_rules import ReplaceRules


class TargetCompiler:
    type: ClassVar[str]
    owned: ClassVar[bool]  # hardware bought outright (it pays off only when kept busy)
    # The blueprint lists the nodes (they exist before `up`), so the plan's inventory holds them;
    # otherwise the stack creates them and its outputs name them.
    nodes_listed: ClassVar[bool]
    # Whether the target's preflight rules count the repository's other stacks
    # (`plan.siblings`): the engine reads the blueprints beside this one only then.
    reads_siblings: ClassVar[bool] = False
    # `rackform init`: the target's name in prose, what the new repository's README says of how
    # `up` reaches the nodes, and what reruns the roles after `up` ({{blueprint}} and {{env}}
    # filled in).
    label: ClassVar[str]
    init_notes: ClassVar[str]
    after_up: ClassVar[str]
    # The Pulumi resource types that are running nodes (`rackform diff` shows deleting or
    # replacing one, or an update that rolls them, in red).
    node_types: ClassVar[tuple[str, ...]] = ()

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

    def ssh_user(self, target: Any) -> str:
        """The user Ansible logs in as."""
        raise NotImplementedError

    def inventory_vars(self, plan: Basis) -> Mapping[str, Any]:
        """Inventory variables for every node (e.g. how the controller's SSH reaches them)."""
        return {}

    def role_vars(self, plan: Basis) -> Mapping[str, Any]:
        """Role variables the target adds (e.g. what the machine image preinstalled)."""
        return {}

    def stack_config(self, target: Any) -> Mapping[str, str]:
        """Stack config keys beyond rackform's own (e.g. the AWS provider's region)."""
        return {}

    def init_template(self, purpose: str) -> Path:
        """The blueprint `rackform init` starts from for `purpose`: `init/<purpose>.yaml` in the
        package that defines this compiler."""
        module = sys.modules[type(self).__module__].__file__
        return Path(str(module)).parent / "init" / f"{purpose}.yaml"

    def offline_answers(self) -> OfflineAnswers:
        """What the offline plan's mocks answer for this target's provider (none: a target
        whose resources need no computed output or data-source call to plan)."""
        return OfflineAnswers()

    def replace_rules(self) -> ReplaceRules:
        """Which input changes replace which of the target's resources (none by default)."""
        return ReplaceRules()

    def replacement(
        self, plan: Plan, resources: list[Mapping[str, Any]]
    ) -> Mapping[str, Any] | None:
        """How a node whose template changes is replaced, for `rackform plan`: `{"strategy",
        "why", "downtime", "delete_first": [resource names]}` from the offline plan's
        `resources`; None for a target that creates no nodes (the default)."""
        return None

    def data_pieces(self, plan: Plan) -> tuple[Any, ...]:
        """What the data tier's own stack holds (`plan.data_stack`: a file system the stack
        creates and keeps, with what it needs kept with it), each with `type`, `name` and
        `urn(stack)` (its URN in a stack as it was before the data tier had its own): what
        `rackform data move` moves and `rackform up` looks for (none without a data tier)."""
        return ()
