"""`rackform validate FILE... [--env ENV] [--json]`"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from rackform.cli import app
from rackform.cli.output import EXIT_INVALID, fail
from rackform.loader import load_all, load_effective
from rackform.problems import BlueprintError


@app.command()
def validate(
    files: Annotated[list[Path], typer.Argument(help="Blueprint files.", show_default=False)],
    env: Annotated[
        str | None, typer.Option("--env", "-e", help="Validate one environment (default: all).")
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Machine-readable output.")] = False,
) -> None:
    """Check blueprints: schema, cross-field rules, every environment. Exit 2 if any is invalid."""
    results, problems = [], []
    for f in files:
        try:
            effs = [load_effective(f, env)] if env else load_all(f)
        except BlueprintError as exc:
            problems += exc.problems
            results.append({"file": str(f), "valid": False, "environments": []})
            continue
        envs = [{"name": e.environment, "digest": e.digest} for e in effs]
        results.append({"file": str(f), "valid": True, "environments": envs})
    if as_json:
        doc = {"valid": not problems, "files": results, "problems": [p.as_dict() for p in problems]}
        typer.echo(json.dumps(doc, indent=2))
        if problems:
            raise typer.Exit(EXIT_INVALID)
        return
    if problems:
        raise fail(problems)
    for r in results:
        names = ", ".join(f"{e['name']} {e['digest'][7:19]}" for e in r["environments"])
        typer.echo(f"{r['file']}: valid ({names})")
