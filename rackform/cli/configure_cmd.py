"""`rackform configure FILE --env ENV [--limit HOSTS] [--check] [--rolling]`: converge the nodes,
every node at once (the GPU roles in batches where the cluster is wider than the run's forks,
nodes that came back unreachable tried again), or (--rolling) batch by batch through Slurm
(`cli.rolling`)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from rackform.cli.app import app
from rackform.cli.common import Env, File, extra_vars_of, for_action, need
from rackform.lifecycle.directory import HELP
from rackform.plan.model import thaw
from rackform.push.retries import RETRY_WAIT_S, UNREACHABLE_RETRIES
from rackform.push.site import site_playbook


@app.command("configure")
def configure(
    file: File,
    env: Env = None,
    limit: Annotated[
        str | None, typer.Option("--limit", "-l", help="Only these hosts (Ansible host pattern).")
    ] = None,
    role: Annotated[
        list[str] | None,
        typer.Option("--role", "-r", help="Only this role (repeatable); default: every role."),
    ] = None,
    check: Annotated[
        bool, typer.Option("--check", help="Report what would change; change nothing.")
    ] = False,
    diff: Annotated[bool, typer.Option("--diff", help="Show file differences.")] = False,
    private_key: Annotated[
        Path | None, typer.Option("--private-key", help="SSH private key for the nodes.")
    ] = None,
    known_hosts: Annotated[
        Path | None, typer.Option("--known-hosts", help="known_hosts file for the nodes.")
    ] = None,
    extra_vars: Annotated[
        list[str] | None,
        typer.Option("--extra-vars", "-x", help="Role variable KEY=VALUE or @FILE (repeatable)."),
    ] = None,
    report_dir: Annotated[
        Path, typer.Option("--report-dir", help="Where smoke_train puts the fetched reports.")
    ] = Path("reports"),
    artifacts: Annotated[
        Path | None,
        typer.Option(
            "--artifacts",
            help="Keep ansible-runner's event log here (default: kept only on failure).",
        ),
    ] = None,
    rolling: Annotated[
        bool,
        typer.Option(
            "--rolling",
            help="Roll a change that needs a drain through the cluster batch by batch (drain, requeue, apply, re-validate, return), within lifecycle.max_out_of_service; a stopped rollout resumes when run again.",
        ),
    ] = False,
    rollback: Annotated[
        bool,
        typer.Option(
            "--rollback",
            help="With --rolling: apply the old software to a stopped rollout's failed batches, validate and return them.",
        ),
    ] = False,
    abandon: Annotated[
        bool,
        typer.Option(
            "--abandon",
            help="With --rolling: end a stopped rollout; its failed nodes stay drained.",
        ),
    ] = False,
    state_dir: Annotated[
        Path | None,
        typer.Option(
            "--state-dir",
            help=f"Where rollouts and the last applied configuration are recorded: the lifecycle's state directory, shared with heal and reap ({HELP}).",
        ),
    ] = None,
    batch: Annotated[
        int | None,
        typer.Option(
            "--batch",
            min=1,
            help="Nodes the GPU roles take at a time (default: the run's fork width where the cluster is wider, else every node in one batch).",
        ),
    ] = None,
    max_fail_percent: Annotated[
        int,
        typer.Option(
            "--max-fail-percent",
            min=0,
            max=100,
            help="Stop before a batch where more than this share of the batch before it failed or was unreachable.",
        ),
    ] = site_playbook().max_fail_percent,
    retries: Annotated[
        int,
        typer.Option(
            "--retries",
            min=0,
            max=10,
            help="Try the nodes that came back UNREACHABLE again this many times, each time limited to them.",
        ),
    ] = UNREACHABLE_RETRIES,
    retry_wait: Annotated[
        float,
        typer.Option("--retry-wait", min=0, help="Seconds to wait before each retry."),
    ] = RETRY_WAIT_S,
) -> None:
    """Run the roles (nvidia_driver, nccl_rdma, nvme_raid, dcgm, smoke_train) on the
    blueprint's nodes with a live progress display and a per-host summary. A cluster wider than
    the run's forks goes through the GPU roles in batches; nodes that came back unreachable are
    tried again. One node's failure stops no other: at the end every node left unconfigured is
    named with why, and the run exits non-zero; a rerun continues from where the hosts are.
    A blueprint with an unwaived preflight error is refused."""
    from rackform.push.report import report_lines, summary_lines
    from rackform.push.retries import run

    plan = for_action(file, env, "nothing was configured").plan
    need("ansible_runner", "configure")
    roles = site_playbook().roles
    problems = [
        f"--role {r}: no such role (roles: {', '.join(roles)})"
        for r in role or []
        if r not in roles
    ]
    for flag, path in (("--private-key", private_key), ("--known-hosts", known_hosts)):
        if path is not None and not path.is_file():
            problems.append(f"{flag} {path}: no such file")
    if not plan.nodes_listed:
        problems.append(
            f"{file}: {plan.target_type} nodes come from the stack's outputs; configure them through "
            "`pulumi up` (the configure resource), which runs the same roles"
        )
    if (rollback or abandon) and not rolling:
        problems.append("--rollback and --abandon go with --rolling")
    if rolling and (limit or role or check or batch):
        problems.append(
            "--rolling takes its batches from the rollout: no --limit, --role, --check or --batch"
        )
    if rollback and abandon:
        problems.append("--rollback or --abandon, not both")
    if problems:
        for p in problems:
            print(p, file=sys.stderr)
        raise typer.Exit(2)
    extras = extra_vars_of(extra_vars or [])
    if rolling:
        from rackform.cli.rolling import Options, RollingError
        from rackform.cli.rolling import rolling as roll

        opts = Options(state_dir, private_key, known_hosts, report_dir, rollback, abandon, extras)
        try:
            raise typer.Exit(roll(plan, opts, lambda line: print(line, flush=True)))
        except RollingError as exc:
            print(f"rackform configure: {exc}", file=sys.stderr)
            raise typer.Exit(2) from None

    def out(line: str) -> None:
        print(line, flush=True)

    what = ", ".join(role) if role else "every role"
    out(
        f"configure {plan.name} ({plan.environment}): {plan.nodes} node(s)"
        + (f", limited to {limit}" if limit else "")
        + f", {what}"
        + (" [check mode]" if check else "")
    )
    result = run(
        thaw(plan.inventory),
        thaw(plan.group_vars),
        private_key=private_key,
        known_hosts=known_hosts,
        extravars=extras,
        limit=limit,
        roles=role or [],
        check=check,
        diff=diff,
        report_dir=report_dir,
        out=out,
        keep_artifacts=artifacts,
        batch=batch,
        max_fail_percent=max_fail_percent,
        retries=retries,
        retry_wait_s=retry_wait,
    )
    out("")
    for line in summary_lines(result):
        out(line)
    out(f"took {result.seconds:.0f} s")
    if result.rc != 0:
        for line in report_lines(result):
            print(f"rackform configure: {line}", file=sys.stderr)
        if result.artifacts:
            print(f"rackform configure: event log kept in {result.artifacts}", file=sys.stderr)
        raise typer.Exit(result.rc or 1)
    if not (limit or role or check):
        _record_applied(plan, state_dir, extras)


def _record_applied(plan, state: Path | None, extras: dict) -> None:
    """What every node now runs (the blueprint's variables, `--extra-vars` over them): what a
    later `--rolling` compares the blueprint with."""
    from rackform.lifecycle.directory import state_dir
    from rackform.lifecycle.record import Store
    from rackform.rollout.plan import basis

    b = basis(plan, extras)
    try:
        variables = dict(b.variables)
        Store(state_dir(state), plan.stack).set_applied(variables, thaw(b.nodes), plan.digest)
    except OSError as exc:
        print(f"rackform configure: configured, but not recorded: {exc}", file=sys.stderr)
