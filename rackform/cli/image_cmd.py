"""`rackform image build FILE [--env ENV]`: build the cluster's node image (`image.bake`) now,
without touching the nodes.

- AWS: the stack's update limited to the resources that build it (its EC2 Image Builder
  resources); the launch templates move to the new image at the next `up`.
- Bare metal and colocation: a disk image built on this machine, on a testbed VM, into `--out`,
  for the site's provisioning to deploy.

A target that builds no image says so in one line."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from rackform.cli.app import app
from rackform.cli.common import Env, File, extra_vars_of, for_action, need, user_error
from rackform.cli.stack_cmd import operate
from rackform.targets.runtime import DiskImageRequest, ImageNotBuilt
from rackform.targets.runtimes import runtime
from rackform.testbed.vm import CPUS, MEMORY_MB

image_app = typer.Typer(help="The cluster's baked node image.", no_args_is_help=True)
app.add_typer(image_app, name="image")


def _log(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


@image_app.command("build")
def build(
    file: File,
    env: Env = None,
    out: Annotated[
        Path | None,
        typer.Option(
            "--out",
            help="Bare metal, colocation: the image's directory (default: rackform-image/<stack> "
            "here). It is replaced only once a build has finished.",
        ),
    ] = None,
    formats: Annotated[
        list[str] | None,
        typer.Option(
            "--format",
            help="Bare metal, colocation: qcow2 or raw (repeatable; default both).",
        ),
    ] = None,
    base: Annotated[
        Path | None,
        typer.Option(
            "--base",
            help="Bare metal, colocation: the image directory to bake on (rootfs.raw, vmlinuz, "
            "initrd.img; default the testbed's Debian 12, built and cached here).",
        ),
    ] = None,
    apt_source: Annotated[
        str | None,
        typer.Option(
            "--apt-source",
            help="Bare metal, colocation: the builder's only apt source during the build (a "
            "sources.list line: the site's mirror); the base's sources are put back after.",
        ),
    ] = None,
    extra_vars: Annotated[
        list[str] | None,
        typer.Option("--extra-vars", "-x", help="Role variable KEY=VALUE or @FILE (repeatable)."),
    ] = None,
    pip_args: Annotated[
        list[str] | None,
        typer.Option(
            "--pip-arg",
            help="Bare metal, colocation: an argument for the builder's pip, which installs "
            "ansible-core (repeatable; e.g. --pip-arg=--index-url=https://mirror/simple).",
        ),
    ] = None,
    cpus: Annotated[
        int | None,
        typer.Option(
            "--cpus",
            min=1,
            max=16,
            help=f"Bare metal, colocation: the builder VM's vCPUs (default {CPUS}). The roles' "
            "Ansible runs inside it, its controller beside each task's module.",
        ),
    ] = None,
    memory_mb: Annotated[
        int | None,
        typer.Option(
            "--memory-mb",
            min=512,
            help=f"Bare metal, colocation: the builder VM's memory (default {MEMORY_MB}).",
        ),
    ] = None,
) -> None:
    """Build the node image the blueprint bakes (image.bake), without replacing any node. AWS:
    the stack's update targeted at the image's resources, the nodes launch from it after the
    next `rackform up`. Bare metal and colocation: a disk image built here on a VM."""
    plan = for_action(file, env, "nothing was built").plan
    rt = runtime(plan.target_type)
    extras = extra_vars_of(extra_vars or [])
    try:
        if rt.image_built == "here":
            request = DiskImageRequest(
                out=out or Path("rackform-image") / plan.stack,
                formats=tuple(dict.fromkeys(formats or ())),
                base=base,
                apt_source=apt_source,
                extra_vars=extras,
                pip_args=tuple(pip_args or ()),
                cpus=cpus,
                memory_mb=memory_mb,
            )
            image = rt.build_image_here(plan, request, _log)
            _done(image)
            return
        if extras or out or formats or base or apt_source or pip_args or cpus or memory_mb:
            raise ImageNotBuilt(
                f"{plan.target_type} builds its node image in its stack: --out, --format, "
                "--base, --apt-source, --pip-arg, --cpus, --memory-mb and -x are for a disk "
                "image built here"
            )
        targets = rt.node_image_targets(plan)
    except ImageNotBuilt as exc:
        raise user_error(str(exc)) from None
    need("pulumi", "image build")
    operate(plan, "up", targets=targets)


def _done(image) -> None:
    record = image.record
    how = "already built" if image.built_s is None else f"built in {image.built_s:.0f} s"
    print(f"node image {how}: {image.dir}")
    print(f"  roles {record.get('roles')}; baked: {', '.join(record.get('tags') or ()) or 'none'}")
    files = image.manifest.get("files", {})
    for name in sorted(files):
        print(f"  {name}  sha256 {files[name]}")
