"""`rackform compile FILE --env ENV -o DIR`"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from rackform.cli.main import app
from rackform.cli.output import fail
from rackform.plan.files import write
from rackform.blueprint.loader import load_effective
from rackform.blueprint.problems import BlueprintError


@app.command("compile")
def compile_(
    file: Annotated[Path, typer.Argument(help="Blueprint file.", show_default=False)],
    env: Annotated[
        str | None,
        typer.Option("--env", "-e", help="Environment to compile (default: the base blueprint)."),
    ] = None,
    out: Annotated[Path, typer.Option("--out", "-o", help="Output directory.")] = Path("build"),
) -> None:
    """Write the effective blueprint, the Pulumi stack config, and the Ansible inventory
    skeleton and group_vars for one environment. A rerun is byte-identical."""
    try:
        effective = load_effective(file, env)
    except BlueprintError as exc:
        raise fail(exc.problems) from None
    try:
        paths = write(effective, out)
    except OSError as exc:
        typer.echo(f"{out}: cannot write ({exc.strerror})", err=True)
        raise typer.Exit(2) from None
    for p in paths:
        typer.echo(str(p))
