"""`rackform report FILE... -o PAGE.html [--env ENV] [--state-dir DIR] [--prometheus URL]
[--hours N] [--jobs STACK=LOG]... [--goodput FILE]`: one static HTML page, opened offline, with
each cluster's pictures: utilization against the target and idle GPU-hours (from Prometheus),
cost per job and per team (from a copied jobcomp log or sacct output, as `rackform jobs
--from-file` reads), time to repair per node and failures over time (from the stack's audit
log), and goodput with what was lost by cause (from a goodput file). A part whose input is not
given is left out, saying so."""

from __future__ import annotations

import sys
import time
from enum import StrEnum
from pathlib import Path
from typing import Annotated

import typer

from rackform.cli.app import app
from rackform.cli.common import Env, PrometheusCa, PrometheusTimeout, prepare_files, user_error
from rackform.cli.metrics_cmd import (
    JobsOption,
    StateDirOption,
    jobs_files,
    jobs_usage,
    known_stacks,
)

EXIT_TELEMETRY = 3


class GoodputMode(StrEnum):
    elastic = "elastic"
    requeue = "requeue"


@app.command()
def report(
    files: Annotated[list[Path], typer.Argument(help="Blueprint files.", show_default=False)],
    out: Annotated[Path, typer.Option("--out", "-o", help="The HTML page to write.")],
    env: Env = None,
    state_dir: StateDirOption = None,
    prometheus: Annotated[
        str | None,
        typer.Option(
            "--prometheus", help="Prometheus base URL for utilization and idle GPU-hours."
        ),
    ] = None,
    hours: Annotated[
        int, typer.Option("--hours", help="Hours of utilization shown.", min=1, max=24 * 92)
    ] = 168,
    jobs: JobsOption = [],  # noqa: B006 (typer's way to a repeatable option)
    goodput: Annotated[
        Path | None,
        typer.Option(
            "--goodput",
            help="GPU-hours lost by cause per stack (YAML or JSON: {STACK: {lost: {CAUSE: "
            "HOURS}, paid_gpu_hours: N}}), or what `rackform goodput --json` wrote.",
        ),
    ] = None,
    goodput_mode: Annotated[
        GoodputMode,
        typer.Option(
            "--goodput-mode",
            help="The simulation's mode shown from a `rackform goodput --json` file.",
        ),
    ] = GoodputMode.elastic,
    timeout: PrometheusTimeout = 30.0,
    prometheus_ca: PrometheusCa = None,
) -> None:
    """Write a static HTML report, opened offline (every picture inside it), with each
    cluster's utilization against the target and idle GPU-hours, cost per job and per team,
    time to repair per node, failures over time, and goodput lost by cause."""
    from rackform.cli.common import need, prometheus_client

    need("matplotlib", "rackform report", "report")
    from rackform.lifecycle.directory import state_dir as directory
    from rackform.lifecycle.record import Store
    from rackform.lifecycle.repairs import from_log
    from rackform.reap.verdict import REPORT_ONLY
    from rackform.report.model import ClusterReport, GoodputError, load_goodput
    from rackform.report.page import page
    from rackform.report.utilization import fetch
    from rackform.telemetry.labels import Key
    from rackform.telemetry.prometheus import TelemetryError

    records = jobs_files(jobs)
    try:
        lost = load_goodput(goodput, goodput_mode.value) if goodput is not None else {}
    except GoodputError as exc:
        raise user_error(str(exc)) from None
    prepared = [p for _, ps in prepare_files(files, env) for p in ps]
    stacks = {p.plan.stack for p in prepared}
    known_stacks(set(records) | set(lost), stacks)
    prom = prometheus_client(prometheus, timeout, prometheus_ca) if prometheus else None
    now = time.time()
    where = directory(state_dir)
    clusters = []
    for p in prepared:
        plan = p.plan
        key = Key(plan.name, plan.environment, plan.purpose)
        r, problems = from_log(Store(where, plan.stack).log.path, plan.stack)
        for problem in problems:
            print(f"rackform: warning: {problem}", file=sys.stderr)
        c = ClusterReport(key, plan.stack, plan.gpus, r, goodput=lost.get(plan.stack))
        c.notes += [f"audit log: {problem}" for problem in problems]
        if prom is None:
            c.notes.append("utilization: not shown (give --prometheus URL)")
        else:
            below = (plan.lifecycle.idle or REPORT_ONLY).gpu_util_below_pct
            target = plan.figures.utilization.target_fraction.value * 100
            try:
                c.utilization = fetch(prom, key, below, target, hours, now)
            except TelemetryError as exc:
                print(f"rackform: {exc}", file=sys.stderr)
                raise typer.Exit(EXIT_TELEMETRY) from None
            if not c.utilization.util:
                c.notes.append(f"utilization: no GPU of {plan.name} reported in the last {hours} h")
        if plan.stack in records:
            c.usage = jobs_usage(p, records[plan.stack])
            c.notes += [f"jobs: {n}" for n in c.usage.notes]
        else:
            c.notes.append(f"cost per job: not shown (give --jobs {plan.stack}=LOG)")
        if c.goodput is None:
            c.notes.append(
                f"goodput: not shown (give --goodput FILE with {plan.stack}'s GPU-hours lost by cause)"
            )
        clusters.append(c)
    try:
        out.write_text(page(clusters, now), encoding="utf-8")
    except OSError as exc:
        raise user_error(f"{out}: {exc.strerror}") from None
    typer.echo(f"wrote {out} ({len(clusters)} clusters)")
