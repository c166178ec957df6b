"""What a target adds to the running world: how Ansible reaches its nodes (user, inventory
variables, what the machine image preinstalled), its stack config, the Pulumi component that
creates or registers the nodes, and the reaper that acts on an idle cluster. The runtime
registry (`rackform.targets.runtimes`) lists one per target. Implementations import Pulumi
providers and cloud SDKs inside the methods that need them, so only the target in use loads
them."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from rackform.lifecycle.outcome import ActionError
from rackform.plan.model import Basis, NodeGroupPlan, Plan
from rackform.reap.target import Reaper
from rackform.scheduler.remote import RemoteError, Runner, host, ssh_to

if TYPE_CHECKING:  # Pulumi loads only where the program runs, not for every command
    import pulumi

    from rackform.boot.reports import Judged
    from rackform.boot.serve import Tls


class LookupFailed(Exception):
    """The cloud could not be searched for what a data tier's stack lacks, or its answer is
    ambiguous (one line)."""


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


@dataclass(frozen=True)
class ReplaceRules:
    """How the provider of a target's resources reacts to a changed input (data, each rule
    citing its source; rackform/stack/replacement.py applies them to two offline plans):
    `replaced_by`: resource type -> {input: source} of inputs that force a new resource;
    `versioned`: type -> (output, inputs that make no new version) of a versioned resource,
    whose other changes make a new version (that output changes); `rolls`: type -> inputs
    whose change replaces the resource's running instances without replacing it."""

    replaced_by: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    versioned: Mapping[str, tuple[str, frozenset[str]]] = field(default_factory=dict)
    rolls: Mapping[str, frozenset[str]] = field(default_factory=dict)


@dataclass(frozen=True)
class BootWait:
    """How `rackform up` waits for the nodes configured at boot: `deadline_s` in all, judging
    every `poll_s`; where the controller serves them (listed nodes: the boot server listens on
    `bind`:`port`, the nodes reach it at `url`, default the bound address, the round's
    directory is `out`, and `tls` is the site's certificate, None for plain HTTP); `say` prints
    a line."""

    deadline_s: float
    bind: str | None = None
    port: int = 0
    url: str | None = None
    out: Path | None = None
    poll_s: float = 5.0
    say: Callable[[str], object] = print
    tls: Tls | None = None


@dataclass(frozen=True)
class OfflineAnswers:
    """What the offline plan's mocks (rackform/stack/offline.py) answer for a target's provider,
    by resource type or call token: outputs a type computes when it is created (shown as
    `<name>.<attr>` references), outputs left unknown as in a real preview, and its data-source
    calls (token -> the call's arguments -> its result)."""

    computed: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    unknown: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    calls: Mapping[str, Callable[[Mapping[str, Any]], dict[str, Any]]] = field(default_factory=dict)

    @staticmethod
    def merged(answers: Iterable[OfflineAnswers]) -> OfflineAnswers:
        """Every target's at once (the tokens carry each provider's name)."""
        computed: dict[str, tuple[str, ...]] = {}
        unknown: dict[str, tuple[str, ...]] = {}
        calls: dict[str, Callable[[Mapping[str, Any]], dict[str, Any]]] = {}
        for a in answers:
            computed.update(a.computed)
            unknown.update(a.unknown)
            calls.update(a.calls)
        return OfflineAnswers(computed, unknown, calls)


class TargetRuntime:
    type: ClassVar[str]
    # `rackform init`: the target's name in prose, what the new repository's README says of how
    # `up` reaches the nodes, and what reruns the roles after `up` ({{blueprint}} and {{env}}
    # filled in).
    label: ClassVar[str]
    init_notes: ClassVar[str]
    after_up: ClassVar[str]
    # The Pulumi resource types that are running nodes (`rackform diff` shows deleting or
    # replacing one, or an update that rolls them, in red).
    node_types: ClassVar[tuple[str, ...]] = ()

    def init_template(self, purpose: str) -> Path:
        """The blueprint `rackform init` starts from for `purpose`: `init/<purpose>.yaml` in the
        package that defines this runtime."""
        module = sys.modules[type(self).__module__].__file__
        return Path(str(module)).parent / "init" / f"{purpose}.yaml"

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

    def data_pieces(self, plan: Plan) -> tuple[Any, ...]:
        """What the data tier's stack holds, each with `type`, `name` and `urn(stack)` (its
        URN in a stack as it was before the data tier had its own): what `rackform data move`
        moves and `rackform up` looks for (none without a data tier)."""
        return ()

    def find_kept(self, plan: Plan, pieces: tuple[Any, ...]) -> dict[str, dict[str, str]]:
        """The `pieces` still in the cloud, found by their tags: {logical name: {"id": ...}}
        for the data tier's stack to import. LookupFailed where it cannot look, or where two
        resources carry one piece's tags."""
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

    def replace(self, plan: Plan, node: str) -> str:
        """Give a node up for a new one (heal's `replace`): its machine released, the successor
        the stack or its group launches; what was done, one line. ActionError where it failed;
        a target that launches no nodes refuses it (the schema refuses the action first)."""
        raise ActionError(f"{self.label} does not replace nodes")

    def replacement(
        self, plan: Plan, resources: list[Mapping[str, Any]]
    ) -> Mapping[str, Any] | None:
        """How a node whose template changes is replaced, for `rackform plan`: `{"strategy",
        "why", "downtime", "delete_first": [resource names]}` from the offline plan's
        `resources`; None for a target that creates no nodes (the default)."""
        return None

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

    def replace_rules(self) -> ReplaceRules:
        """Which input changes replace which of the target's resources (none by default)."""
        return ReplaceRules()

    def reaper(self) -> Reaper:
        """What carries out `rackform reap`'s actions on this target: its live tags, and the
        actions themselves."""
        raise NotImplementedError

    def offline_answers(self) -> OfflineAnswers:
        """What the offline plan's mocks answer for this target's provider (none: a target
        whose resources need no computed output or data-source call to plan)."""
        return OfflineAnswers()

    def check_boot(self, plan: Plan, groups: list[NodeGroupPlan], how: BootWait) -> None:
        """Refuse, before anything is created, a wait for `groups`' nodes that `await_boot`
        could not do (rackform.boot.controller.BootError, one line naming the fix)."""
        from rackform.boot.controller import BootError

        raise BootError(f"rackform cannot wait for nodes configured at boot on {self.label}")

    def await_boot(self, plan: Plan, groups: list[NodeGroupPlan], how: BootWait) -> Judged:
        """Wait until every node of `groups` (configured at boot) configured itself and passed
        its checks, or `how.deadline_s` passes: each node judged passed, failed, stale or
        missing, with what to do (rackform/boot/reports.py)."""
        raise NotImplementedError

    def bmc(self, plan: Plan, node: str) -> Any | None:
        """The node's BMC for `rackform heal`'s power cycle (`system()`, `reset(system, kind)`,
        `power_state(system)`; ActionError when it cannot be used), or None where the node has
        none (the default: a target without BMCs)."""
        return None
