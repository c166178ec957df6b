"""`rackform jobs FILE [--env ENV] [--from-file LOG] [--log PATH] [--since TIME] [--json]`

GPU-hours and cost per job and per account from Slurm's job records and the catalog's price of
the cluster's compute per GPU-hour (the one `rackform reap` prices idle GPU-hours with). The
records are read over SSH as the blueprint's ssh user from the controller: where the blueprint
declares fairness (Slurm's accounting, slurmdbd), `sacct`'s, whose AllocTRES carries each job's
GPUs (AccountingStorageTRES=gres/gpu); otherwise the jobcomp log (the slurm role writes it to
/var/log/slurm/jobcomp.log; --log names another). Or a copied file: a jobcomp log or
`sacct --parsable2 --noheader --format=JobID,User,Account,Partition,State,Start,End,ElapsedRaw,
AllocTRES,NodeList` output. Exit status: 0 reported; 2 bad input (a line that is no record,
named by file and line); 3 the records could not be read from the controller."""

from __future__ import annotations

import json
import sys
from datetime import datetime
from pathlib import Path
from typing import Annotated

import typer

from rackform.cli.app import app
from rackform.cli.common import Env, File, KnownHosts, PrivateKey, prepared, user_error
from rackform.reap.run import usd_per_gpu_hour
from rackform.reap.verdict import gpus_by_node
from rackform.scheduler.records import SACCT_FORMAT, RecordError, parse
from rackform.scheduler.remote import RemoteError
from rackform.scheduler.usage import Usage, usage
from rackform.targets.runtimes import controller

JOBCOMP_LOG = "/var/log/slurm/jobcomp.log"
EXIT_UNREADABLE = 3
FETCH = 'exec cat -- "$1"\n'
# Every user's jobs (the ssh user is rarely root), one line per job (steps left out), from
# $1 (the epoch without --since). --duplicates: a job preempted and requeued keeps one record
# per run under its id, and without it sacct "returns the most recent job with that number"
# (sacct(1), -D): every run is charged, as the Slurm accounting tests show.
SACCT = (
    'exec sacct --parsable2 --noheader --allusers --allocations --duplicates --starttime="$1" '
    f"--endtime=now --format={SACCT_FORMAT}\n"
)
EPOCH = "1970-01-01T00:00:00"


def _fetch(
    plan, path: str | None, since: datetime | None, key=None, known_hosts=None
) -> tuple[str, str]:
    """The controller's job records and where they came from: sacct's where the cluster has
    accounting and no --log names a file, else the jobcomp log; exit 3 where they cannot be
    read."""
    accounting = plan.scheduler.fairness is not None
    if path is None and accounting:
        script, args, what = SACCT, ((since.isoformat() if since else EPOCH),), "sacct"
        hint = "slurmdbd on the controller answers sacct (the slurm role's accounting)"
    else:
        path = path or JOBCOMP_LOG
        script, args, what = FETCH, (path,), path
        hint = (
            "the slurm role writes them there: JobCompType=jobcomp/filetxt; --log names another "
            "file, --from-file a copy"
        )
    try:
        run = controller(plan, key, known_hosts)
        done = run(script, args, 120)
    except RemoteError as exc:
        print(f"rackform: cannot read the job records: {exc}", file=sys.stderr)
        raise typer.Exit(EXIT_UNREADABLE) from None
    if done.rc != 0:
        print(
            f"rackform: cannot read the job records {what} on {run.where}: {done.why()} ({hint})",
            file=sys.stderr,
        )
        raise typer.Exit(EXIT_UNREADABLE)
    return done.stdout, f"{run.where}:{what}"


def _table(rows: list[list[str]]) -> list[str]:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return ["  " + "  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip()
            for r in rows]  # fmt: skip


def _usd(v: float | None) -> str:
    return "-" if v is None else f"${v:,.2f}"


def render(u: Usage, head: str) -> list[str]:
    lines = [head]
    rows = [["job", "user", "account", "partition", "state", "runs", "GPUs", "hours", "GPU-hours",
             "USD"]]  # fmt: skip
    for j in u.jobs:
        r = j.job
        rows.append([
            r.id, r.user, r.account or "(none)", r.partition,
            r.state + (" (to now)" if r.running else ""),
            f"ran {j.times_run} times" if j.times_run > 1 else "1",
            f"{j.gpus}{'*' if j.gpus_from == 'nodes' else ''}",
            f"{j.hours:.3f}", f"{j.gpu_hours:.3f}", _usd(j.usd),
        ])  # fmt: skip
    lines += _table(rows) if u.jobs else ["  no jobs"]
    lines.append("per account:")
    rows = [["account", "jobs", "GPU-hours", "USD"]]
    rows += [[a.account, str(a.jobs), f"{a.gpu_hours:.3f}", _usd(a.usd)] for a in u.accounts]
    lines += _table(rows)
    lines.append(f"total: {len(u.jobs)} jobs, {u.gpu_hours:.3f} GPU-hours, {_usd(u.usd)}")
    if any(j.gpus_from == "nodes" for j in u.jobs):
        lines.append("*: every GPU of the job's nodes, as the blueprint declares them")
    lines += [f"note: {n}" for n in u.notes]
    return lines


@app.command()
def jobs(
    file: File,
    env: Env = None,
    from_file: Annotated[
        Path | None,
        typer.Option(
            "--from-file",
            help="A copied jobcomp log or sacct --parsable2 output, instead of the controller's.",
        ),
    ] = None,
    log: Annotated[
        str | None,
        typer.Option(
            "--log",
            help="The jobcomp log on the controller (JobCompLoc); default: sacct where the "
            f"cluster has accounting (fairness), else {JOBCOMP_LOG}.",
        ),
    ] = None,
    since: Annotated[
        str | None,
        typer.Option(
            "--since",
            help="Only jobs that ended at or after this time (the controller's local time, "
            "e.g. 2026-11-01 or 2026-11-01T08:00); running jobs always count.",
        ),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Machine-readable output.")] = False,
    private_key: PrivateKey = None,
    known_hosts: KnownHosts = None,
) -> None:
    """GPU-hours and cost per Slurm job and per account, from the job records and the
    catalog's price per GPU-hour. Jobs without GPUs count 0; a job still running counts to
    now."""
    try:
        start = datetime.fromisoformat(since) if since else None
    except ValueError:
        raise user_error(f"--since {since!r}: give a time such as 2026-11-01T08:00") from None
    p = prepared(file, env)
    plan = p.plan
    if from_file is not None:
        try:
            text, source = from_file.read_text(errors="replace"), str(from_file)
        except OSError as exc:
            raise user_error(f"{from_file}: {exc.strerror}") from None
    elif plan.scheduler is None:
        raise user_error(
            f"{plan.source}: cluster {plan.name} declares no scheduler: no controller to read "
            "job records from (give --from-file LOG)"
        )
    else:
        text, source = _fetch(plan, log, start, private_key, known_hosts)
    try:
        records = list(parse(text, source))
    except RecordError as exc:
        raise user_error(str(exc)) from None
    u = usage(records, gpus_by_node(plan), usd_per_gpu_hour(p), datetime.now(), start)
    if as_json:
        doc = {
            "cluster": plan.name,
            "environment": plan.environment,
            "source": source,
            "since": start.isoformat() if start else None,
            "usd_per_gpu_hour": u.usd_per_gpu_hour,
            "jobs": [j.as_dict() for j in u.jobs],
            "accounts": [a.as_dict() for a in u.accounts],
            "total": {
                "jobs": len(u.jobs),
                "gpu_hours": round(u.gpu_hours, 4),
                "usd": None if u.usd is None else round(u.usd, 2),
            },
            "notes": u.notes,
        }
        typer.echo(json.dumps(doc, indent=2))
        return
    price = "unpriced" if u.usd_per_gpu_hour is None else f"${u.usd_per_gpu_hour:,.2f} per GPU-hour"
    head = f"{plan.name} [{plan.environment}]: {len(u.jobs)} jobs from {source}, {price} (catalog)"
    for line in render(u, head):
        typer.echo(line)
