"""`rackform smoke [--nproc N] [--blueprint FILE --env ENV] [--json PATH]`

Runs the host checks and the smoke-training job on this machine through torchrun (2 CPU processes
with gloo when there is no GPU), prints the report as a table and exits 1 when any check failed.
With a blueprint, the expectations and thresholds are that node group's (`thresholds.for_group`);
without one, only the loss must fall.

The run covers this machine only. node_count expects the node group's count in the
environment, so against a group of several nodes it fails saying the run covered 1 of them;
`--nodes 1` declares that one node of the group is what this run is meant to check."""

from __future__ import annotations

import importlib
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Annotated

import typer

from rackform.acceptance.argv import host_argv, job_argv
from rackform.cli.app import app
from rackform.cli.common import EXIT_INVALID, Env, for_action
from rackform.paths import validators_dir, validators_importable
from rackform.plan.thresholds import (
    Expectations,
    GroupError,
    for_group,
    pick_group,
    without_blueprint,
)

PRESETS = ("tiny", "small", "default")


def _launch():
    """validators/ ships in the rackform.gpu collection, in smoke_train's files (it goes to
    nodes as files, never installed there); make it importable from there."""
    validators = validators_dir()
    if not (validators / "launch.py").is_file():
        print(f"rackform: internal error: validators/ not found in {validators.parent}",
              file=sys.stderr)  # fmt: skip
        raise typer.Exit(1)
    validators_importable()
    return importlib.import_module("validators.launch"), importlib.import_module(
        "validators.report"
    )


def _expectations(
    blueprint: Path | None, env: str | None, group: str | None, nodes: int | None
) -> tuple[Expectations, dict]:
    if blueprint is None:
        if env or group or nodes is not None:
            print("rackform: --env, --group and --nodes need --blueprint", file=sys.stderr)
            raise typer.Exit(EXIT_INVALID)
        return without_blueprint(), {}
    plan = for_action(blueprint, env, "the smoke job did not run").plan
    try:
        g = pick_group(plan, group)
    except GroupError as exc:
        print(f"{blueprint}: {exc}", file=sys.stderr)
        raise typer.Exit(EXIT_INVALID) from None
    where = f"node group {g.name} has {g.count} node{'s' if g.count != 1 else ''}"
    where += f" in environment {plan.environment}" if plan.environment else ""
    if g.count < 1:
        print(f"{blueprint}: {where} (parked): no node to smoke-test", file=sys.stderr)
        raise typer.Exit(EXIT_INVALID)
    if nodes is not None and nodes > g.count:
        print(f"{blueprint}: --nodes {nodes}: the {where}", file=sys.stderr)
        raise typer.Exit(EXIT_INVALID)
    exp = for_group(plan, g.name, nodes=nodes)  # None: the group's count
    source = {"file": str(blueprint), "environment": plan.environment, "digest": plan.digest}
    return exp, source


@app.command()
def smoke(
    nproc: Annotated[
        int | None,
        typer.Option("--nproc", min=1, help="Processes: default one per GPU, or 2 on CPU."),
    ] = None,
    blueprint: Annotated[
        Path | None,
        typer.Option("--blueprint", "-b", help="Take expectations from this blueprint."),
    ] = None,
    env: Env = None,
    group: Annotated[
        str | None, typer.Option("--group", help="Node group (when the blueprint has several).")
    ] = None,
    nodes: Annotated[
        int | None,
        typer.Option(
            "--nodes",
            min=1,
            help="Nodes the run must cover (node_count), default the node group's count in the "
            "environment; this run covers this machine only, so --nodes 1 checks one node of a "
            "larger group.",
        ),
    ] = None,
    json_path: Annotated[
        Path | None, typer.Option("--json", help="Also write the JSON report here.")
    ] = None,
    checkpoint_dir: Annotated[
        Path | None,
        typer.Option(
            "--checkpoint-dir", help="Default: the blueprint's checkpoint mount, else a temp dir."
        ),
    ] = None,
    steps: Annotated[
        int | None,
        typer.Option("--steps", min=2, help="Default: the blueprint's smoke_steps, else 30."),
    ] = None,
    preset: Annotated[
        str | None,
        typer.Option("--preset", help="Model size: tiny (CPU default), small, default (GPU)."),
    ] = None,
    host_checks: Annotated[
        bool, typer.Option("--host-checks/--no-host-checks", help="NVML, dcgmi, storage ceiling.")
    ] = True,
    timeout: Annotated[
        float, typer.Option("--timeout", min=10, help="Deadline for the whole run, seconds.")
    ] = 900.0,
    job_args: Annotated[
        list[str] | None,
        typer.Argument(
            help="After --: extra arguments for validators.smoke (e.g. -- --compile).",
            show_default=False,
        ),
    ] = None,
) -> None:
    """Run the smoke-training job and host checks here; exit 1 if any check fails."""
    if preset is not None and preset not in PRESETS:
        print(f"rackform: --preset {preset!r} is not one of {', '.join(PRESETS)}", file=sys.stderr)
        raise typer.Exit(EXIT_INVALID)
    if json_path is not None and not json_path.parent.is_dir():
        print(
            f"rackform: --json {json_path}: no such directory {json_path.parent}", file=sys.stderr
        )
        raise typer.Exit(EXIT_INVALID)
    exp, source = _expectations(blueprint, env, group, nodes)
    launch, report = _launch()
    try:
        import torch  # only here: the job needs it anyway, the rest of the CLI does not
    except ImportError:
        print("rackform: `smoke` needs torch here (pip install torch==2.13.0)", file=sys.stderr)
        raise typer.Exit(1) from None
    # Without numpy torch imports fine and the job dies in its first collective, deep in a
    # rank ("Numpy is not available"): say so now, in one line.
    missing = importlib.import_module("validators.deps").numpy_problem()
    if missing:
        print(f"rackform: `smoke` needs numpy beside torch: {missing}", file=sys.stderr)
        raise typer.Exit(EXIT_INVALID)

    on_gpu = torch.cuda.is_available()
    procs = nproc or (torch.cuda.device_count() if on_gpu else 2)
    own_tmp = None
    if checkpoint_dir is None and exp.checkpoint_dir is None:
        own_tmp = tempfile.mkdtemp(prefix="rackform-ckpt-")
    ckpt = str(checkpoint_dir or exp.checkpoint_dir or own_tmp)
    steps = steps or exp.smoke_steps or 30
    jargs = job_argv(exp, steps=steps, checkpoint_dir=ckpt, nodes=exp.nodes)
    jargs += ["--preset", preset] if preset else []
    hargs = None
    if host_checks:
        # The blueprint's array mount is expected only where the run writes to it.
        on_array = exp.checkpoint_dir and Path(ckpt).resolve() == Path(exp.checkpoint_dir).resolve()
        hargs = host_argv(
            exp,
            storage_dir=ckpt,
            probe_mb=4096 if on_gpu else 64,
            expect_mount=exp.checkpoint_dir if on_array else None,
        )
    print(
        f"smoke: {procs} processes on {'GPU (nccl)' if on_gpu else 'CPU (gloo)'}, "
        f"checkpoints in {ckpt}" + (f", node group {exp.group}" if exp.group else ""),
        file=sys.stderr,
    )
    if exp.nodes is not None and exp.nodes > 1:
        print(
            f"smoke: node_count expects {exp.nodes} nodes of node group {exp.group}; this run "
            "covers this machine only, so it fails (--nodes 1 checks one node of the group)",
            file=sys.stderr,
        )
    for name, value, why in exp.table():
        print(
            f"smoke: threshold {name} = {'-' if value is None else f'{value:g}'} ({why})",
            file=sys.stderr,
        )
    try:
        doc = launch.run(procs, [*jargs, *(job_args or [])], hargs, timeout)
    finally:
        if own_tmp:
            shutil.rmtree(own_tmp, ignore_errors=True)
    doc["thresholds"] = {n: {"value": v, "source": s} for n, v, s in exp.table()}
    if source:
        doc["blueprint"] = source
    # Named for what it is: a run on this machine, never promotion evidence (that is the
    # Validate stage's signed statement, made on the cluster's nodes).
    doc["producer"] = "rackform smoke"
    if json_path is not None:
        json_path.write_text(report.dumps(doc))
    typer.echo(report.table(doc))
    raise typer.Exit(report.exit_code(doc))
