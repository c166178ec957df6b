"""`rackform validate FILE... [--env ENV] [--json] [--cost]`"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated

import typer

from rackform.cli.main import app
from rackform.cli.output import EXIT_INVALID
from rackform.plan.cost import render
from rackform.blueprint.loader import load_all, load_effective, read
from rackform.preflight.report import LocatedFinding, Locator, run
from rackform.blueprint.problems import BlueprintError, Problem


def _key(lf: LocatedFinding) -> tuple:
    # The same finding in the base and in environments that inherit it is reported once.
    f = lf.finding
    return (lf.file, lf.line, lf.col, f.code, f.message, f.waived)


@app.command()
def validate(
    files: Annotated[list[Path], typer.Argument(help="Blueprint files.", show_default=False)],
    env: Annotated[
        str | None, typer.Option("--env", "-e", help="Validate one environment (default: all).")
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Machine-readable output.")] = False,
    cost: Annotated[bool, typer.Option("--cost", help="Print each environment's cost.")] = False,
) -> None:
    """Check blueprints: schema, cross-field rules and preflight rules (sizing, right-sizing,
    checkpoint overhead, power, utilization), in every environment. Preflight warnings print
    and pass; a schema problem or an unwaived preflight error exits 2."""
    results: list[dict] = []
    problems: list[Problem] = []
    found: dict[tuple, LocatedFinding] = {}
    tables: list[str] = []
    for f in files:
        try:
            effs = [load_effective(f, env)] if env else load_all(f)
            locator = Locator(read(f))
        except BlueprintError as exc:
            problems += exc.problems
            results.append({"file": str(f), "valid": False, "environments": []})
            continue
        envs, blocked = [], False
        for e in effs:
            report = run(e, locator)
            for lf in report.findings:
                found.setdefault(_key(lf), lf)
            blocked |= report.blocked
            envs.append(
                {
                    "name": e.environment,
                    "digest": e.digest,
                    "blocked": report.blocked,
                    "cost": report.cost.as_dict(),
                }
            )
            if cost:
                tables += [f"{f} [env {e.environment}]", *render(report.cost)]
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
