"""The data tier's own stack (`Plan.data_stack`) as the commands meet it, on the real Pulumi CLI
(through `stack.workspace`): `rackform up` and `preview` bring it up first, `rackform destroy`
leaves it and only `--data` destroys it, `rackform data move` moves an existing stack's pieces
into it, and every command that would act refuses a cluster's stack that still holds them.

Why a stack of its own: a kept file system must outlive everything the cluster's destroy deletes,
and it sits in a subnet and security groups. The pieces are named by the target's compiler
(`data_pieces`); the data stack's program aliases each to the URN a move gives it, and imports
the ones `rackform up` finds in the cloud by their tags (`find_kept`) while the stack's state
lacks them: an `up` after the data stack's state was lost adopts the kept file system instead of
creating a second one."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from rackform.plan.compile import ADOPT, RELEASE
from rackform.plan.model import Plan

Say = Callable[[str], object]


class LookupFailed(Exception):
    """The cloud could not be searched for what a data tier's stack lacks, or its answer is
    ambiguous (one line)."""


class DataStackError(Exception):
    """A command may not go ahead on the data tier (one line, with the fix)."""


def held_in(piece: Any, stack: str, urns: set[str] | None) -> bool:
    """Whether a stack's state holds the piece, under whatever parents (its type and name)."""
    return any(
        u.startswith(f"urn:pulumi:{stack}::") and u.endswith(f"{piece.type}::{piece.name}")
        for u in urns or ()
    )


def left_behind(plan: Plan, pieces: Sequence[Any], cluster_urns: set[str] | None) -> list[Any]:
    """Of the data tier's `pieces` (its target's `data_pieces`), those the cluster's stack still
    holds where it held them before the data tier had a stack of its own."""
    return [p for p in pieces if p.urn(plan.stack) in (cluster_urns or set())]


def check_moved(plan: Plan, pieces: Sequence[Any], root: Path | None, doing: str) -> None:
    """Refuse `doing` on a cluster whose stack still holds its data tier's pieces: a destroy
    would stop at their subnet (or delete the file system, were it not kept), an `up` would
    make a second file system in the data stack."""
    from rackform.stack.workspace import held_urns

    if not plan.data_stack:
        return
    behind = left_behind(plan, pieces, held_urns(plan, root, plan.stack))
    if behind:
        names = ", ".join(p.name for p in behind)
        raise DataStackError(
            f"stack {plan.stack} still holds its data tier from before it had a stack of its own "
            f"({names}): run `rackform data move {plan.source} --env {plan.environment}` (a dry "
            f"run; --apply moves them to {plan.data_stack}, nothing replaced), then {doing} "
            "again; nothing was done"
        )


def adoption(
    plan: Plan,
    pieces: Sequence[Any],
    find: Callable[[Plan, tuple[Any, ...]], dict[str, dict[str, str]]],
    root: Path | None,
    say: Say,
) -> dict[str, str]:
    """The data stack's config for its next `up` or `preview`: of its `pieces` (the target's
    `data_pieces`), those its state lacks that the cloud still has (`find`: looked for by their
    tags, LookupFailed where it cannot look) to import, and its protection kept."""
    from rackform.stack.workspace import held_urns

    held = held_urns(plan, root, plan.data_stack)
    wanted = tuple(p for p in pieces if not held_in(p, plan.data_stack, held))
    found: dict[str, dict[str, str]] = {}
    if wanted:
        try:
            found = find(plan, wanted)
        except LookupFailed as exc:  # no credentials, no answer, or two with one piece's tags
            raise DataStackError(f"{exc}; nothing was created") from None
    for name, got in sorted(found.items()):
        say(
            f"rackform: {name} ({got['id']}) outlived {plan.data_stack}'s state: imported, "
            "not created again"
        )
    return {ADOPT: json.dumps(found, sort_keys=True) if found else "", RELEASE: ""}


def has_outputs(plan: Plan, root: Path | None) -> bool:
    """Whether the data stack exists and holds anything for the cluster's stack to read."""
    from rackform.stack.workspace import held_urns

    return bool(held_urns(plan, root, plan.data_stack))


def run_data(
    plan: Plan,
    root: Path | None,
    operation: str,
    config: dict[str, str],
    on_output: Say,
    on_error: Say,
    refresh: bool = False,
) -> int:
    """Pulumi's `operation` on the data stack with `config` added; Pulumi's exit status.
    `refresh`: read its resources' live state first (`up --refresh`)."""
    from rackform.stack.workspace import open_data_stack, run

    stack = open_data_stack(plan, root, extra=config)
    return run(stack, operation, on_output, on_error, refresh=refresh)


def destroy_data(plan: Plan, root: Path | None, on_output: Say, on_error: Say) -> int:
    """`rackform destroy --data`, after the cluster's destroy: an update that lifts the
    protection and changes nothing else (Pulumi docs, `protect`: "set protect to false and run
    an update" before a protected resource can be deleted), then the destroy."""
    code = run_data(plan, root, "up", {RELEASE: "true", ADOPT: ""}, on_output, on_error)
    if code:
        return code
    return run_data(plan, root, "destroy", {RELEASE: "true"}, on_output, on_error)


def move(plan: Plan, pieces: Sequence[Any], root: Path | None, apply: bool, say: Say) -> int:
    """`rackform data move`: the pieces the cluster's stack holds at their former URNs, moved
    to the data stack with `pulumi state move` (its state only: the cloud is not touched, and
    the data stack's program takes each moved piece by its alias). Dry run unless `apply`."""
    from rackform.stack.workspace import held_urns, open_data_stack, pulumi_command

    if not plan.data_stack:
        raise DataStackError(
            f"{plan.source}: cluster {plan.name} keeps no file system in a stack of its own "
            "(storage.shared fsx or efs, created and retained): nothing to move"
        )
    cluster = held_urns(plan, root, plan.stack)
    if cluster is None:
        raise DataStackError(f"stack {plan.stack} does not exist: nothing to move")
    data = held_urns(plan, root, plan.data_stack)
    there = [p for p in pieces if held_in(p, plan.data_stack, data)]
    moving = left_behind(plan, pieces, cluster)
    if not moving:
        raise DataStackError(
            f"stack {plan.stack} holds none of its data tier's pieces where it held them: "
            f"nothing to move (`rackform up` brings {plan.data_stack} up, importing what it "
            "finds in the cloud by its tags)"
        )
    if there:
        raise DataStackError(
            f"{plan.data_stack} already holds {', '.join(p.name for p in there)}: moving "
            f"{plan.stack}'s would give it two; nothing was moved"
        )
    urns = [p.urn(plan.stack) for p in moving]
    absent = [p.name for p in pieces if p not in moving]
    verb = "Moving" if apply else "Would move (dry run: nothing changed; --apply moves)"
    say(f"rackform: {verb} from stack {plan.stack} to {plan.data_stack}, state only:")
    for urn in urns:
        say(f"  {urn}")
    if absent:
        say(
            f"rackform: not in {plan.stack}: {', '.join(absent)} (`rackform up` looks for them "
            "in the cloud by their tags, and imports what it finds)"
        )
    if not apply:
        return 0
    open_data_stack(plan, root)  # the destination, with its config, before the move
    code, out = pulumi_command(
        plan,
        root,
        ["state", "move", "--source", plan.stack, "--dest", plan.data_stack, "--yes", *urns],
    )
    for line in out.splitlines():
        say(f"  {line}")
    if code:
        say(f"rackform: pulumi state move exited {code}: nothing more was done")
        return code
    say(
        f"rackform: moved {len(urns)} resources to {plan.data_stack}; now `rackform up "
        f"{plan.source} --env {plan.environment}` (`rackform preview` first shows no "
        "replacement: each piece is the same resource under its alias)"
    )
    return 0
