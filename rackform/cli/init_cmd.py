"""`rackform init DIR [--target T] [--purpose P]`: a new blueprint repository in DIR."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from rackform.cli.app import app
from rackform.cli.common import EXIT_INVALID, user_error
from rackform.init.repo import PURPOSES, TARGETS, InitError, render
from rackform.init.write import CannotWrite, Exists, write_new


@app.command()
def init(
    directory: Annotated[
        Path,
        typer.Argument(
            metavar="DIR",
            help="The repository's directory: created when missing; may exist (e.g. a fresh "
            "clone) when none of the files below is in it.",
            show_default=False,
        ),
    ],
    target: Annotated[
        str, typer.Option("--target", "-t", help=f"Target: {', '.join(TARGETS)}.")
    ] = "aws",
    purpose: Annotated[
        str, typer.Option("--purpose", "-p", help=f"Purpose: {', '.join(PURPOSES)}.")
    ] = "training",
) -> None:
    """Create a blueprint repository: Pulumi.yaml and a thin Pulumi program (__main__.py) that
    runs rackform, requirements.txt pinning this rackform, one blueprint for the target and
    purpose under blueprints/ with the stack config of each of its environments under stacks/,
    the blueprint JSON Schema (blueprints/schema.json) wired to editors, .gitignore and a
    README of the next commands. It never overwrites a file: when any of them exists it names
    each one and writes nothing. Exit status: 0 written; 2 nothing written (a file exists, DIR
    is not a directory or cannot be written, or an unknown --target or --purpose)."""
    root = directory.expanduser()  # relative to the working directory, as the user wrote it
    try:
        files = render(root, target, purpose)
        written = write_new(root, files)
    except InitError as exc:
        raise user_error(str(exc)) from None
    except CannotWrite as exc:
        raise user_error(f"{exc}; nothing was written") from None
    except Exists as exc:
        for path in exc.paths:
            print(f"rackform: {path} exists", file=sys.stderr)
        print(
            "rackform: nothing was written (init never overwrites a file; move those away or "
            "choose another directory)",
            file=sys.stderr,
        )
        raise typer.Exit(EXIT_INVALID) from None
    for path in written:
        typer.echo(str(path))
    blueprint = next(p for p in files if p.startswith("blueprints/") and p.endswith(".yaml"))
    cd = "" if root.resolve() == Path.cwd().resolve() else f"cd {root} && "
    typer.echo(f"next: {cd}rackform validate {blueprint} (README.md has the rest)")
