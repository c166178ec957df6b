"""Host-level drift: the roles in check mode with --diff over the cluster's inventory (the
blueprint's hosts, or the nodes its stack created, as the target's runtime lists them),
summarized per host and role.

What a converge would change is drift that `rackform configure` repairs: a driver branch, the
NCCL config and env file, a service stopped, sysctl and limits, an array not mounted. What the
roles refuse even in check mode (a RAID array that is degraded or broken, a drive that holds
data) is drift that needs a person: configure cannot repair it, and says so. A host that could
not be reached is reported too: nobody knows what it holds. smoke_train is left out: it
converges a job, not a host's state.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rackform.plan.model import Plan, thaw

SKIPPED_ROLES = ("smoke_train",)


@dataclass
class Item:
    host: str
    role: str
    task: str
    kind: str  # "repairable" (configure fixes it) | "needs a person" | "unreachable"
    detail: list[str] = field(default_factory=list)  # the diff, or the role's message

    def as_dict(self) -> dict[str, Any]:
        return {
            "host": self.host,
            "role": self.role,
            "task": self.task,
            "kind": self.kind,
            "detail": self.detail,
        }


class Collector:
    """Reads a push's live display: a task line as each task starts, `    HOST: changed` with
    the diff indented below it, and `    HOST: FAILED|UNREACHABLE (...): message`."""

    def __init__(self, echo: Callable[[str], None] | None = None):
        self.items: list[Item] = []
        self.task = ""
        self.echo = echo
        self._open: Item | None = None

    def __call__(self, line: str) -> None:
        if self.echo:
            self.echo(line)
        if line.startswith("      ") and self._open is not None:
            self._open.detail.append(line.strip())
            return
        self._open = None
        if line and not line.startswith(" ") and not line.startswith("=="):
            self.task = line.removeprefix("handler ")
            return
        text = line.strip()
        host, _, rest = text.partition(": ")
        role, _, task = self.task.partition(" : ") if " : " in self.task else ("", "", self.task)
        if rest.startswith("changed"):
            self._open = Item(host, role, task, "repairable")
            self.items.append(self._open)
        elif rest.startswith(("FAILED", "UNREACHABLE")):
            kind = "unreachable" if rest.startswith("UNREACHABLE") else "needs a person"
            message = rest.split(": ", 1)[1] if ": " in rest else rest
            self.items.append(Item(host, role, task, kind, [message]))


def check(
    plan: Plan,
    *,
    inventory: dict[str, Any] | None = None,
    private_key: Path | None = None,
    known_hosts: Path | None = None,
    extravars: dict[str, Any] | None = None,
    echo: Callable[[str], None] | None = None,
    roles: Sequence[str] = (),
) -> tuple[list[Item], int]:
    """Every host's drift (check mode, nothing changed on a host) and ansible's exit status:
    of every role but the skipped ones, or of `roles` only; over `inventory` (the nodes running
    now, `rackform.targets.runtimes.cluster_inventory`), else the plan's own."""
    from rackform.push.retries import run
    from rackform.push.site import site_playbook

    collector = Collector(echo)
    result = run(
        thaw(plan.inventory) if inventory is None else inventory,
        thaw(plan.group_vars),
        private_key=private_key,
        known_hosts=known_hosts,
        extravars=extravars,
        roles=list(roles) or [r for r in site_playbook().roles if r not in SKIPPED_ROLES],
        check=True,
        diff=True,
        out=collector,
        max_fail_percent=100,  # every node is checked: no batch stops the run
    )
    return collector.items, result.rc
