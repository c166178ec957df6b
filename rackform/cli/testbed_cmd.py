"""`rackform testbed up --nodes N` / `rackform testbed down`: local QEMU VMs to converge roles on."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from rackform.cli.app import app
from rackform.cli.common import prepared
from rackform.testbed.vm import CPUS, MEMORY_MB

testbed_app = typer.Typer(
    help="Local Debian VMs under QEMU with emulated NVMe drives, for trying the roles for real.",
    no_args_is_help=True,
)
app.add_typer(testbed_app, name="testbed")

DirOption = Annotated[
    Path, typer.Option("--dir", help="Directory holding the testbed's VMs, key and blueprint.")
]


def _log(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


@testbed_app.command("up")
def up(
    nodes: Annotated[int, typer.Option("--nodes", "-n", help="How many VMs.", min=1, max=16)] = 2,
    dir: DirOption = Path(".testbed"),
    memory_mb: Annotated[
        int, typer.Option("--memory-mb", help="Memory per VM.", min=512)
    ] = MEMORY_MB,
    cpus: Annotated[int, typer.Option("--cpus", help="vCPUs per VM.", min=1, max=16)] = CPUS,
    image: Annotated[
        Path | None,
        typer.Option(
            "--image",
            help="Boot every VM from this image directory: a node image `rackform image build` "
            "wrote for a bare-metal blueprint (rootfs.raw, vmlinuz, initrd.img).",
        ),
    ] = None,
) -> None:
    """Boot N VMs (building the cached base image first if needed), wait for SSH, and write
    a bare-metal blueprint for them."""
    from rackform.testbed.image import ImageError
    from rackform.testbed.lifecycle import TestbedError
    from rackform.testbed.lifecycle import up as testbed_up
    from rackform.testbed.ssh import SshError
    from rackform.testbed.vm import VmError

    try:
        bed = testbed_up(
            dir,
            nodes,
            memory_mb=memory_mb,
            cpus=cpus,
            image=image,
            log=_log,
        )
    except (TestbedError, ImageError, SshError, VmError) as exc:
        _log(f"rackform testbed up: {exc}")
        raise typer.Exit(2 if isinstance(exc, TestbedError) else 1) from None
    # The blueprint written for the VMs goes through the same engine as any other: what it
    # compiles to is what `configure` will run.
    plan = prepared(Path(bed.blueprint), None).plan
    for n in bed.nodes:
        typer.echo(
            f"{n.name}\tssh -p {n.ssh_port} -i {bed.key} root@127.0.0.1\tprivate {n.priv_address}"
        )
    typer.echo(f"blueprint: {bed.blueprint} ({plan.nodes} node(s), digest {plan.digest[7:19]})")
    typer.echo(
        f"configure: rackform configure {bed.blueprint} --private-key {bed.key}"
        f" --known-hosts {bed.known_hosts}"
    )


@testbed_app.command("image")
def image(
    packages: Annotated[
        bool,
        typer.Option(
            "--packages/--no-packages",
            help="Also download the packages the roles install into a local repository (what "
            "the tests serve to the VMs).",
        ),
    ] = True,
) -> None:
    """Build the cached base image now, if the current recipe has none (`up` builds it too):
    a few minutes with debootstrap, needs root and Debian's mirror."""
    from rackform.testbed.image import ImageError
    from rackform.testbed.prepare import prepare, report

    try:
        base, repo = prepare(packages=packages, log=_log)
    except ImageError as exc:
        _log(f"rackform testbed image: {exc}")
        raise typer.Exit(1) from None
    typer.echo("\n".join(report(base, repo)))


def _keep_or_restore(dir: Path, state: str, restore: bool) -> None:
    from rackform.testbed import lifecycle
    from rackform.testbed.vm import VmError

    try:
        bed = lifecycle.Testbed.load(dir.resolve())
        took = (lifecycle.restore if restore else lifecycle.freeze)(bed, state)
    except (lifecycle.TestbedError, VmError) as exc:
        _log(f"rackform testbed {'restore' if restore else 'freeze'}: {exc}")
        raise typer.Exit(2) from None
    what = "restored to" if restore else "frozen as"
    typer.echo(
        f"{', '.join(n.name for n in bed.nodes)} {what} {state!r} and booted in {took:.0f} s"
    )


@testbed_app.command("freeze")
def freeze(
    state: Annotated[str, typer.Argument(help="A name for the state (lowercase, digits, '-').")],
    dir: DirOption = Path(".testbed"),
) -> None:
    """Keep the VMs' drives as they are now under a name (after a sync), then boot them again:
    `restore` brings them back to it."""
    _keep_or_restore(dir, state, restore=False)


@testbed_app.command("restore")
def restore(
    state: Annotated[str, typer.Argument(help="A state named by `testbed freeze`.")],
    dir: DirOption = Path(".testbed"),
) -> None:
    """Bring the VMs back to a frozen state and boot them (what they wrote since is lost)."""
    _keep_or_restore(dir, state, restore=True)


@testbed_app.command("down")
def down(dir: DirOption = Path(".testbed")) -> None:
    """Stop the testbed's VMs and delete their files (the cached base image stays)."""
    from rackform.testbed.lifecycle import TestbedError
    from rackform.testbed.lifecycle import down as testbed_down

    try:
        stopped = testbed_down(dir)
    except TestbedError as exc:
        _log(f"rackform testbed down: {exc}")
        raise typer.Exit(2) from None
    typer.echo(f"stopped {', '.join(stopped)}" if stopped else "no testbed VMs were running")
