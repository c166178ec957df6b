"""`rackform goodput FILE... [--env ENV] [--seed N] [--days D] [--json | --markdown]`: what
share of the GPU-hours a training cluster is paid for would become training, by a seeded
simulation of a run (`rackform.goodput`), requeue-only and elastic side by side, with heal's
own decisions in the loop. Offline: nothing is reached; the cluster's own measurements are
read where there are any (its saved validation statement, its state directory's audit log)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from rackform.cli.app import app
from rackform.cli.common import Env, prepared, user_error
from rackform.cli.measured import Evidence, StateDir, with_measured


@app.command("goodput")
def goodput(
    files: Annotated[list[Path], typer.Argument(help="Blueprint files.", show_default=False)],
    env: Env = None,
    seed: Annotated[int, typer.Option("--seed", help="The simulation's seed.", min=0)] = 1,
    days: Annotated[
        float, typer.Option("--days", help="The run's length in days.", min=0.01, max=366)
    ] = 7.0,
    interval: Annotated[
        str,
        typer.Option(
            "--interval",
            help="The checkpoint interval simulated: best (Daly's, from the measured or "
            "estimated costs) or declared (workload.checkpoint_interval_min).",
        ),
    ] = "best",
    min_nodes: Annotated[
        int | None,
        typer.Option(
            "--min-nodes",
            help="The fewest nodes the elastic job goes on with (default: the nodes the "
            "out-of-service budget leaves).",
            min=1,
        ),
    ] = None,
    spares: Annotated[
        int,
        typer.Option(
            "--spares",
            help="Nodes kept out of the job to stand in for a failed one (the job runs on the "
            "rest; a requeue-only job then waits only while more than the spares are out).",
            min=0,
        ),
    ] = 0,
    evidence: Evidence = None,
    state_dir: StateDir = None,
    as_json: Annotated[bool, typer.Option("--json", help="Machine-readable output.")] = False,
    markdown: Annotated[
        bool,
        typer.Option("--markdown", help="One table row per blueprint (the goodput guide's)."),
    ] = False,
) -> None:
    """Simulate a run of a training blueprint's cluster: node failures at the cluster's own
    rate (heal's audit log, with enough node-hours in service) or the catalog's published one,
    heal's decisions, and the job requeued at full size or going on elastic; goodput and the
    GPU-hours lost by cause, against first-order theory."""
    from rackform.goodput.report import document, table, text
    from rackform.goodput.scenario import NotTraining, from_plan

    if interval not in ("best", "declared"):
        raise user_error(f"--interval {interval!r}: best or declared")
    if evidence is not None and len(files) > 1:
        raise user_error("--evidence is one cluster's statement: give one blueprint with it")
    docs = []
    for file in files:
        plan = with_measured(file, env, prepared(file, env), evidence, state_dir).plan
        try:
            sc = from_plan(plan, interval=interval, min_nodes=min_nodes, spares=spares)
        except NotTraining as exc:
            raise user_error(f"{file}: {exc}") from None
        docs.append({"file": file.as_posix(), **document(sc, plan.figures, seed, days)})
    if as_json:
        typer.echo(json.dumps({"clusters": docs}, indent=2))
    elif markdown:
        for line in table(docs):
            typer.echo(line)
    else:
        for i, doc in enumerate(docs):
            typer.echo(("\n" if i else "") + "\n".join(text(doc)))
