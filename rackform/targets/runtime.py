"""What a target adds to the running world: how Ansible reaches its nodes (user, inventory
variables, what the machine image preinstalled), its stack config, the Pulumi component that
creates or registers the nodes, and the reaper that acts on an idle cluster. The runtime
registry (`rackform.targets.runtimes`) lists one per target. Implementations import Pulumi
providers and cloud SDKs inside the methods that need them, so only the target in use loads
them."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, ClassVar

from rackform.plan.model import Plan
from rackform.reap.target import Reaper

if TYPE_CHECKING:  # Pulumi loads only where the program runs, not for every command
    import pulumi


class TargetRuntime:
    type: ClassVar[str]

    def ssh_user(self, target: Any) -> str:
        """The user Ansible logs in as."""
        raise NotImplementedError

    def inventory_vars(self, plan: Plan) -> Mapping[str, Any]:
        """Inventory variables for every node (e.g. how the controller's SSH reaches them)."""
        return {}

    def role_vars(self, plan: Plan) -> Mapping[str, Any]:
        """Role variables the target adds (e.g. what the machine image preinstalled)."""
        return {}

    def stack_config(self, target: Any) -> Mapping[str, str]:
        """Stack config keys beyond rackform's own (e.g. the AWS provider's region)."""
        return {}

    def check_stack_config(self, plan: Plan, setting: Callable[[str], str | None]) -> None:
        """Refuse a stack whose own config contradicts the blueprint (raises ProgramError);
        `setting("ns:key")` reads a key of the stack's config."""

    def component(
        self,
        name: str,
        plan: Plan,
        opts: pulumi.ResourceOptions,
        providers: Mapping[str, Any],
    ) -> pulumi.ComponentResource:
        """The Pulumi component that creates (or registers) the nodes: a ComponentResource with
        `nodes` ({node group: [[name, address, port], ...]}) and `node_resources`."""
        raise NotImplementedError

    def reaper(self) -> Reaper:
        """What carries out `rackform reap`'s actions on this target: its live tags, and the
        actions themselves."""
        raise NotImplementedError
