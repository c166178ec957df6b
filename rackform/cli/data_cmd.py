"""`rackform data move FILE [--env ENV] [--apply]`: an existing stack's data tier moved to the
stack of its own it has now (`<name>-<env>-data`), state only, nothing replaced
(`data_stack.move`). A dry run unless --apply."""

from __future__ import annotations

from typing import Annotated

import typer

from rackform.cli.app import app
from rackform.cli.common import Env, File, need, prepared, user_error
from rackform.plan.targets.compilers import compiler

data_app = typer.Typer(help="The data tier's own stack (a kept file system).", no_args_is_help=True)
app.add_typer(data_app, name="data")


@data_app.command("move")
def move(
    file: File,
    env: Env = None,
    apply: Annotated[
        bool,
        typer.Option("--apply", help="Move them (default: a dry run that only lists them)."),
    ] = False,
) -> None:
    """Move a kept file system and the network it sits in from the cluster's stack to the data
    tier's own stack, state only; a dry run unless --apply.

    rackform created them in the cluster's stack <name>-<env> before the data tier had a stack
    of its own; `pulumi state move` moves them to <name>-<env>-data: the state changes, the
    cloud does not, and the data stack's program takes each by its alias, so nothing is
    replaced. `rackform up`, `preview` and `destroy` refuse a cluster's stack that still holds
    them."""
    plan = prepared(file, env).plan
    need("pulumi", "data move")
    from rackform.stack.data_stack import DataStackError
    from rackform.stack.data_stack import move as move_state
    from rackform.stack.workspace import WorkspaceError

    try:
        pieces = compiler(plan.target_type).data_pieces(plan)
        code = move_state(plan, pieces, plan.project, apply, lambda line: print(line, flush=True))
    except (DataStackError, WorkspaceError) as exc:
        raise user_error(str(exc)) from None
    if code:
        raise typer.Exit(code)
