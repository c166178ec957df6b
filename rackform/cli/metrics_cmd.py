"""`rackform metrics FILE... [--env ENV] [--state-dir DIR] --textfile PATH`: each cluster's time
to repair and between failures, measured from its stack's audit log in the lifecycle's state
directory, written for node_exporter's textfile collector (PATH ends in `.prom`). Run it where
heal runs, after each heal run or from a timer. A line of a log that cannot be read is named
(file and line) and skipped, never counted."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from rackform.cli.app import app
from rackform.cli.common import Env, prepare_files, user_error
from rackform.lifecycle.directory import HELP

StateDirOption = Annotated[
    Path | None,
    typer.Option(
        "--state-dir",
        help=f"Where heal and rollouts keep their audit logs: the lifecycle's state directory ({HELP}).",
    ),
]


@app.command()
def metrics(
    files: Annotated[list[Path], typer.Argument(help="Blueprint files.", show_default=False)],
    textfile: Annotated[
        Path,
        typer.Option(
            "--textfile",
            help="The .prom file to write, in node_exporter's --collector.textfile.directory.",
        ),
    ],
    env: Env = None,
    state_dir: StateDirOption = None,
) -> None:
    """Export each cluster's failures, time to repair (detection to return, per node and per
    cluster) and time between failures, from heal's and the rolling changes' audit log, for
    Prometheus (node_exporter's textfile collector). `rackform alerts` writes the rules that
    alert on them."""
    from rackform.lifecycle.directory import state_dir as directory
    from rackform.lifecycle.record import Store
    from rackform.lifecycle.repairs import from_log
    from rackform.telemetry.labels import Key
    from rackform.telemetry.textfile import Measured, TextfileError, exposition, write

    where = directory(state_dir)
    measured = []
    for _, prepared in prepare_files(files, env):
        for p in prepared:
            plan = p.plan
            r, problems = from_log(Store(where, plan.stack).log.path, plan.stack)
            for problem in problems:
                print(f"rackform: warning: {problem}", file=sys.stderr)
            measured.append(Measured(Key(plan.name, plan.environment, plan.purpose), r))
    try:
        write(textfile, exposition(measured))
    except TextfileError as exc:
        raise user_error(str(exc)) from None
    typer.echo(f"wrote {textfile} ({len(measured)} clusters)")
