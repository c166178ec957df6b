"""The `rackform` Typer application that every command module registers itself on."""

from __future__ import annotations

from typing import Annotated

import typer

from rackform import __version__

app = typer.Typer(
    name="rackform",
    help="Declare a GPU cluster once; validate, compile, plan, stand up and validate it.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    # Plain help (click's): paragraphs rewrapped to the terminal's width, one short line per
    # command in the list, options as a list rather than a narrow table column.
    rich_markup_mode=None,
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
