"""`rackform validate FILE... [--env ENV] [--json] [--cost]`"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated

import typer

from rackform.blueprint.problems import Problem
from rackform.cli.app import app
from rackform.cli.common import EXIT_INVALID, Env
from rackform.engine import NotAllPrepared, Prepared, prepare_many
from rackform.plan.cost import render
from rackform.preflight.report import LocatedFinding


def _key(lf: LocatedFinding) -> tuple:
    # The same finding in the base and in environments that inherit it is reported once.
    f = lf.finding
    return (lf.file, lf.line, lf.col, f.code, f.message, f.waived)


@app.command()
def validate(
    files: Annotated[list[Path], typer.Argument(help="Blueprint files.", show_default=False)],
    env: Env = None,
    as_json: Annotated[bool, typer.Option("--json", help="Machine-readable output.")] = False,
    cost: Annotated[bool, typer.Option("--cost", help="Print each environment's cost.")] = False,
) -> None:
    """Check blueprints: schema, cross-field rules and preflight rules (sizing, right-sizing,
    checkpoint overhead, power, utilization), in every environment (or only --env). Preflight
    warnings print and pass; a schema problem or an unwaived preflight error exits 2."""
    try:
        by_file: list[tuple[Path, list[Prepared] | None]] = list(prepare_many(files, env))
        problems: list[Problem] = []
    except NotAllPrepared as exc:
        by_file, problems = exc.by_file, exc.problems
    results: list[dict] = []
    found: dict[tuple, LocatedFinding] = {}
    tables: list[str] = []
    for f, prepared in by_file:
        if prepared is None:
            results.append({"file": str(f), "valid": False, "environments": []})
            continue
        envs, blocked = [], False
        for p in prepared:
            for lf in p.report.findings:
                found.setdefault(_key(lf), lf)
            blocked |= p.blocked
            envs.append(
                {
                    "name": p.plan.environment,
                    "digest": p.plan.digest,
                    "blocked": p.blocked,
                    "cost": p.report.cost.as_dict(),
                }
            )
            if cost:
                tables += [f"{f} [env {p.plan.environment}]", *render(p.report.cost)]
        results.append({"file": str(f), "valid": not blocked, "environments": envs})
    findings = list(found.values())
    invalid = bool(problems) or any(not r["valid"] for r in results)
    if as_json:
        doc = {
            "valid": not invalid,
            "files": results,
            "problems": [p.as_dict() for p in problems],
            "findings": [lf.as_dict() for lf in findings],
        }
        typer.echo(json.dumps(doc, indent=2))
        if invalid:
            raise typer.Exit(EXIT_INVALID)
        return
    for p in problems:
        print(p, file=sys.stderr)
    for lf in findings:
        print(lf, file=sys.stderr)
    for r in results:
        if not r["environments"]:
            continue
        names = ", ".join(f"{e['name']} {e['digest'][7:19]}" for e in r["environments"])
        verdict = "valid" if r["valid"] else "preflight errors"
        typer.echo(f"{r['file']}: {verdict} ({names})")
    for line in tables:
        typer.echo(line)
    if invalid:
        raise typer.Exit(EXIT_INVALID)
