"""`rackform promote FILE --from SRC --to DST [--evidence ENVELOPE] [--max-age 24h] [--commit]`:
verify SRC's signed Validate-stage evidence (from its stack's outputs) and record the promotion
(`stack.promotion` states the rule, `gitops.promote` makes it).

Every check comes before anything is written: a refused promotion leaves the repository as it
was (exit 2, one line). Promoting what is already recorded (same target digest, same evidence)
is a no-op. With --commit the record is committed (only that file)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from rackform.blueprint.problems import BlueprintError
from rackform.cli.app import app
from rackform.cli.common import File, fail, need, refuse, user_error
from rackform.engine import Blocked


@app.command()
def promote(
    file: File,
    source: Annotated[str, typer.Option("--from", help="The validated environment.")],
    target: Annotated[str, typer.Option("--to", help="The environment to promote into.")],
    evidence: Annotated[
        Path | None,
        typer.Option(
            "--evidence",
            help="The source stack's `evidence` output saved to a file (default: read it from "
            "the stack through Pulumi).",
        ),
    ] = None,
    age: Annotated[
        str, typer.Option("--max-age", help="Refuse evidence older than this (s, m, h, d).")
    ] = "24h",
    commit: Annotated[
        bool, typer.Option("--commit", help="Commit the promotion record (git).")
    ] = False,
) -> None:
    """Promote a blueprint from one environment to the next on the source stack's own signed
    validation (its Validate stage, every node, the source's digest at this commit); write the
    record that `up` on the target verifies."""
    need("pulumi", "promote")  # the source stack's outputs, through the Automation API
    need("cryptography", "promote")
    from rackform.evidence.statement import EvidenceError, max_age
    from rackform.gitops import promote as promotion

    try:
        limit = max_age(age)
    except EvidenceError as exc:
        raise user_error(str(exc)) from None
    try:
        done = promotion.promote(file, source, target, evidence=evidence, age=limit, commit=commit)
    except BlueprintError as exc:
        raise fail(exc.problems) from None
    except Blocked as exc:
        raise refuse(exc, "nothing was promoted") from None
    except promotion.Refused as exc:
        raise user_error(str(exc)) from None
    if done.serving:
        typer.echo(serving_line(done.serving))
    if not done.changed:
        typer.echo(
            f"{done.cluster}: {source} -> {target} already promoted ({done.path}); nothing to do"
        )
        return
    typer.echo(
        f"{done.cluster}: promoted {source} -> {target} ({done.target_digest}); record {done.path}"
    )
    if done.commit:
        typer.echo(f"committed {done.commit[:12]}")


def serving_line(served: dict) -> str:
    """What an inference cluster's serving smoke job measured, on one line."""
    from rackform.evidence.serving import COST, DECODE_CHECK

    line = f"serving: {served[DECODE_CHECK]:,.0f} output tokens/s per node measured"
    cost = served.get(COST)
    if cost is not None:
        line += f", ${cost:,.2f} per million output tokens ({served['cost_from']})"
    return line + f" (median of {served['nodes']} node(s))"
