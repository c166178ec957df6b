"""`rackform reap FILE... [--env ENV] --prometheus URL [--apply] [--json]`

Prints what it measured and what it would do for every cluster; acts only with --apply. A dry
run reads everything --apply reads (snoozes, the locks, the audit log, live tags and power), so
it says exactly what --apply would do. Exit status, for cron:
  0  every cluster measured, and with --apply every action (or warning) that was due succeeded
  2  bad input, nothing done
  3  Prometheus could not answer, nothing decided or done
  4  an action or warning failed on some cluster or host (see the JSON and the audit log)
  5  some cluster could not be decided: `unknown` (missing metrics, a read of live tags, a BMC,
     EC2 or the Slurm queue failed) or `locked` by another run; the others were handled
The JSON's `exit` says which and why."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Annotated

import typer

from rackform.cli.app import app
from rackform.cli.common import (
    Env,
    KnownHosts,
    PrivateKey,
    PrometheusCa,
    PrometheusTimeout,
    PrometheusUrl,
    prepare_files,
    prometheus_client,
    user_error,
)
from rackform.engine import Prepared
from rackform.reap.audit import state_dir
from rackform.reap.notify import Notifier
from rackform.reap.prometheus import TelemetryError
from rackform.reap.run import World, decide_all, run_all
from rackform.reap.verdict import Decision
from rackform.targets.runtimes import controller, reaper

EXIT_TELEMETRY = 3
EXIT_ACTION_FAILED = 4
EXIT_UNDECIDED = 5


def load(files: list[Path], env: str | None) -> list[Prepared]:
    return [p for _, ps in prepare_files(files, env) for p in ps]


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
    does = _does(d, applied)
    lines = [head, f"  {does}"]
    lines += [f"  - {r}" for r in d.reasons]
    for n in d.nodes:
        avg = "n/a" if n.util_avg is None else f"{n.util_avg:.1f}%"
        lines.append(f"  node {n.name}: {n.state} {avg} ({n.gpus} GPUs)")
    lines += [f"  {'ok' if r['ok'] else 'FAILED'} {r['subject']}: {r['detail']}" for r in d.results]
    return lines


def _does(d: Decision, applied: bool) -> str:
    if d.action is None or d.step is None:
        return "does nothing" if d.step != "withdraw" or not applied else "withdrew its warning"
    what = {
        "warn": f"warn that it will {d.action} after the grace period",
        "withdraw": "withdraw its warning",
        "act": d.action,
    }[d.step]
    if applied:
        return f"{what}: {d.outcome}"
    return f"would {what} (dry run; --apply acts)"


def exit_status(decisions: list[Decision]) -> tuple[int, str]:
    failed = [d.cluster for d in decisions if d.outcome in ("failed", "partial")]
    if failed:
        return EXIT_ACTION_FAILED, "an action failed: " + ", ".join(failed)
    undecided = [
        f"{d.cluster} [{d.environment}] {d.verdict}"
        for d in decisions
        if d.verdict in ("unknown", "locked") or d.read_failed
    ]
    if undecided:
        return EXIT_UNDECIDED, "not decided: " + ", ".join(undecided)
    return 0, "every cluster decided"


def _maintenance():
    """Which stacks a rolling change or heal holds (their records and lock)."""
    from functools import partial

    from rackform.rollout.record import state_dir as rollout_dir
    from rackform.rollout.status import in_maintenance

    return partial(in_maintenance, rollout_dir())


@app.command()
def reap(
    files: Annotated[list[Path], typer.Argument(help="Blueprint files.", show_default=False)],
    prometheus: PrometheusUrl,
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
    timeout: PrometheusTimeout = 30.0,
    ca: PrometheusCa = None,
    private_key: PrivateKey = None,
    known_hosts: KnownHosts = None,
) -> None:
    """Find idle GPU clusters from DCGM utilization in Prometheus and say what their idle
    policy would do. Missing data is unknown, never idle; protected, young, busy, locked or
    already-reaped clusters are never touched, nor one whose Slurm queue holds a job. Dry run
    unless --apply."""
    prom = prometheus_client(prometheus, timeout, ca)
    prepared = load(files, env)
    notifier = Notifier(alertmanager, webhook)
    if apply and not notifier.configured:
        # notify needs a destination, and so does every other action's warning.
        needing = [p.plan for p in prepared if p.plan.lifecycle.idle and (
            p.plan.lifecycle.idle.action == "notify" or p.plan.lifecycle.idle.grace_minutes
        )]  # fmt: skip
        if needing:
            idle = needing[0].lifecycle.idle
            assert idle is not None
            why = (
                "notifies when idle"
                if idle.action == "notify"
                else (f"is warned of before {idle.action} (lifecycle.idle.grace_minutes)")
            )
            raise user_error(
                f"{needing[0].source}: cluster {needing[0].name} {why}: give "
                "--alertmanager URL or --webhook URL"
            )
    try:
        decisions = decide_all(prepared, prom, time.time())
        world = World(
            state_dir(state), notifier, prom, reapers=reaper, maintenance=_maintenance(),
            controller=lambda plan: controller(plan, private_key, known_hosts),
        )  # fmt: skip
        run_all(decisions, prepared, world, apply)
    except TelemetryError as exc:
        print(f"rackform: {exc}; nothing was decided or done", file=sys.stderr)
        raise typer.Exit(EXIT_TELEMETRY) from None
    code, why = exit_status(decisions)
    if as_json:
        doc = {
            "applied": apply,
            "exit": {"status": code, "reason": why},
            "clusters": [d.as_dict() for d in decisions],
        }
        typer.echo(json.dumps(doc, indent=2))
    else:
        for d in decisions:
            for line in _render(d, apply):
                typer.echo(line)
        if code:
            print(f"rackform: exit {code}: {why}", file=sys.stderr)
    if code:
        raise typer.Exit(code)
