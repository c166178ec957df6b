"""What a target adds to the running world: the Pulumi component that creates (or registers) the
nodes and the data tier's, the check of a stack's own config against the blueprint, reaching a
node after `up`, replacing one, its BMC, the node image built and the wait for nodes configured
at boot, and the reaper that acts on an idle cluster. Implementations import Pulumi providers
and cloud SDKs inside the methods that need them, so only the target in use loads them."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from rackform.lifecycle.outcome import ActionError
from rackform.plan.model import NodeGroupPlan, Plan
from rackform.reap.target import Reaper
from rackform.scheduler.remote import RemoteError, Runner, host, ssh_to

if TYPE_CHECKING:  # Pulumi loads only where the program runs, not for every command
    import pulumi

    from rackform.boot.reports import Judged
    from rackform.boot.waiting import BootWait


class ImageNotBuilt(Exception):
    """Why `rackform image build` builds nothing for this blueprint (one line)."""


@dataclass(frozen=True)
class DiskImageRequest:
    """What `rackform image build` asks of a node image built on this machine (its options)."""

    out: Path
    formats: tuple[str, ...] = ()  # none: every format the builder writes
    base: Path | None = None  # the image directory to bake on; None: the builder's own
    apt_source: str | None = None
    extra_vars: Mapping[str, Any] = field(default_factory=dict)
    pip_args: tuple[str, ...] = ()
    cpus: int | None = None  # the builder VM's size; None: the builder's own default
    memory_mb: int | None = None


class TargetRuntime:
    type: ClassVar[str]
    label: ClassVar[str]  # the target's name in prose (its compiler's)

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
        `nodes` ({node group: [[name, address, port], ...]}) and `node_resources`, and where
        the stack creates Slurm's controller (AWS), `slurm_controller` ([name, address, port,
        instance id]; not a node, so not in `nodes`)."""
        raise NotImplementedError

    def data_tier(
        self, plan: Plan, opts: pulumi.ResourceOptions, setting: Callable[[str], str | None]
    ) -> pulumi.ComponentResource:
        """The component of the data tier's own stack (`plan.data_stack`: a file system the
        stack creates and keeps, with what it needs kept with it), with `outputs` (name ->
        output) to export. Only a target whose shared tier the stack creates has one."""
        raise NotImplementedError(f"{self.label} has no data tier of its own")

    def find_kept(self, plan: Plan, pieces: tuple[Any, ...]) -> dict[str, dict[str, str]]:
        """The `pieces` still in the cloud, found by their tags: {logical name: {"id": ...}}
        for the data tier's stack to import. LookupFailed (the data stack's) where it cannot
        look, or where two resources carry one piece's tags."""
        return {}

    def reach(self, plan: Plan, name: str, identity=None, known_hosts=None) -> Runner:
        """A host of the cluster by name (a node, or Slurm's controller) for commands after
        `up` (reap, heal, rolling changes, jobs, status): a listed host, over SSH as the plan's
        user, with the key and known_hosts file given (None: ssh's own). RemoteError when the
        cluster has no such host."""
        h = host(plan, name)
        if h is None:
            raise RemoteError(f"{name!r} is not a listed host of cluster {plan.name}")
        return ssh_to(plan, h, identity, known_hosts)

    def nodes(self, plan: Plan) -> Mapping[str, list[list]] | None:
        """Where the stack creates the nodes: the running ones now, node group -> [[name,
        address, port, instance id]] (the stack's `nodes` output, read from the target's API),
        for the commands that reach them after `up` (host drift, heal, status); ActionError
        where they cannot be read. None where the blueprint lists them (the plan's inventory
        holds them); a target whose stack creates its nodes and that leaves this None cannot
        have them reached (`cluster_inventory` says so)."""
        return None

    def observed_vars(self, plan: Plan, inventory: Mapping[str, Any]) -> dict[str, Any]:
        """Role variables only the cloud knows, read now for the nodes of `inventory` (a host
        level check, drift, compares the hosts with them rather than with the plan's); none
        where the plan holds them all. RemoteError where they cannot be read."""
        return {}

    def capacity(self, plan: Plan) -> Any | None:
        """What the cloud says of the capacity the node groups launch into (AWS: their
        reservations and capacity blocks), read by `up` before anything is created so
        preflight's capacity rules can check it (`Plan.capacity`); None where there is nothing
        to read. Raises the target's API errors."""
        return None

    def replace(self, plan: Plan, node: str) -> str:
        """Give a node up for a new one (heal's `replace`): its machine released, the successor
        the stack or its group launches; what was done, one line. ActionError where it failed;
        a target that launches no nodes refuses it (the schema refuses the action first)."""
        raise ActionError(f"{self.label} does not replace nodes")

    # Where `rackform image build` builds the node image: "stack" (resources of the stack, built
    # by a targeted update: `node_image_targets`), "here" (a disk image built on this machine:
    # `build_image_here`).
    image_built: ClassVar[str] = "stack"

    def build_image_here(
        self, plan: Plan, request: DiskImageRequest, log: Callable[[str], None]
    ) -> Any:
        """Build the node image on this machine, as `request` asks; ImageNotBuilt (one line)
        where it cannot be."""
        raise ImageNotBuilt(f"rackform does not build node images here for {self.label}")

    def node_image_targets(self, plan: Plan) -> list[str]:
        """What `rackform image build` updates: the URNs (Pulumi's `--target`, globs allowed) of
        the stack's resources that build the node image. ImageNotBuilt (one line) where this
        target builds no image, or the blueprint asks for none."""
        raise ImageNotBuilt(
            f"rackform does not build node images on {self.label} yet; nothing was built"
        )

    def reaper(self) -> Reaper:
        """What carries out `rackform reap`'s actions on this target: its live tags, and the
        actions themselves."""
        raise NotImplementedError

    def check_boot(self, plan: Plan, groups: list[NodeGroupPlan], how: BootWait) -> None:
        """Refuse, before anything is created, a wait for `groups`' nodes that `await_boot`
        could not do (rackform.boot.controller.BootError, one line naming the fix)."""
        from rackform.boot.controller import BootError

        raise BootError(f"rackform cannot wait for nodes configured at boot on {self.label}")

    def await_boot(self, plan: Plan, groups: list[NodeGroupPlan], how: BootWait) -> Judged:
        """Wait until every node of `groups` (configured at boot) configured itself and passed
        its checks, or `how.deadline_s` passes: each node judged passed, failed, stale or
        missing, with what to do (`reports.judge`)."""
        raise NotImplementedError

    def bmc(self, plan: Plan, node: str) -> Any | None:
        """The node's BMC for `rackform heal`'s power cycle (`system()`, `reset(system, kind)`,
        `power_state(system)`; ActionError when it cannot be used), or None where the node has
        none (the default: a target without BMCs)."""
        return None
