"""Resource-level drift: `pulumi refresh` in preview mode through the Automation API on the
stack `<name>-<env>`. It asks every provider to read its resources (AWS for instances and the
network; for bare metal and colocation the Host provider's read: a lost GPU, a swapped NVMe
drive, an unreachable host) and reports what differs from the state, changing nothing. Needs
the Pulumi CLI (`PulumiMissing` says so where it is absent)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from rackform.plan.model import Plan

QUIET_OPS = ("same", "read", "refresh")


def check(plan: Plan, project: Path, out: Callable[[str], None]) -> list[dict[str, Any]]:
    """The resources whose live state differs from the stack's state, by URN."""
    from pulumi import automation as auto

    from rackform.stack.workspace import WorkspaceError, open_stack

    stack = open_stack(plan, project)  # PulumiMissing (a WorkspaceError) without the CLI
    found: dict[str, dict[str, Any]] = {}

    def on_event(event: auto.EngineEvent) -> None:
        pre = event.resource_pre_event or event.res_outputs_event
        meta = getattr(pre, "metadata", None)
        if meta is None or str(getattr(meta.op, "value", meta.op)) in QUIET_OPS:
            return
        found[meta.urn] = {
            "urn": meta.urn,
            "type": meta.type,
            "op": str(getattr(meta.op, "value", meta.op)),
            "properties": list(meta.diffs or []),
        }

    try:
        result = stack.preview_refresh(on_output=out, on_event=on_event)
    except auto.CommandError as exc:
        raise WorkspaceError(f"pulumi refresh --preview-only failed: {exc}") from None
    changes = result.change_summary or {}
    drifted = {k: v for k, v in changes.items() if k not in QUIET_OPS and v}
    if drifted and not found:  # a summary without events: say what it counted
        return [
            {"urn": "", "type": "", "op": k, "count": v, "properties": []}
            for k, v in drifted.items()
        ]
    return sorted(found.values(), key=lambda r: r["urn"])
