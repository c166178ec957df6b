"""The data tier's own stack on AWS (`<stack>-data`, `Plan.data_stack`): the file system the stack
keeps and the network it sits in (the plan's data layout says which pieces and why), and what the
cluster's stack reads of it.

Its program (`rackform.stack.program.build_data`) protects every resource (Pulumi's `protect`, which
children inherit: a bare `pulumi destroy` of it refuses, and so does a change that would replace the
file system or its subnet), and `rackform destroy` never destroys it: only `rackform destroy --data`
lifts the protection (`rackform:release`, set by the compiler) and destroys it after the cluster.
Nothing in it depends on the cluster's stack; the cluster's stack reads its ids through a
StackReference, so the cluster's destroy deletes nothing a kept piece depends on.

Each piece declares, as an alias, the URN `pulumi state move` gives it when an existing stack's
pieces move here (`rackform data move`): the moved state is then the same resource, never a
replacement. A piece `rackform up` found in AWS by its tags while the stack's state lacks it
(`rackform:adopt`, `adopt.Finder`) is imported (Pulumi's `import` option) instead
of created a second time."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping

import pulumi

from rackform.plan.compile import ADOPT
from rackform.plan.model import Plan
from rackform.plan.targets.aws.data_layout import moved_urn, pieces
from rackform.stack.errors import ProgramError
from rackform.targets.aws.network import NETWORK_OUTPUTS, NodesNetwork, Placement, nodes_network
from rackform.targets.aws.shared import AwsSharedStorage, mount_vars

SHARED_OUTPUTS = ("file_system_id", "dns_name", "mount_name")
OUTPUTS = (*NETWORK_OUTPUTS, *SHARED_OUTPUTS)


def adopted(setting: Callable[[str], str | None]) -> dict[str, dict[str, str]]:
    """The pieces to import, from the stack's `rackform:adopt` ({} where none)."""
    raw = setting(ADOPT) or ""
    try:
        found = json.loads(raw) if raw.strip() else {}
    except json.JSONDecodeError as exc:
        raise ProgramError(f"stack config {ADOPT} is not JSON ({exc})") from None
    if not isinstance(found, dict) or not all(
        isinstance(v, dict) and isinstance(v.get("id"), str) for v in found.values()
    ):
        raise ProgramError(f'stack config {ADOPT} must map names to {{"id": ...}}')
    return found


class Kept(Placement):
    """A piece of the data tier: aliased to the URN a move gives it, imported where found."""

    def __init__(self, plan: Plan, adopt: Mapping[str, Mapping[str, str]]):
        self.plan = plan
        self.by_name = {p.name: p for p in pieces(plan)}
        unknown = sorted(set(adopt) - set(self.by_name))
        if unknown:
            raise ProgramError(
                f"stack config {ADOPT} names {', '.join(unknown)}, which the data tier of "
                f"{plan.stack} does not hold"
            )
        self.adopt = adopt

    def options(self, parent, name: str, **kw) -> pulumi.ResourceOptions:
        found = self.adopt.get(name) or {}
        return pulumi.ResourceOptions(
            parent=parent,
            aliases=[moved_urn(self.plan, self.by_name[name])],
            import_=found.get("id"),
            **kw,
        )

    def args(self, name: str) -> dict[str, object]:
        # A security group's name is its own (Pulumi made it from the logical name and a random
        # suffix) and replaces the group when it changes (terraform-provider-aws
        # ec2/vpc_security_group.go: name ForceNew): an adopted group keeps the one it has.
        found = self.adopt.get(name) or {}
        return {"name": found["name"]} if found.get("name") else {}


class AwsDataTier(pulumi.ComponentResource):
    """The data tier's stack: the nodes' network and the file system, and their ids as
    `outputs` (exported by the program; the cluster's stack reads them)."""

    outputs: dict[str, pulumi.Input[str]]

    def __init__(
        self,
        name: str,
        plan: Plan,
        *,
        adopt: Mapping[str, Mapping[str, str]] | None = None,
        opts: pulumi.ResourceOptions | None = None,
    ):
        super().__init__("rackform:aws:DataTier", name, None, opts)
        place = Kept(plan, adopt or {})
        self.network = nodes_network(plan, self, place)
        self.shared = AwsSharedStorage(
            f"{plan.stack}-shared",
            plan,
            self.network.subnet,
            self.network.security_group,
            place,
            opts=pulumi.ResourceOptions(parent=self),
        )
        self.outputs = {
            **self.network.outputs(),
            "file_system_id": self.shared.file_system_id,
            "dns_name": self.shared.dns_name,
            "mount_name": self.shared.mount_name,
        }
        self.register_outputs(self.outputs)


def reference_name(stack: str) -> str:
    """The fully qualified name a StackReference takes: `<organization>/<project>/<stack>`
    (Pulumi docs, "Stack references"; a self-managed backend's organization is
    `organization`, which the SDK reports)."""
    return f"{pulumi.get_organization() or 'organization'}/{pulumi.get_project()}/{stack}"


class HeldDataTier:
    """What the cluster's stack reads of its data tier's stack, through a StackReference: the
    network (as ids) and what the nodes mount. `require_output`: a data stack that has not
    been brought up (no outputs) fails the cluster's update, before anything is created in a
    network that is not there."""

    def __init__(self, plan: Plan, parent: pulumi.Resource):
        ref = pulumi.StackReference(
            reference_name(plan.data_stack), opts=pulumi.ResourceOptions(parent=parent)
        )
        got = {k: ref.require_output(k) for k in OUTPUTS}
        self.network = NodesNetwork.held(got)
        self.file_system_id = got["file_system_id"]
        self.dns_name, self.mount_name = got["dns_name"], got["mount_name"]

    def role_vars(self) -> dict[str, pulumi.Input[str]]:
        return mount_vars(self.dns_name, self.mount_name)
