"""`rackform plan FILE [--env ENV] [--json]`: the Pulumi program run offline under Pulumi's mock
runtime; prints the resource tree and the count per type. No credentials, no network, no CLI.

`plan_resources(effective)` is the data (other parts of `plan`, such as findings or cost, build
on it); `render_text` and `plan_document` only present it.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Annotated, Any

import typer

from rackform.cli.main import app
from rackform.cli.output import EXIT_INVALID, fail
from rackform.cli.plan_render import render_text
from rackform.plan.cost import render as render_cost
from rackform.blueprint.loader import DEFAULT_ENV, Effective, load_effective
from rackform.preflight.report import run as preflight
from rackform.blueprint.problems import BlueprintError, Problem, dotted
from rackform.stack.config import environment_arg


def plan_resources(effective: Effective) -> list[dict[str, Any]]:
    """Every resource `pulumi up` would register, in tree order:
    `{"type", "name", "parent", "custom", "protect", "depends_on", "inputs"}` (parent: the
    parent's name, None at the top; inputs as the engine sees them, unknowns as
    "(known after up)")."""
    from rackform.stack.offline import record  # imports Pulumi only for plan

    return [
        {
            "type": r.type,
            "name": r.name,
            "parent": r.parent,
            "custom": r.custom,
            "protect": r.protect,
            "depends_on": r.dependencies,
            "inputs": r.inputs,
        }
        for r in record(effective)
    ]


def located(file: Path, effective: Effective, exc) -> Problem:
    """A ProgramError as a problem at its field's line in the blueprint."""
    from rackform.blueprint.loader import read

    loc = read(file).locate(exc.path) if exc.path else None
    return Problem(
        str(file),
        loc.line if loc else None,
        loc.col if loc else None,
        dotted(exc.path) if exc.path else "",
        exc.message,
        exc.fix,
        env="" if effective.environment == DEFAULT_ENV else effective.environment,
    )


def counts(resources: list[dict[str, Any]]) -> dict[str, int]:
    return dict(sorted(Counter(r["type"] for r in resources).items()))


def plan_document(effective: Effective, resources: list[dict[str, Any]]) -> dict[str, Any]:
    from rackform.plan.compile import stack_name

    return {
        "blueprint": effective.source,
        "environment": effective.environment,
        "stack": stack_name(effective),
        "digest": effective.digest,
        "protected": effective.blueprint.lifecycle.protect,
        "resources": resources,
        "counts": counts(resources),
    }


@app.command()
def plan(
    file: Annotated[Path, typer.Argument(help="Blueprint file.", show_default=False)],
    env: Annotated[
        str | None,
        typer.Option("--env", "-e", help="Environment to plan (default: the base blueprint)."),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Machine-readable output.")] = False,
) -> None:
    """Show every resource `rackform up` would create, offline and deterministically (the same
    Pulumi program under Pulumi's mock runtime), with the preflight findings and the cost.
    Exits 2 when the blueprint is invalid or a preflight error is not waived."""
    try:
        effective = load_effective(file, environment_arg(env))
    except BlueprintError as exc:
        raise fail(exc.problems) from None
    from rackform.stack.errors import ProgramError

    try:
        resources = plan_resources(effective)
    except ProgramError as exc:
        # Blueprint content the program cannot lay out (e.g. a VPC too small to split).
        raise fail([located(file, effective, exc)]) from None
    doc = plan_document(effective, resources)
    report = preflight(effective)
    if as_json:
        doc.update(report.as_dict())
        typer.echo(json.dumps(doc, indent=2))
    else:
        typer.echo(render_text(doc), nl=False)
        typer.echo("\n" + "\n".join(render_cost(report.cost)))
        for lf in report.findings:
            typer.echo(str(lf), err=True)
    if report.blocked:
        raise typer.Exit(EXIT_INVALID)
