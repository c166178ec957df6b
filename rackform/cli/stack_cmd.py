"""`rackform preview|up|destroy FILE [--env ENV]`: the real Pulumi CLI, through the Automation
API, on the stack `<name>-<env>`. Pulumi's exit status is rackform's.

`preview` and `up` refuse a blueprint with an unwaived preflight error (the program itself
refuses it too, so a bare `pulumi up` stops the same way). `destroy` does not: tearing a
cluster down can only remove what the findings warn about.

A blueprint that keeps its file system in a stack of its own (`Plan.data_stack`, `<stack>-data`)
has that stack previewed and brought up first; `destroy` leaves it (`--data` destroys it too),
and all three refuse a cluster's stack that still holds it (`rackform data move`).

After the stack's update, `up` waits for the nodes configured at boot (`waiting.wait_for_boot`),
names each that did not pass, records the wait in the stack's validation (a targeted update of
the Validate stage, only when its outcome changed) and exits 3 unless every one passed."""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Annotated

import typer

from rackform.boot.controller import BootError, tls_of
from rackform.boot.reports import PASSED, Judged, recorded_value
from rackform.boot.waiting import BootWait, boot_groups, check_before_up, wait_for_boot
from rackform.cli.app import app
from rackform.cli.common import (
    EXIT_NOT_VALIDATED,
    Env,
    File,
    for_action,
    need,
    prepared,
    user_error,
)
from rackform.engine import prepare
from rackform.plan.compile import BOOT_VERDICT, REVALIDATE
from rackform.plan.model import Plan
from rackform.plan.targets.compilers import compiler
from rackform.targets.runtimes import runtime


def operate(
    plan: Plan,
    operation: str,
    config: dict[str, str] | None = None,
    refresh: bool = False,
    targets: list[str] | None = None,
) -> None:
    code = run_stack(plan, operation, config, refresh, targets)
    if code:
        raise typer.Exit(code)


def run_stack(
    plan: Plan,
    operation: str,
    config: dict[str, str] | None = None,
    refresh: bool = False,
    targets: list[str] | None = None,
) -> int:
    """Pulumi's `operation` on the plan's stack, its output streamed; Pulumi's exit status."""
    need("pulumi", operation)
    # Imported here: the Automation API is only needed by these commands.
    from rackform.stack.workspace import WorkspaceError, open_stack, run

    try:
        stack = open_stack(plan, plan.project, extra=config)
    except WorkspaceError as exc:
        raise user_error(str(exc)) from None
    return run(
        stack,
        operation,
        on_output=lambda line: print(line, flush=True),
        on_error=lambda line: print(line, file=sys.stderr, flush=True),
        refresh=refresh,
        targets=targets,
    )


def _say(line: str) -> None:
    print(line, flush=True)


def _err(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def data_first(plan: Plan, operation: str, refresh: bool = False) -> None:
    """`preview` or `up` of the data tier's own stack (`plan.data_stack`), before the cluster's,
    which reads it: refused while the cluster's stack still holds the tier's pieces (`rackform
    data move`), with what its state lacks and the cloud still has imported (found by their
    tags); `refresh` as `up --refresh`. Exits with Pulumi's status where it fails."""
    need("pulumi", operation)
    from rackform.stack.data_stack import DataStackError, adoption, check_moved, run_data
    from rackform.stack.workspace import WorkspaceError

    pieces = compiler(plan.target_type).data_pieces(plan) if plan.data_stack else ()
    try:
        check_moved(plan, pieces, plan.project, f"`rackform {operation}`")
        config = adoption(plan, pieces, runtime(plan.target_type).find_kept, plan.project, _say)
        _say(
            f"rackform: {operation} of stack {plan.data_stack} (the data tier, which destroy keeps)"
        )
        code = run_data(plan, plan.project, operation, config, _say, _err, refresh)
    except (DataStackError, WorkspaceError) as exc:
        raise user_error(str(exc)) from None
    if code:
        raise typer.Exit(code)
    _say(f"rackform: {operation} of stack {plan.stack} (the cluster)")


def record_boot(plan: Plan, judged: Judged) -> int:
    """Record the wait in the stack's validation (its Validate stage judges its last report
    again with it: a targeted update), unless the stack holds this very outcome already;
    Pulumi's exit status (0: recorded, or nothing to record)."""
    from pulumi import automation as auto

    from rackform.stack.cluster import validate_target
    from rackform.stack.workspace import WorkspaceError, open_stack

    value = recorded_value(judged)
    try:
        held = open_stack(plan, plan.project).get_all_config().get(BOOT_VERDICT)
    except (WorkspaceError, auto.CommandError):
        held = None
    if held is not None and held.value == value:
        return 0
    return run_stack(plan, "up", {BOOT_VERDICT: value}, targets=[validate_target(plan)])


def after_up(plan: Plan, how: BootWait) -> None:
    """The wait for the nodes configured at boot, after the stack's update: each node that did
    not pass named, the outcome recorded, exit 3 unless every node passed."""
    groups = boot_groups(plan)
    if not groups:
        return
    names = ", ".join(g.name for g in groups)
    if how.deadline_s <= 0:
        print(
            f"rackform: not waiting for the nodes of {names}, configured at boot "
            "(--boot-deadline 0): the stack's validation keeps its last wait's outcome",
            flush=True,
        )
        return
    print(
        f"rackform: waiting up to {how.deadline_s / 60:g} min for the nodes of {names} to "
        "configure themselves at boot",
        flush=True,
    )
    try:
        judged = wait_for_boot(plan, how, runtime(plan.target_type))
    except (BootError, OSError) as exc:
        raise user_error(str(exc)) from None
    if judged is None:
        return
    code = record_boot(plan, judged)
    for line in judged.lines():
        print(line, flush=True)
    passed, total = len(judged.by_state[PASSED]), len(judged.nodes)
    if code:
        print(
            f"rackform: the wait was not recorded in the stack's validation (pulumi exit {code}); "
            "run `rackform up` again",
            file=sys.stderr,
            flush=True,
        )
    if not judged.validated:
        print(
            f"rackform: {passed} of {total} nodes configured at boot passed in "
            f"{judged.waited_s:.0f} s: the cluster is not validated (its validation's "
            "`boot_reports` check fails)",
            flush=True,
        )
        raise typer.Exit(EXIT_NOT_VALIDATED)
    print(
        f"rackform: every node configured at boot passed ({passed}) in {judged.waited_s:.0f} s",
        flush=True,
    )
    if code:
        raise typer.Exit(code)


@app.command()
def preview(file: File, env: Env = None) -> None:
    """Show what `up` would change (pulumi preview on the stack <name>-<env>, after the data
    tier's own stack <name>-<env>-data where the blueprint keeps its file system in one)."""
    plan = for_action(file, env, "nothing was previewed").plan
    if plan.data_stack:
        from rackform.stack.data_stack import has_outputs

        data_first(plan, "preview")
        if not has_outputs(plan, plan.project):
            _say(
                f"rackform: no preview of stack {plan.stack} yet: it reads {plan.data_stack}'s "
                "outputs, which its first `rackform up` makes (`rackform plan` shows both "
                "stacks offline)"
            )
            return
    operate(plan, "preview")


@app.command()
def up(
    file: File,
    env: Env = None,
    revalidate: Annotated[
        bool,
        typer.Option(
            "--revalidate",
            help="Run the validation (smoke job and host checks) again even though nothing on "
            "the nodes changed.",
        ),
    ] = False,
    refresh: Annotated[
        bool,
        typer.Option(
            "--refresh",
            help="Read every resource's live state first (pulumi up --refresh): an instance "
            "terminated outside the stack (heal's replace) is launched again.",
        ),
    ] = False,
    boot_deadline: Annotated[
        float | None,
        typer.Option(
            "--boot-deadline",
            help="Minutes to wait, after the stack's update, for the nodes configured at boot "
            "(default: the catalog's configure.boot_deadline_s, 30 min); 0: do not wait.",
            min=0,
            show_default=False,
        ),
    ] = None,
    boot_bind: Annotated[
        str | None,
        typer.Option(
            "--boot-bind",
            help="Listed nodes configured at boot: the address the boot server listens on.",
        ),
    ] = None,
    boot_port: Annotated[
        int, typer.Option("--boot-port", help="The boot server's port; 0 picks a free one.", min=0)
    ] = 0,
    boot_url: Annotated[
        str | None,
        typer.Option(
            "--boot-url",
            help="Where the nodes reach the boot server (default http://BIND:PORT; required "
            "with a wildcard --boot-bind).",
        ),
    ] = None,
    boot_tls_cert: Annotated[
        Path | None,
        typer.Option(
            "--boot-tls-cert",
            help="The boot server serves https with this certificate chain (PEM).",
        ),
    ] = None,
    boot_tls_key: Annotated[
        Path | None,
        typer.Option("--boot-tls-key", help="The boot server certificate's private key (PEM)."),
    ] = None,
    boot_tls_ca: Annotated[
        Path | None,
        typer.Option(
            "--boot-tls-ca",
            help="The CA bundle (PEM) the nodes verify the boot server against (default: "
            "their own trust store).",
        ),
    ] = None,
) -> None:
    """Provision, configure and validate the cluster (pulumi up on the stack <name>-<env>).
    Validation runs on create and when the configuration or the nodes change (or with
    --revalidate), never for an edit of the owner, idle policy, smoke steps or thresholds. A
    strict validation failure fails it after the report is in the stack outputs; so does an
    unwaived preflight error, before anything is created. Then it waits for the nodes
    configured at boot and names each that did not pass (exit 3: not validated)."""
    plan = for_action(file, env, "nothing was created").plan
    need("pulumi", "up")
    need("cryptography", "up")  # promotion evidence is verified (and signed) with it
    from rackform.stack.gate import UpRefused, before_up

    minutes = (
        plan.figures.configure.boot_deadline_s.value / 60
        if boot_deadline is None
        else boot_deadline
    )
    try:
        tls = tls_of(boot_tls_cert, boot_tls_key, boot_tls_ca)
    except BootError as exc:
        raise user_error(str(exc)) from None
    how = BootWait(
        minutes * 60,
        boot_bind,
        boot_port,
        boot_url,
        say=lambda line: print(line, flush=True),
        tls=tls,
    )
    if boot_groups(plan) and how.deadline_s > 0:
        need("ansible_collections", "up")  # the nodes' artifacts are built from the collection
    try:
        before_up(plan, plan.project, prepare)  # the program runs the same gate
        check_before_up(plan, how, runtime(plan.target_type))
    except (UpRefused, BootError) as exc:
        raise user_error(str(exc)) from None
    stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    if plan.data_stack:
        data_first(plan, "up", refresh)
    operate(plan, "up", {REVALIDATE: stamp} if revalidate else None, refresh)
    after_up(plan, how)


@app.command()
def destroy(
    file: File,
    env: Env = None,
    yes: Annotated[bool, typer.Option("--yes", "-y", help="Do not ask for confirmation.")] = False,
    data: Annotated[
        bool,
        typer.Option(
            "--data",
            help="Also destroy the data tier's own stack <name>-<env>-data after the cluster's: "
            "the file system and every file on it, and the network it sits in.",
        ),
    ] = False,
) -> None:
    """Delete every resource of the stack <name>-<env>. Asks first unless --yes; refuses a
    cluster with lifecycle.protect: true. Hosts that already existed are released, never wiped.
    A file system the blueprint keeps (storage.shared fsx or efs, retain: true) lives in the
    stack <name>-<env>-data with the network it sits in, which destroy leaves (the next `up`
    uses it again) unless --data."""
    plan = prepared(file, env).plan
    if plan.lifecycle.protect:
        raise user_error(
            f"{file}: cluster {plan.name} (environment {plan.environment}) is protected "
            "(lifecycle.protect: true); set it to false in the blueprint, run `rackform up`, "
            "then destroy"
        )
    if data and not plan.data_stack:
        raise user_error(
            f"{file}: cluster {plan.name} keeps no file system in a stack of its own "
            "(storage.shared fsx or efs, created and retained): nothing was destroyed"
        )
    if plan.data_stack:
        need("pulumi", "destroy")
        from rackform.stack.data_stack import DataStackError, check_moved
        from rackform.stack.workspace import WorkspaceError

        try:
            pieces = compiler(plan.target_type).data_pieces(plan)
            check_moved(plan, pieces, plan.project, "`rackform destroy`")
        except (DataStackError, WorkspaceError) as exc:
            raise user_error(str(exc)) from None
    if not yes:
        question = f"Destroy every resource of stack {plan.stack}?"
        if data:
            question = (
                f"Destroy every resource of stack {plan.stack} and of its data tier's stack "
                f"{plan.data_stack}: {plan.shared.describe()} and every file on it, and the "
                "VPC, subnet and security groups it sits in?"
            )
        try:
            confirmed = typer.confirm(question, default=False)
        except typer.Abort:
            confirmed = False
        if not confirmed:
            print("rackform: not destroyed (confirm, or pass --yes)", file=sys.stderr)
            raise typer.Exit(1)
    operate(plan, "destroy")
    if not plan.data_stack:
        return
    if not data:
        _say(
            f"rackform: kept stack {plan.data_stack}: {plan.shared.describe()} and the network "
            "it sits in; `rackform up` uses them again, `rackform destroy --data` deletes them"
        )
        return
    from rackform.stack.data_stack import destroy_data

    try:
        code = destroy_data(plan, plan.project, _say, _err)
    except WorkspaceError as exc:
        raise user_error(str(exc)) from None
    if code:
        raise typer.Exit(code)
    _say(f"rackform: destroyed stack {plan.data_stack}: the file system and its data are gone")
