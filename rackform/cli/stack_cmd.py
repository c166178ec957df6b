"""`rackform preview|up|destroy FILE [--env ENV]`: the real Pulumi CLI, through the Automation
API, on the stack `<name>-<env>`. Pulumi's exit status is rackform's."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from rackform.cli.main import app
from rackform.cli.output import EXIT_INVALID, fail
from rackform.blueprint.loader import Effective, load_effective
from rackform.blueprint.problems import BlueprintError
from rackform.stack.config import environment_arg

File = Annotated[Path, typer.Argument(help="Blueprint file.", show_default=False)]
Env = Annotated[
    str | None,
    typer.Option("--env", "-e", help="Environment (default: the base blueprint)."),
]


def _load(file: Path, env: str | None) -> Effective:
    try:
        return load_effective(file, environment_arg(env))
    except BlueprintError as exc:
        raise fail(exc.problems) from None


def _user_error(message: str) -> typer.Exit:
    print(f"rackform: {message}", file=sys.stderr)
    return typer.Exit(EXIT_INVALID)


def _operate(effective: Effective, operation: str) -> None:
    # Imported here: the Automation API is only needed by these three commands.
    from rackform.stack.config import repo_root
    from rackform.stack.workspace import WorkspaceError, open_stack, run

    try:
        stack = open_stack(effective, repo_root())
    except WorkspaceError as exc:
        raise _user_error(str(exc)) from None
    code = run(
        stack,
        operation,
        on_output=lambda line: print(line, flush=True),
        on_error=lambda line: print(line, file=sys.stderr, flush=True),
    )
    if code:
        raise typer.Exit(code)


@app.command()
def preview(file: File, env: Env = None) -> None:
    """Show what `up` would change (pulumi preview on the stack <name>-<env>)."""
    _operate(_load(file, env), "preview")


@app.command()
def up(file: File, env: Env = None) -> None:
    """Provision, configure and validate the cluster (pulumi up on the stack <name>-<env>).
    A strict validation failure fails it."""
    _operate(_load(file, env), "up")


@app.command()
def destroy(
    file: File,
    env: Env = None,
    yes: Annotated[bool, typer.Option("--yes", "-y", help="Do not ask for confirmation.")] = False,
) -> None:
    """Delete every resource of the stack <name>-<env>. Asks first unless --yes; refuses a
    cluster with lifecycle.protect: true. Hosts that already existed are released, never wiped."""
    effective = _load(file, env)
    bp = effective.blueprint
    if bp.lifecycle.protect:
        raise _user_error(
            f"{file}: cluster {bp.name} (environment {effective.environment}) is protected "
            "(lifecycle.protect: true); set it to false in the blueprint, run `rackform up`, "
            "then destroy"
        )
    if not yes:
        from rackform.plan.compile import stack_name

        question = f"Destroy every resource of stack {stack_name(effective)}?"
        try:
            confirmed = typer.confirm(question, default=False)
        except typer.Abort:
            confirmed = False
        if not confirmed:
            print("rackform: not destroyed (confirm, or pass --yes)", file=sys.stderr)
            raise typer.Exit(1)
    _operate(effective, "destroy")
