"""The `rackform` command line. Each command lives in its own module and is registered here."""

from __future__ import annotations

import os
import sys
from typing import Annotated

import typer

from rackform import __version__

app = typer.Typer(
    name="rackform",
    help="Declare a GPU cluster once; validate, compile, plan, stand up and validate it.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"rackform {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: Annotated[
        bool,
        typer.Option("--version", callback=_version, is_eager=True, help="Print the version."),
    ] = False,
) -> None:
    """rackform compiles typed GPU-cluster blueprints into Pulumi, Ansible and validation runs."""


def _register() -> None:
    # Imported for their side effect of adding commands to `app`.
    from rackform.cli import (  # noqa: F401
        compile_cmd,
        configure_cmd,
        plan_cmd,
        schema_cmd,
        smoke_cmd,
        stack_cmd,
        testbed_cmd,
        validate_cmd,
    )


def main() -> None:
    """Entry point: user mistakes exit 2 with one line each; anything else is an internal
    failure (exit 1) whose traceback is shown only with RACKFORM_DEBUG=1."""
    _register()
    try:
        app()
    except SystemExit:
        raise
    except Exception as exc:  # the boundary: no traceback for the user unless asked
        if os.environ.get("RACKFORM_DEBUG"):
            raise
        print(f"rackform: internal error: {type(exc).__name__}: {exc}", file=sys.stderr)
        print("rackform: rerun with RACKFORM_DEBUG=1 for the traceback", file=sys.stderr)
        sys.exit(1)
