"""`rackform drift FILE [--env ENV] [--hosts/--no-hosts] [--resources/--no-resources] [--role R]`: what
differs between the blueprint and the live cluster (`gitops.hostdrift`: the roles in
check mode; `gitops.resdrift`: a refresh in preview mode). Nothing is changed.

Host level runs by default where the blueprint lists its hosts, and when asked where the stack
creates the nodes (over the ones running now, as the target's runtime lists them:
`rackform.targets.runtimes.cluster_inventory`); resource level by default where the stack
creates the nodes (AWS), or when asked. Exit 0: no drift; 3: drift (each item printed, with
whether `rackform configure` repairs it or it needs a person); 2: bad input, the Pulumi CLI
missing for the resource level, or for the host level a stack's nodes that cannot be listed
or of which none runs."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated

import typer

from rackform.cli.app import app
from rackform.cli.common import Env, File, for_action, need, user_error
from rackform.plan.model import Plan

EXIT_DRIFT = 3


@app.command()
def drift(
    file: File,
    env: Env = None,
    hosts: Annotated[
        bool | None,
        typer.Option("--hosts/--no-hosts", help="Roles in check mode (default: listed hosts)."),
    ] = None,
    resources: Annotated[
        bool | None,
        typer.Option(
            "--resources/--no-resources",
            help="Pulumi refresh in preview mode (default: stack-created nodes).",
        ),
    ] = None,
    role: Annotated[
        list[str] | None,
        typer.Option(
            "--role", "-r", help="Host level: only this role (repeatable); default: every role."
        ),
    ] = None,
    private_key: Annotated[
        Path | None, typer.Option("--private-key", help="SSH private key for the hosts.")
    ] = None,
    known_hosts: Annotated[
        Path | None, typer.Option("--known-hosts", help="known_hosts file for the hosts.")
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Machine-readable output.")] = False,
    verbose: Annotated[
        bool, typer.Option("--verbose", "-v", help="Show the check-mode run as it goes.")
    ] = False,
) -> None:
    """Report what differs between the blueprint and the live cluster; exit 3 when anything
    does."""
    plan = for_action(file, env, "drift was not checked").plan
    hosts = plan.nodes_listed if hosts is None else hosts
    resources = (not plan.nodes_listed) if resources is None else resources
    for flag, path in (("--private-key", private_key), ("--known-hosts", known_hosts)):
        if path is not None and not path.is_file():
            raise user_error(f"{flag} {path}: no such file")
    if role:
        from rackform.gitops.hostdrift import SKIPPED_ROLES
        from rackform.push.site import site_playbook

        checked = [r for r in site_playbook().roles if r not in SKIPPED_ROLES]
        for r in role:
            if r in SKIPPED_ROLES:
                raise user_error(
                    f"--role {r}: it runs a job, not a host's state; drift leaves it out"
                )
            if r not in checked:
                raise user_error(f"--role {r}: no such role (roles: {', '.join(checked)})")
        if not hosts:
            raise user_error(
                "--role: roles are checked at the host level, which this run leaves out"
            )
    inventory = _inventory(file, plan) if hosts else None
    host_items, res_items, rc = [], [], 0
    if resources:
        need("pulumi", "drift --resources")
        from rackform.gitops import resdrift
        from rackform.stack.workspace import WorkspaceError

        try:
            res_items = resdrift.check(plan, plan.project, lambda line: None)
        except WorkspaceError as exc:
            raise user_error(f"drift --resources: {exc}") from None
    if hosts:
        need("ansible_runner", "drift")
        from rackform.gitops import hostdrift
        from rackform.scheduler.remote import RemoteError
        from rackform.targets.runtimes import RUNTIMES

        echo = (lambda line: print(line, file=sys.stderr, flush=True)) if verbose else None
        try:
            # What only the cloud knows (AWS: Slurm's tree as EC2 placed the nodes), so the
            # hosts are compared with what `up` gave them, not with the plan's stand-in.
            observed = RUNTIMES[plan.target_type].observed_vars(plan, inventory)
        except RemoteError as exc:
            raise user_error(f"{file}: host level: {exc}") from None
        items, rc = hostdrift.check(
            plan,
            inventory=inventory,
            private_key=private_key,
            known_hosts=known_hosts,
            extravars=observed or None,
            echo=echo,
            roles=role or (),
        )
        if rc != 0 and not any(i.kind != "repairable" for i in items):
            # The run failed without naming a host: nothing may be read as "no drift".
            items.append(hostdrift.Item("*", "", f"ansible-playbook exited {rc}", "unreachable"))
        host_items = [i.as_dict() for i in items]
    doc = {
        "cluster": plan.name,
        "environment": plan.environment,
        "digest": plan.digest,
        "hosts": host_items,
        "resources": res_items,
        "drifted": bool(host_items or res_items),
    }
    if as_json:
        typer.echo(json.dumps(doc, indent=2))
    else:
        for line in _lines(doc, hosts, resources):
            typer.echo(line)
    if doc["drifted"]:
        raise typer.Exit(EXIT_DRIFT)


def _inventory(file: Path, plan: Plan) -> dict:
    """The nodes the host level checks: the blueprint's hosts, or those the stack created that
    run now; refused (exit 2) where they cannot be listed, or none runs."""
    from rackform.plan.inventory import inventory_hosts
    from rackform.scheduler.remote import RemoteError
    from rackform.targets.runtimes import cluster_inventory

    try:
        inventory = cluster_inventory(plan)
    except RemoteError as exc:
        raise user_error(
            f"{file}: host level: {exc}; use --resources (the configure resource's refresh "
            "runs the same check)"
        ) from None
    if not inventory_hosts(inventory):
        raise user_error(
            f"{file}: host level: no node of cluster {plan.name} ({plan.environment}) is "
            "running; use --resources to compare the stack with the blueprint"
        )
    return inventory


def _lines(doc: dict, hosts: bool, resources: bool) -> list[str]:
    out = [f"drift {doc['cluster']} ({doc['environment']}):"]
    for i in doc["hosts"]:
        what = f"{i['role']} : {i['task']}" if i["role"] else i["task"]
        fix = {
            "repairable": "rackform configure repairs it",
            "needs a person": "NEEDS A PERSON: configure cannot repair it",
            "unreachable": "UNREACHABLE: not checked",
        }[i["kind"]]
        out.append(f"  {i['host']}: {what} ({fix})")
        out += [f"      {d}" for d in i["detail"][:12]]
    for r in doc["resources"]:
        props = f": {', '.join(r['properties'])}" if r.get("properties") else ""
        out.append(f"  resource {r['op']} {r['urn'] or r.get('count', '')}{props}")
    checked = [w for w, on in (("hosts", hosts), ("resources", resources)) if on]
    if not doc["drifted"]:
        out.append(f"  no drift ({' and '.join(checked)} checked)")
    else:
        person = sum(i["kind"] != "repairable" for i in doc["hosts"])
        out.append(
            f"  {len(doc['hosts']) + len(doc['resources'])} difference(s); {person} need a person"
        )
    return out
