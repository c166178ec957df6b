"""`rackform configure FILE --rolling [--rollback | --abandon]`: a software change rolled through
the cluster batch by batch, its record in the state directory; the
cluster as the blueprint and the command's options give it."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from rackform.lifecycle.directory import state_dir
from rackform.lifecycle.record import Store
from rackform.lifecycle.slurm import SlurmSteps
from rackform.plan.inventory import inventory_hosts
from rackform.plan.model import Plan, thaw
from rackform.rollout.ansible import AnsibleNodes
from rackform.rollout.plan import basis
from rackform.rollout.run import Cluster, RollingError, carry_out
from rackform.targets.runtimes import controller


@dataclass
class Options:
    state: Path | None = None
    private_key: Path | None = None
    known_hosts: Path | None = None
    report_dir: Path | None = None
    rollback: bool = False
    abandon: bool = False
    extras: dict = field(default_factory=dict)  # --extra-vars: over the blueprint's, every run


def cluster(plan: Plan, opts: Options, out: Callable[[str], None]) -> Cluster:
    nodes = inventory_hosts(plan.inventory)

    def ansible(roles: Sequence[str]) -> AnsibleNodes:
        inv, variables = thaw(plan.inventory), {**thaw(plan.group_vars), **opts.extras}
        return AnsibleNodes(
            inv, variables, opts.private_key, opts.known_hosts, opts.report_dir, out,
            opts.extras, roles,
        )  # fmt: skip

    return Cluster(
        plan.stack,
        plan.digest,
        basis(plan, opts.extras),
        nodes,
        plan.lifecycle,
        lambda: SlurmSteps(controller(plan, opts.private_key, opts.known_hosts), nodes),
        ansible,
    )


def rolling(plan: Plan, opts: Options, out: Callable[[str], None] = print) -> int:
    if plan.scheduler is None:
        raise RollingError(
            f"{plan.source}: --rolling drains nodes through Slurm and the blueprint declares no"
            " scheduler; `rackform configure` without --rolling changes every node at once"
        )
    store = Store(state_dir(opts.state), plan.stack)
    return carry_out(
        cluster(plan, opts, out), store, out, rollback_=opts.rollback, abandon=opts.abandon
    )
