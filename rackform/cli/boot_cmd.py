"""`rackform boot serve FILE [--env ENV] --bind ADDR [--port N] [--url URL] [--deadline MIN]
[--group G] [--out DIR] [--tls-cert CERT --tls-key KEY [--tls-ca CA]]`: configure at boot the nodes
a blueprint lists (bare metal, colocation). Builds each node group's artifact, writes each listed
node's user data (its own token) for the site's provisioning to hand to it, serves the artifacts and
takes the nodes' reports (over TLS where the site gives a certificate) until every listed node has
reported or the deadline passes, then names each node: passed, failed (what failed), stale (a
warning) or missing (what to do). The work is the boot controller's (`rackform.boot.controller`)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from rackform.boot.controller import (
    BootError,
    announced,
    check_bind,
    default_out,
    listed_groups,
    prepare,
    serve,
    tls_of,
)
from rackform.boot.reports import PASSED
from rackform.cli.app import app
from rackform.cli.common import EXIT_NOT_VALIDATED, Env, File, for_action, need, user_error

boot_app = typer.Typer(
    help="Nodes that configure themselves at boot, from the controller.", no_args_is_help=True
)
app.add_typer(boot_app, name="boot")


@boot_app.command("serve")
def serve_cmd(
    file: File,
    bind: Annotated[
        str, typer.Option("--bind", help="Address to listen on (only there).", show_default=False)
    ],
    env: Env = None,
    port: Annotated[int, typer.Option("--port", help="Port; 0 picks a free one.", min=0)] = 0,
    url: Annotated[
        str | None,
        typer.Option(
            "--url",
            help="Where the nodes reach this server (default http://BIND:PORT; required with a "
            "wildcard --bind).",
        ),
    ] = None,
    deadline: Annotated[
        float,
        typer.Option("--deadline", help="Minutes to wait for the nodes' reports.", min=0),
    ] = 60.0,
    group: Annotated[
        str | None, typer.Option("--group", help="Only this node group's nodes.")
    ] = None,
    out: Annotated[
        Path | None,
        typer.Option("--out", help="The round's directory (default: rackform-boot/<stack> here)."),
    ] = None,
    tls_cert: Annotated[
        Path | None,
        typer.Option(
            "--tls-cert",
            help="Serve https with this certificate chain (PEM), the site's for the server's "
            "name or address; the nodes' URL is then https://.",
        ),
    ] = None,
    tls_key: Annotated[
        Path | None, typer.Option("--tls-key", help="The certificate's private key (PEM).")
    ] = None,
    tls_ca: Annotated[
        Path | None,
        typer.Option(
            "--tls-ca",
            help="The CA bundle (PEM) the nodes verify the certificate against, put in their "
            "user data (default: their own trust store).",
        ),
    ] = None,
) -> None:
    """Serve the listed nodes their configuration at boot and wait for their reports: exit 0
    only when every node passed."""
    plan = for_action(file, env, "nothing was served").plan
    need("ansible_collections", "boot serve")
    try:
        tls = tls_of(tls_cert, tls_key, tls_ca)
        check_bind(bind, url, tls)
        round_ = prepare(plan, out or default_out(plan), listed_groups(plan, group))

        def listening(bound: str, written: list[Path]) -> None:
            for line in announced(round_, bound, written, deadline * 60):
                print(line, flush=True)

        judged = serve(round_, bind, port, deadline * 60, url=url, tls=tls, listening=listening)
    except (BootError, OSError) as exc:
        raise user_error(str(exc)) from None
    for r in judged.nodes:
        print(r.line or f"{r.node}: passed", flush=True)
    passed = len(judged.by_state[PASSED])
    if judged.validated:
        print(f"every node passed ({passed}) in {judged.waited_s:.0f} s: validated")
        return
    print(
        f"{passed} of {len(judged.nodes)} nodes passed in {judged.waited_s:.0f} s: "
        "the cluster is not validated"
    )
    raise typer.Exit(EXIT_NOT_VALIDATED)
