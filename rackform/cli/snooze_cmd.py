"""`rackform snooze FILE... [--env ENV] (--for DURATION --reason TEXT | --clear)`

Keeps `rackform reap` from acting on a cluster for a while, without a commit: in the reaper's
state directory (every target), and on AWS also as the instances' tags rackform:snooze-until and
rackform:snooze-reason (read by every reaper, whatever its state directory). Every later reap
report shows the snooze. Exit status: 0 snoozed everywhere asked; 2 bad input; 4 the target's
tags could not be written (the state directory's snooze stands)."""

from __future__ import annotations

import getpass
import re
import sys
import time
from pathlib import Path
from typing import Annotated

import typer

from rackform.cli.app import app
from rackform.cli.common import Env, user_error
from rackform.cli.reap_cmd import EXIT_ACTION_FAILED, load
from rackform.lifecycle.directory import HELP, state_dir
from rackform.reap import snooze as store
from rackform.targets.runtimes import reaper

_UNITS = {"m": 60, "h": 3600, "d": 86400}


def duration_s(text: str) -> int:
    """`90m`, `8h`, `2d` (at most 30 days) in seconds."""
    m = re.fullmatch(r"(\d+)([mhd])", text.strip())
    if not m or int(m.group(1)) == 0:
        raise ValueError(f"--for {text!r}: give a duration such as 90m, 8h or 2d")
    seconds = int(m.group(1)) * _UNITS[m.group(2)]
    if seconds > 30 * 86400:
        raise ValueError(f"--for {text!r}: at most 30d; a longer hold is lifecycle.protect")
    return seconds


@app.command()
def snooze(
    files: Annotated[list[Path], typer.Argument(help="Blueprint files.", show_default=False)],
    env: Env = None,
    for_: Annotated[
        str | None, typer.Option("--for", help="How long: e.g. 90m, 8h, 2d (at most 30d).")
    ] = None,
    reason: Annotated[str | None, typer.Option("--reason", help="Why (shown in reports).")] = None,
    clear: Annotated[bool, typer.Option("--clear", help="End the snooze now.")] = False,
    state: Annotated[
        Path | None,
        typer.Option(
            "--state-dir",
            help=f"The lifecycle's state directory, where reap reads snoozes ({HELP}).",
        ),
    ] = None,
) -> None:
    """Snooze `rackform reap` for these clusters: measured and reported, never acted on."""
    if clear == bool(for_):
        raise user_error("give either --for DURATION (with --reason) or --clear")
    if for_ and not (reason and reason.strip()):
        raise user_error("--reason is required with --for: say why, for the next person")
    now = time.time()
    try:
        until = now + duration_s(for_) if for_ else now
    except ValueError as exc:
        raise user_error(str(exc)) from None
    prepared = load(files, env)
    directory = state_dir(state)
    failed = False
    for p in prepared:
        plan = p.plan
        entry = None
        if not clear:
            entry = {"until": until, "reason": reason, "by": getpass.getuser(), "at": now}
        try:
            store.set_snooze(directory, plan.stack, entry)
        except (OSError, store.SnoozeError) as exc:
            raise user_error(f"cannot write the snooze in {directory}: {exc}") from None
        # Clearing writes a snooze that ends now, so tags set earlier end with it.
        outcomes = reaper(plan.target_type).snooze(plan, until, reason or "cleared")
        what = "cleared" if clear else f"snoozed until {store.iso(until)}"
        typer.echo(f"{plan.source} [{plan.environment}] {plan.name}: {what}")
        for o in outcomes:
            typer.echo(f"  {'ok' if o.ok else 'FAILED'} {o.subject}: {o.detail}")
            failed |= not o.ok
    if failed:
        print("rackform: the cluster's tags were not all written", file=sys.stderr)
        raise typer.Exit(EXIT_ACTION_FAILED)
