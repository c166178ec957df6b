"""What the Pulumi program asks of a cluster's target: the check of the stack's own config
against the blueprint, the component that creates (or registers) the nodes, and the data tier's
own component. The program is handed one by its caller (a target's runtime satisfies it), so
the stack imports no target."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, Protocol

from rackform.plan.model import Plan

if TYPE_CHECKING:  # Pulumi loads only where the program runs, not for every command
    import pulumi

Setting = Callable[[str], "str | None"]


class StackTarget(Protocol):
    def check_stack_config(self, plan: Plan, setting: Setting) -> None:
        """Refuse a stack whose own config contradicts the blueprint (ProgramError);
        `setting("ns:key")` reads a key of the stack's config."""

    def component(
        self, name: str, plan: Plan, opts: pulumi.ResourceOptions, providers: Mapping[str, Any]
    ) -> pulumi.ComponentResource:
        """The component of the nodes: `nodes` ({node group: [[name, address, port], ...]}) and
        `node_resources`; where the stack creates Slurm's controller, `slurm_controller`."""
        ...

    def data_tier(
        self, plan: Plan, opts: pulumi.ResourceOptions, setting: Setting
    ) -> pulumi.ComponentResource:
        """The data tier's own stack's component, with `outputs` (name -> output) to export."""
        ...
