"""`rackform up` (and a bare `pulumi up`) rolling by default: when the configure resource's
update changes node software on a cluster whose nodes are listed hosts and whose Slurm controller
is one of them (bare metal, colocation), a change that needs a drain is rolled batch by batch
(`run.carry_out`) before the resource's usual converge, which then finds those nodes
already changed, and converges what rolling leaves (nodes that joined, changes applied in place,
drift). A change that needs no drain converges as before, every node at once.

The rollout's record, lock and audit log are the stack's, in the same state directory as
`rackform configure --rolling` (the lifecycle's, found without a --state-dir): either command
resumes a rollout the other stopped. A rollout that stops fails the update, naming where it
stopped; `up` again resumes it (the Pulumi state still holds the old configuration, so the
update comes again).

Contract (the configure resource's, `stages.ConfigureProvider`), JSON in:

    roll(*, inventory, group_vars, rollout, known, access) -> {"rolled": bool, "log": [...]}
        # raises RollingStopped where the rollout stopped or was refused
    record(*, group_vars, rollout) -> None
        # what the nodes now run, after a converge that finished"""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from rackform.blueprint.schema.sections import LifecycleSpec
from rackform.lifecycle.directory import state_dir
from rackform.lifecycle.maintenance import Nodes
from rackform.lifecycle.record import Store
from rackform.lifecycle.slurm import SlurmSteps
from rackform.plan.inventory import inventory_hosts
from rackform.push.access import access_files
from rackform.rollout.ansible import AnsibleNodes
from rackform.rollout.plan import Basis, applied_basis
from rackform.rollout.plan import rollout as change_of
from rackform.rollout.run import Cluster, RollingError, carry_out
from rackform.scheduler.remote import Ssh


class RollingStopped(RuntimeError):
    """The rollout stopped, or was refused, under `up`: one message naming where and what next."""


def _cluster(spec: Mapping[str, Any], group_vars, inventory, files, out, nodes_side) -> Cluster:
    lifecycle = LifecycleSpec.model_validate(spec["lifecycle"])
    nodes = inventory_hosts(inventory)
    key, known_hosts = files.get("private_key"), files.get("known_hosts")
    ctl = spec["controller"]
    ssh = Ssh(ctl["user"], ctl["address"], int(ctl["port"]), key and str(key),
              known_hosts and str(known_hosts))  # fmt: skip
    new = Basis(dict(group_vars), dict(spec["nodes"]), dict(spec["domains"]), lifecycle)

    def ansible(roles: Sequence[str]) -> AnsibleNodes:
        return AnsibleNodes(inventory, spec["validation"], key, known_hosts, None, out, {}, roles)

    return Cluster(
        spec["stack"],
        spec["digest"],
        new,
        nodes,
        lifecycle,
        lambda: SlurmSteps(ssh, nodes),
        nodes_side or ansible,
    )


def _needs_rolling(store: Store, c: Cluster, known: Mapping[str, Any]) -> bool:
    rec = store.read()
    if rec is not None and rec.live:
        return True  # resumed (or refused, when it is another blueprint's)
    applied = store.applied() or known
    return change_of(applied_basis(applied, c.lifecycle), c.new).rolls


def roll(
    *,
    inventory: dict[str, Any],
    group_vars: dict[str, Any],
    rollout: dict[str, Any],
    known: dict[str, Any],
    access: Mapping[str, str] | None = None,
    nodes: Callable[[Sequence[str]], Nodes] | None = None,
    **_: Any,
) -> dict[str, Any]:
    """`known`: what the Pulumi state says the nodes run (`{"variables", "nodes"}`), used where
    the state directory holds no record of a later configuration. `nodes`: the node side
    (the roles through Ansible unless given: the tests' seam, where no node can run them)."""
    log: list[str] = []

    def out(line: str) -> None:
        log.append(line)
        print(line, file=sys.stderr, flush=True)

    store = Store(state_dir(), rollout["stack"])
    with access_files(access) as files:
        c = _cluster(rollout, group_vars, inventory, files, out, nodes)
        try:
            if not _needs_rolling(store, c, known):
                return {"rolled": False, "log": log}
            code = carry_out(c, store, out, known=known)
        except RollingError as exc:
            raise RollingStopped(f"configure: {exc}; nothing was rolled") from None
    if code:
        raise RollingStopped(
            f"configure: the rolling change stopped ({log[-1] if log else f'exit {code}'});"
            " the nodes not reached keep the old software and their jobs, the failed ones stay"
            f" drained. Run `rackform up` again to resume, or `rackform configure FILE --rolling"
            " --rollback` (or --abandon)"
        )
    return {"rolled": True, "log": log[-20:]}


def record(*, group_vars: dict[str, Any], rollout: dict[str, Any], **_: Any) -> None:
    """What the nodes run after a converge that finished: what a later rolling change (from
    `up` or `configure --rolling`) is compared with."""
    Store(state_dir(), rollout["stack"]).set_applied(
        dict(group_vars), dict(rollout["nodes"]), rollout["digest"]
    )
