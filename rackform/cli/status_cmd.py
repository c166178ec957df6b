"""`rackform status FILE [--env ENV] [--state-dir DIR] [--json]`: each node's lifecycle state (in
service, draining, in maintenance, validating, quarantined, drained, down) from the cluster's
Slurm and the stack's records, and the progress of a rolling change and of heal's
remediations.

Exit status: 0 read; 2 bad input (or a cluster without a scheduler: its nodes' states are
Slurm's); 3 Slurm could not be read (the records are still shown)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from rackform.cli.app import app
from rackform.cli.common import Env, File, KnownHosts, PrivateKey, prepared, user_error
from rackform.lifecycle.directory import HELP

EXIT_UNREAD = 3


@app.command("status")
def status(
    file: File,
    env: Env = None,
    state_dir: Annotated[
        Path | None,
        typer.Option(
            "--state-dir",
            help=f"Where rollouts and heal keep their records: the lifecycle's state directory ({HELP}).",
        ),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Machine-readable output.")] = False,
    private_key: PrivateKey = None,
    known_hosts: KnownHosts = None,
) -> None:
    """Each node's lifecycle state from Slurm (over SSH to its controller) and the records of
    rolling changes and heal, with any rollout's progress."""
    from rackform.lifecycle.directory import state_dir as directory
    from rackform.lifecycle.drain import node_reasons
    from rackform.lifecycle.record import RecordError, Store
    from rackform.lifecycle.status import node_status, progress
    from rackform.plan.inventory import inventory_hosts
    from rackform.scheduler.remote import RemoteError
    from rackform.targets.runtimes import cluster_inventory, controller

    plan = prepared(file, env).plan
    if plan.scheduler is None:
        raise user_error(
            f"{file}: status reads the nodes' states from Slurm; the blueprint declares no scheduler"
        )
    where = directory(state_dir)
    try:
        rollout = Store(where, plan.stack).read()
        heal = Store(where, plan.stack, kind="heal").read()
    except RecordError as exc:
        raise user_error(str(exc)) from None
    error = ""
    hosts: list[str] = []
    try:
        hosts = inventory_hosts(cluster_inventory(plan))
        slurm = node_reasons(controller(plan, private_key, known_hosts))
    except RemoteError as exc:
        slurm, error = {}, str(exc)
    nodes = node_status(hosts, slurm, rollout, heal)
    doc = {
        "cluster": plan.name,
        "environment": plan.environment,
        "stack": plan.stack,
        "nodes": [n.as_json() for n in nodes],
        "rollout": progress(rollout),
        "heal": progress(heal),
    }
    if error:
        doc["error"] = error
    if as_json:
        typer.echo(json.dumps(doc, indent=2))
    else:
        typer.echo(
            f"{plan.stack}: {sum(n.state == 'in service' for n in nodes)} of {len(nodes)} nodes in service"
        )
        for n in nodes:
            extra = "; ".join(x for x in (n.batch, n.reason) if x)
            typer.echo(
                f"  {n.node}: {n.state} ({n.slurm or 'not in Slurm'})"
                + (f": {extra}" if extra else "")
            )
        for what in ("rollout", "heal"):
            p = doc[what]
            if p:
                at = f", at batch {p['at']}" if p["at"] else ""
                typer.echo(
                    f"{what}: {p['status']}, {p['done']} of {p['batches']} batches done{at}"
                    + (f": {p['why']}" if p.get("why") else "")
                )
        if error:
            typer.echo(f"rackform status: Slurm not read: {error}", err=True)
    if error:
        raise typer.Exit(EXIT_UNREAD)
