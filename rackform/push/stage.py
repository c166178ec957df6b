"""What the stack's Configure stage runs on the nodes: the converge (its `create` and `update`)
and the same roles in check mode (its `read`, which `pulumi refresh` calls), JSON in and out.
"""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Mapping
from typing import Any

from rackform.push.access import access_files
from rackform.push.playbook import RunResult
from rackform.push.report import report_lines
from rackform.push.retries import UNREACHABLE_RETRIES, run


class ConfigureFailed(RuntimeError):
    """Ansible failed on some host; the message names each host, role and task (report_lines)."""

    def __init__(self, result: RunResult):
        self.result = result
        text = "".join(f"{x} " if x.endswith(":") else f"{x}; " for x in report_lines(result))
        super().__init__("configure failed: " + text.removesuffix("; "))


def summary(result: RunResult) -> dict[str, Any]:
    """JSON-friendly summary of a run (what the Pulumi configure resource records)."""
    return {
        "rc": result.rc,
        "seconds": round(result.seconds, 1),
        "changed": result.changed,
        "hosts": {h: dataclasses.asdict(s) for h, s in sorted(result.hosts.items())},
    }


def configure(
    *,
    inventory: dict[str, Any],
    group_vars: dict[str, Any],
    access: Mapping[str, str] | None = None,
    **options: Any,
) -> dict[str, Any]:
    """The converge the stack's Configure stage runs: JSON in, a summary out, ConfigureFailed
    when any host failed. `options` are `run`'s; a
    node that came back UNREACHABLE is tried again (UNREACHABLE_RETRIES) unless they say not."""
    options.setdefault("out", lambda line: print(line, file=sys.stderr))
    options.setdefault("retries", UNREACHABLE_RETRIES)
    with access_files(access) as files:
        result = run(inventory, group_vars, **files, **options)
    if result.rc != 0:
        raise ConfigureFailed(result)
    return summary(result)


def drift(
    *,
    inventory: dict[str, Any],
    group_vars: dict[str, Any],
    access: Mapping[str, str] | None = None,
    **options: Any,
) -> dict[str, Any]:
    """What a converge would change, host by host: the roles in check mode (the Pulumi
    configure resource's `read`, which `pulumi refresh` calls). A host that could not be
    checked is drift too: nobody knows what it holds. Every node is checked: no batch stops it."""
    options.setdefault("out", lambda line: print(line, file=sys.stderr))
    options.setdefault("max_fail_percent", 100)
    with access_files(access) as files:
        result = run(inventory, group_vars, check=True, **files, **options)
    hosts = {h: list(t) for h, t in result.changed_tasks.items()}
    for f in result.failures:
        hosts.setdefault(f.host, []).append(f"{f.role} : {f.task}: not checked: {f.message}")
    return {"hosts": hosts, "rc": result.rc}
