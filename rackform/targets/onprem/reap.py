"""`rackform reap`'s actions on hosts that already exist (bare metal, colocation): power-off
through each host's BMC (Redfish), or drain. Hosts are acted on in parallel (at most
PARALLEL at once); one host's failure (a BMC that refuses the credentials, or does not answer,
or a host that does not reach Off in time) is that host's outcome; the others go on.

Where the blueprint declares a scheduler, drain goes through it (rackform.scheduler.drain:
`scontrol update state=drain` on the controller, running jobs finish, Slurm decides); without
one, each host gets rackform's drain mark and its validation work is stopped.

Before acting, and in a dry run alike, `live` reads every host's PowerState (power-off) or,
for a drain through Slurm, every node's Slurm state: a cluster whose hosts are all Off, or whose
nodes are all drained, already is left alone ("already off"), so a second reaper never acts
twice. Owned hosts carry no live tags, so the blueprint's lifecycle.protect and `rackform
snooze` (the reaper's state directory) are the only holds.
"""

from __future__ import annotations

import shlex
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from rackform.lifecycle import drain as slurm_drain
from rackform.lifecycle.outcome import Outcome
from rackform.plan.model import Plan
from rackform.reap.target import Live
from rackform.scheduler.remote import RemoteError, Runner, controller, ssh_to
from rackform.targets.onprem.redfish import BmcError, Redfish

DRAIN_TIMEOUT_S = 60
# Hosts acted on at once: BMCs are slow (a Redfish call can take seconds) and a rack's worth in
# parallel keeps a large cluster's power-off within minutes.
PARALLEL = 16
# Where a drained host says so: schedulers and rackform's own roles can refuse a drained node.
DRAIN_MARK = "/var/lib/rackform/drained"
# A drained host stops taking validation work: the marker, then the smoke job if one runs (its
# entry module, as the smoke_train role starts it) and DCGM's diagnostics.
DRAIN_SCRIPT = f"""set -e
mkdir -p {shlex.quote(str(Path(DRAIN_MARK).parent))}
printf 'drained by rackform reap: %s\\n' "$1" > {shlex.quote(DRAIN_MARK)}
pkill -TERM -f 'validators[.]smoke' || true
pkill -TERM -f 'dcgmi diag' || true
echo drained
"""


class OnPremReaper:
    def __init__(self, poll_s: float = 2.0, controller: Callable[[Plan], Runner] = controller):
        self.poll_s = poll_s
        self.controller = controller  # where Slurm's commands run: the controller, over SSH

    def live(self, plan: Plan, action: str | None = None) -> Live:
        if action == "drain" and plan.scheduler is not None:
            return self._slurm_live(plan)
        if action != "power-off":
            return Live(detail="no live tags on owned hosts: lifecycle.protect decides")
        states: dict[str, str] = {}
        for name, redfish in _bmcs(plan):
            try:
                if isinstance(redfish, str):
                    raise BmcError(redfish)
                states[name] = redfish.power_state(redfish.system())
            except BmcError as exc:
                return Live(error=f"cannot read {name}'s power state: {exc}")
        on = sorted(n for n, st in states.items() if st != "Off")
        detail = "every host Off" if not on else f"{len(on)} of {len(states)} hosts not Off"
        return Live(off=not on, detail=detail)

    def act(self, plan: Plan, action: str) -> list[Outcome]:
        if action == "power-off":
            idle = plan.lifecycle.idle
            timeout = idle.power_off_timeout_s if idle else 300
            force = bool(idle and idle.force_off)

            def off(item: tuple[str, Redfish | str]) -> Outcome:
                name, redfish = item
                if isinstance(redfish, str):
                    return Outcome(name, False, redfish)
                try:
                    return Outcome(name, True, redfish.power_off(timeout, force, self.poll_s))
                except BmcError as exc:
                    return Outcome(name, False, str(exc))

            return _parallel(off, _bmcs(plan))
        if action == "drain":
            why = f"{plan.name}/{plan.environment}"
            if plan.scheduler is not None:
                return self._slurm_drain(plan, f"rackform reap: {why} idle")
            return _parallel(lambda h: _drain(plan, h, why), _hosts(plan))
        raise ValueError(f"{action} is not an on-prem idle action")

    def _slurm_live(self, plan: Plan) -> Live:
        """Every node of the blueprint drained (or draining) in Slurm already: nothing to do."""
        assert plan.scheduler is not None
        nodes = [n.name for n in plan.scheduler.nodes]
        try:
            states = slurm_drain.node_states(self.controller(plan))
        except RemoteError as exc:
            return Live(error=f"cannot read Slurm's node states: {exc}")
        left = [n for n in nodes if "drain" not in states.get(n, "")]
        if left:
            return Live(off=False, detail=f"{len(left)} of {len(nodes)} nodes not drained")
        return Live(off=True, detail=f"every node drained in Slurm ({len(nodes)})")

    def _slurm_drain(self, plan: Plan, reason: str) -> list[Outcome]:
        assert plan.scheduler is not None
        nodes = [n.name for n in plan.scheduler.nodes]
        try:
            run = self.controller(plan)
        except RemoteError as exc:
            return [Outcome(n, False, str(exc)) for n in nodes]
        return slurm_drain.drain(run, nodes, reason)

    def snooze(self, plan: Plan, until: float, reason: str) -> list[Outcome]:
        return []  # owned hosts carry no tags: the reaper's state directory holds the snooze


def _hosts(plan: Plan) -> list:
    return [h for _, g in plan.gpu_groups for h in g.hosts]


def _bmcs(plan: Plan) -> list[tuple[str, Redfish | str]]:
    """Each host's Redfish client, or why there is none (no bmc, unreadable credentials)."""
    base = Path(plan.source).parent
    # The plan's hosts carry what configuring them needs; the BMC is the blueprint's.
    bmcs = {h.name: h.bmc for g in plan.effective.blueprint.node_groups for h in g.hosts}
    out: list[tuple[str, Redfish | str]] = []
    for h in _hosts(plan):
        bmc = bmcs.get(h.name)
        if bmc is None:  # the schema asks for one with power-off
            out.append((h.name, "no bmc in the blueprint"))
            continue
        try:
            out.append((h.name, Redfish(bmc, base)))
        except BmcError as exc:
            out.append((h.name, str(exc)))
    return out


def _parallel(fn: Callable[[Any], Outcome], items: list) -> list[Outcome]:
    if not items:
        return []
    with ThreadPoolExecutor(max_workers=min(PARALLEL, len(items))) as pool:
        return list(pool.map(fn, items))


def _drain(plan: Plan, host, why: str) -> Outcome:
    try:
        done = ssh_to(plan, host)(DRAIN_SCRIPT, (why,), DRAIN_TIMEOUT_S)
    except RemoteError as exc:
        return Outcome(host.name, False, f"drain failed: {exc}")
    if done.rc != 0:
        return Outcome(host.name, False, f"drain failed: {done.why()}")
    return Outcome(host.name, True, f"drained ({DRAIN_MARK})")
