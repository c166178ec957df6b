"""`rackform metrics FILE... [--env ENV] [--state-dir DIR] [--jobs STACK=LOG]... --textfile PATH`:
each cluster's time to repair and between failures, measured from its stack's audit log in the
lifecycle's state directory, and with --jobs each team's GPU-hours and cost, written for
node_exporter's textfile collector (PATH ends in `.prom`). Run it where
heal runs, after each heal run or from a timer. A line of a log that cannot be read is named
(file and line) and skipped, never counted."""

from __future__ import annotations

import sys
from datetime import datetime
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


JobsOption = Annotated[
    list[str],
    typer.Option(
        "--jobs",
        help="STACK=PATH: the stack's job records (a copied jobcomp log or sacct --parsable2 "
        "output, as `rackform jobs --from-file` reads), for cost per job and per team. "
        "Repeatable.",
    ),
]


def jobs_files(pairs: list[str]) -> dict[str, Path]:
    """--jobs STACK=PATH, by stack."""
    out = {}
    for pair in pairs:
        stack, sep, path = pair.partition("=")
        if not sep or not stack or not path:
            raise user_error(f"--jobs {pair!r}: give STACK=PATH (a stack is <name>-<environment>)")
        out[stack] = Path(path)
    return out


def known_stacks(named: set[str], stacks: set[str]) -> None:
    """Exit 2 naming a stack an option names that none of the blueprints is."""
    for stack in sorted(named - stacks):
        raise user_error(
            f"{stack}: no such stack among the blueprints given ({', '.join(sorted(stacks))})"
        )


def jobs_usage(p, path: Path):
    """The jobs' GPU-hours and cost from the records at `path`, priced as `rackform jobs` does;
    exit 2 naming the file (and line) where they cannot be read."""
    from rackform.reap.run import usd_per_gpu_hour
    from rackform.reap.verdict import gpus_by_node
    from rackform.scheduler.records import RecordError, parse
    from rackform.scheduler.usage import usage

    try:
        text = path.read_text(errors="replace")
        records = list(parse(text, str(path)))
    except OSError as exc:
        raise user_error(f"{path}: {exc.strerror}") from None
    except RecordError as exc:
        raise user_error(str(exc)) from None
    return usage(records, gpus_by_node(p.plan), usd_per_gpu_hour(p), datetime.now())


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
    jobs: JobsOption = [],  # noqa: B006 (typer's way to a repeatable option)
) -> None:
    """Export each cluster's failures, time to repair (detection to return, per node and per
    cluster) and time between failures, from heal's and the rolling changes' audit log, for
    Prometheus (node_exporter's textfile collector). `rackform alerts` writes the rules that
    alert on them. With --jobs, each team's (Slurm account's) GPU-hours and cost too."""
    from rackform.lifecycle.directory import state_dir as directory
    from rackform.lifecycle.record import Store
    from rackform.lifecycle.repairs import from_log
    from rackform.telemetry.labels import Key
    from rackform.telemetry.textfile import Measured, TextfileError, exposition, write

    where = directory(state_dir)
    records = jobs_files(jobs)
    prepared = [p for _, ps in prepare_files(files, env) for p in ps]
    known_stacks(set(records), {p.plan.stack for p in prepared})
    measured = []
    for p in prepared:
        plan = p.plan
        r, problems = from_log(Store(where, plan.stack).log.path, plan.stack)
        for problem in problems:
            print(f"rackform: warning: {problem}", file=sys.stderr)
        u = jobs_usage(p, records[plan.stack]) if plan.stack in records else None
        measured.append(Measured(Key(plan.name, plan.environment, plan.purpose), r, u))
    try:
        write(textfile, exposition(measured))
    except TextfileError as exc:
        raise user_error(str(exc)) from None
    typer.echo(f"wrote {textfile} ({len(measured)} clusters)")
