"""`rackform preview|up|destroy FILE [--env ENV]`: the real Pulumi CLI, through the Automation
API, on the stack `<name>-<env>`. Pulumi's exit status is rackform's.

`preview` and `up` refuse a blueprint with an unwaived preflight error (the program itself
refuses it too, so a bare `pulumi up` stops the same way). `destroy` does not: tearing a
cluster down can only remove what the findings warn about."""

from __future__ import annotations

import sys
import time
from typing import Annotated

import typer

from rackform.cli.app import app
from rackform.cli.common import Env, File, for_action, need, prepared, user_error
from rackform.plan.compile import REVALIDATE
from rackform.plan.model import Plan


def operate(
    plan: Plan,
    operation: str,
    config: dict[str, str] | None = None,
    refresh: bool = False,
    targets: list[str] | None = None,
) -> None:
    need("pulumi", operation)
    # Imported here: the Automation API is only needed by these three commands.
    from rackform.stack.workspace import WorkspaceError, open_stack, run

    try:
        stack = open_stack(plan, plan.project, extra=config)
    except WorkspaceError as exc:
        raise user_error(str(exc)) from None
    code = run(
        stack,
        operation,
        on_output=lambda line: print(line, flush=True),
        on_error=lambda line: print(line, file=sys.stderr, flush=True),
        refresh=refresh,
        targets=targets,
    )
    if code:
        raise typer.Exit(code)


@app.command()
def preview(file: File, env: Env = None) -> None:
    """Show what `up` would change (pulumi preview on the stack <name>-<env>)."""
    operate(for_action(file, env, "nothing was previewed").plan, "preview")


@app.command()
def up(
    file: File,
    env: Env = None,
    revalidate: Annotated[
        bool,
        typer.Option(
            "--revalidate",
            help="Run the validation (smoke job and host checks) again even though nothing on "
            "the nodes changed.",
        ),
    ] = False,
    refresh: Annotated[
        bool,
        typer.Option(
            "--refresh",
            help="Read every resource's live state first (pulumi up --refresh): an instance "
            "terminated outside the stack (heal's replace) is launched again.",
        ),
    ] = False,
) -> None:
    """Provision, configure and validate the cluster (pulumi up on the stack <name>-<env>).
    Validation runs on create and when the configuration or the nodes change (or with
    --revalidate), never for an edit of the owner, idle policy, smoke steps or thresholds. A
    strict validation failure fails it after the report is in the stack outputs; so does an
    unwaived preflight error, before anything is created."""
    plan = for_action(file, env, "nothing was created").plan
    need("pulumi", "up")
    need("cryptography", "up")  # promotion evidence is verified (and signed) with it
    from rackform.stack.gate import UpRefused, before_up

    try:
        before_up(plan, plan.project)  # the program runs the same gate (rackform/stack/gate.py)
    except UpRefused as exc:
        raise user_error(str(exc)) from None
    stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    operate(plan, "up", {REVALIDATE: stamp} if revalidate else None, refresh)


@app.command()
def destroy(
    file: File,
    env: Env = None,
    yes: Annotated[bool, typer.Option("--yes", "-y", help="Do not ask for confirmation.")] = False,
) -> None:
    """Delete every resource of the stack <name>-<env>. Asks first unless --yes; refuses a
    cluster with lifecycle.protect: true. Hosts that already existed are released, never wiped."""
    plan = prepared(file, env).plan
    if plan.lifecycle.protect:
        raise user_error(
            f"{file}: cluster {plan.name} (environment {plan.environment}) is protected "
            "(lifecycle.protect: true); set it to false in the blueprint, run `rackform up`, "
            "then destroy"
        )
    if not yes:
        question = f"Destroy every resource of stack {plan.stack}?"
        try:
            confirmed = typer.confirm(question, default=False)
        except typer.Abort:
            confirmed = False
        if not confirmed:
            print("rackform: not destroyed (confirm, or pass --yes)", file=sys.stderr)
            raise typer.Exit(1)
    operate(plan, "destroy")
