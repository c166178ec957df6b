"""`rackform reap FILE... [--env ENV] --prometheus URL [--apply] [--json]`

Prints what it measured and what it would do for every cluster; acts only with --apply. Exit
status: 0 decided (and with --apply every action done); 2 bad input, nothing done; 3 Prometheus
could not answer, nothing done; 4 an action failed on some cluster or host (see the audit log)."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Annotated

import typer

from rackform.blueprint.problems import BlueprintError, Problem
from rackform.cli.app import app
from rackform.cli.common import Env, fail, user_error
from rackform.engine import Prepared, prepare, prepare_all
from rackform.reap.audit import state_dir
from rackform.reap.notify import Notifier
from rackform.reap.prometheus import Prometheus, TelemetryError
from rackform.reap.run import Acting, apply_all, decide_all
from rackform.reap.verdict import Decision

EXIT_TELEMETRY = 3
EXIT_ACTION_FAILED = 4


def _load(files: list[Path], env: str | None) -> list[Prepared]:
    out: list[Prepared] = []
    problems: list[Problem] = []
    for f in files:
        try:
            out += [prepare(f, env)] if env else prepare_all(f)
        except BlueprintError as exc:
            problems += exc.problems
    if problems:
        raise fail(problems)
    return out


def _money(d: Decision) -> str:
    if d.idle_gpu_hours is None:
        return "idle GPU-hours unknown"
    usd = "unpriced" if d.idle_usd is None else f"${d.idle_usd:,.2f}"
    return f"{d.idle_gpu_hours:g} idle GPU-hours ({usd})"


def _render(d: Decision, applied: bool) -> list[str]:
    util = "no data" if d.util_avg is None else f"{d.util_avg:.1f}% avg"
    head = (
        f"{d.source} [{d.environment}] {d.cluster} ({d.target}, {d.purpose}): {d.verdict} - "
        f"{util} over {d.window_min}m, {d.gpus_reporting}/{d.gpus_expected} GPUs, {_money(d)}"
    )
    if d.action is None:
        does = "does nothing"
    elif applied:
        does = f"{d.action}: {d.outcome}"
    else:
        does = f"would {d.action} (dry run; --apply acts)"
    lines = [head, f"  {does}"]
    lines += [f"  - {r}" for r in d.reasons]
    for n in d.nodes:
        avg = "n/a" if n.util_avg is None else f"{n.util_avg:.1f}%"
        lines.append(f"  node {n.name}: {n.state} {avg} ({n.gpus} GPUs)")
    lines += [f"  {'ok' if r['ok'] else 'FAILED'} {r['subject']}: {r['detail']}" for r in d.results]
    return lines


@app.command()
def reap(
    files: Annotated[list[Path], typer.Argument(help="Blueprint files.", show_default=False)],
    prometheus: Annotated[
        str, typer.Option("--prometheus", help="Prometheus base URL, e.g. http://prom:9090.")
    ],
    env: Env = None,
    apply: Annotated[
        bool, typer.Option("--apply", help="Carry out each idle cluster's lifecycle.idle.action.")
    ] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Machine-readable output.")] = False,
    alertmanager: Annotated[
        str | None, typer.Option("--alertmanager", help="Alertmanager URL for notify.")
    ] = None,
    webhook: Annotated[
        str | None, typer.Option("--webhook", help="Webhook URL for notify (JSON POST).")
    ] = None,
    state: Annotated[
        Path | None,
        typer.Option(
            "--state-dir",
            help="Audit log and locks (default $RACKFORM_REAP_DIR or ~/.rackform/reap).",
        ),
    ] = None,
    timeout: Annotated[
        float, typer.Option("--timeout", help="Seconds to wait for Prometheus.", min=0.1)
    ] = 30.0,
) -> None:
    """Find idle GPU clusters from DCGM utilization in Prometheus and say what their idle
    policy would do. Missing data is unknown, never idle; protected, young, busy, locked or
    already-reaped clusters are never touched. Dry run unless --apply."""
    try:
        prom = Prometheus(prometheus, timeout)
    except TelemetryError as exc:
        raise user_error(str(exc)) from None
    prepared = _load(files, env)
    notifier = Notifier(alertmanager, webhook)
    if apply and not notifier.configured:
        needing = [p.plan for p in prepared if p.plan.lifecycle.idle
                   and p.plan.lifecycle.idle.action == "notify"]  # fmt: skip
        if needing:
            raise user_error(
                f"{needing[0].source}: cluster {needing[0].name} notifies when idle: give "
                "--alertmanager URL or --webhook URL"
            )
    try:
        decisions = decide_all(prepared, prom, time.time())
    except TelemetryError as exc:
        print(f"rackform: {exc}; nothing was decided or done", file=sys.stderr)
        raise typer.Exit(EXIT_TELEMETRY) from None
    if apply:
        apply_all(decisions, prepared, Acting(state_dir(state), notifier))
    failed = any(d.outcome in ("failed", "partial") for d in decisions)
    if as_json:
        doc = {"applied": apply, "clusters": [d.as_dict() for d in decisions]}
        typer.echo(json.dumps(doc, indent=2))
    else:
        for d in decisions:
            for line in _render(d, apply):
                typer.echo(line)
    if failed:
        raise typer.Exit(EXIT_ACTION_FAILED)
