"""`rackform plan FILE [--env ENV] [--json]`: the Pulumi program run offline under Pulumi's mock
runtime; prints the resource tree and the count per type (a data tier's own stack first, where
the blueprint keeps its file system in one). No credentials, no network, no CLI.

The engine compiles and checks the blueprint first: a blueprint with an unwaived preflight error
gets its findings and cost, and the program is not run. `stack_resources(plan)` is the data;
`render_text` and `plan_document` only present it.
"""

from __future__ import annotations

import shutil
from collections import Counter
from typing import Annotated, Any

import typer

from rackform.cli import jsontext
from rackform.cli.app import app
from rackform.cli.common import EXIT_INVALID, Env, File, fail, need, prepared
from rackform.cli.measured import Evidence, StateDir, with_measured
from rackform.cli.plan_render import render_text
from rackform.plan.configuring import configuring
from rackform.plan.cost import render as render_cost
from rackform.plan.interval import CheckpointInterval
from rackform.plan.model import Plan
from rackform.plan.targets.compilers import compiler
from rackform.targets.runtimes import runtime


def _resource(r) -> dict[str, Any]:
    return {
        "type": r.type,
        "name": r.name,
        "parent": r.parent,
        "custom": r.custom,
        "protect": r.protect,
        "depends_on": r.dependencies,
        "inputs": r.inputs,
        "options": r.options,
    }


def stack_resources(plan: Plan) -> list[tuple[str, list[dict[str, Any]]]]:
    """(stack, its resources) for each stack `pulumi up` would update, in the order `rackform
    up` brings them up: the data tier's own stack first where the plan has one
    (`plan.data_stack`), then the cluster's. Each resource, in tree order:
    `{"type", "name", "parent", "custom", "protect", "depends_on", "inputs", "options"}`
    (parent: the parent's name, None at the top; inputs as the engine sees them, unknowns as
    "(known after up)"; options: ignore_changes, replace_on_changes, delete_before_replace)."""
    from rackform.stack.offline import record_stacks  # imports Pulumi only for plan

    return [
        (stack, [_resource(r) for r in records])
        for stack, records in record_stacks(plan, runtime(plan.target_type), exiting=True)
    ]


def counts(resources: list[dict[str, Any]]) -> dict[str, int]:
    return dict(sorted(Counter(r["type"] for r in resources).items()))


def plan_document(
    plan: Plan, resources: list[dict[str, Any]], data: list[dict[str, Any]] | None = None
) -> dict[str, Any]:
    """The plan of the cluster's stack (`resources`) and, where the plan has one, of its data
    tier's own stack (`data`: its resources), under `"data"`."""
    doc = {
        "blueprint": plan.source,
        "environment": plan.environment,
        "stack": plan.stack,
        "digest": plan.digest,
        "protected": plan.lifecycle.protect,
        "resources": resources,
        "counts": counts(resources),
        "rollout": compiler(plan.target.type).replacement(plan, resources),
        "configuration": configuration_document(plan),
        # A training plan's checkpoint interval against the best one (docs/guides/goodput.md).
        "checkpoint_interval": None if plan.interval is None else plan.interval.as_json(),
    }
    if plan.data_stack is not None:
        doc["data"] = {
            "stack": plan.data_stack,
            "kept": True,  # `rackform destroy` and reap's never destroy it; every resource protected
            "resources": data or [],
            "counts": counts(data or []),
        }
    return doc


def configuration_document(plan: Plan) -> dict[str, Any]:
    """How each node group is configured and about how long it takes (`plan.configuring`)."""
    figure = plan.figures.configure.node_converge_s
    return {
        "groups": [c.as_dict() for c in configuring(plan)],
        "node_converge_s": figure.value,
        "source": f"{figure.source.title} ({figure.source.url}, {figure.source.date})",
    }


def interval_line(iv: CheckpointInterval) -> str:
    """The checkpoint interval's line of the text plan."""
    best = f"best every {iv.best_s / 60:.0f} min: {iv.goodput_best:.1%} goodput"
    if iv.goodput_declared is not None:
        best = f"every {iv.declared_s / 60:g} min: {iv.goodput_declared:.1%} goodput; " + best
    return (
        f"checkpoint interval: {best} (a checkpoint blocks {iv.c_s:.3g} s, the job fails "
        f"every {iv.job_mtbf_s / 3600:,.1f} h; rackform goodput simulates it)"
    )


@app.command()
def plan(
    file: File,
    env: Env = None,
    as_json: Annotated[bool, typer.Option("--json", help="Machine-readable output.")] = False,
    evidence: Evidence = None,
    state_dir: StateDir = None,
) -> None:
    """Show every resource `rackform up` would create, offline and deterministically (the same
    Pulumi program under Pulumi's mock runtime), with the preflight findings and the cost.
    Exits 2 when the blueprint is invalid or a preflight error is not waived (then the program
    is not run: only the findings and the cost are shown)."""
    p = prepared(file, env)
    if evidence is not None or state_dir is not None:
        # The checkpoint interval from what the cluster measured (docs/guides/goodput.md).
        p = with_measured(file, env, p, evidence, state_dir)
    stacks: list[tuple[str, list[dict[str, Any]]]] = [(p.plan.stack, [])]
    if not p.blocked:
        need("pulumi", "plan")
        from rackform.stack.errors import ProgramError

        try:
            stacks = stack_resources(p.plan)
        except ProgramError as exc:
            # Stack config the program refuses (e.g. an aws:region against the blueprint's).
            raise fail([p.plan.effective.problem(exc.path, exc.message, exc.fix)]) from None
    data = stacks[0][1] if len(stacks) > 1 else None
    doc = {**plan_document(p.plan, stacks[-1][1], data), "blocked": p.blocked}
    if as_json:
        doc.update(p.report.as_dict())
        typer.echo(jsontext.dumps(doc))  # json.dumps(doc, indent=2), at twice its speed
    else:
        width = shutil.get_terminal_size((100, 24)).columns  # 100 when not a terminal
        if not p.blocked:
            typer.echo(render_text(doc, width), nl=False)
            typer.echo("")
        typer.echo("\n".join(render_cost(p.report.cost, width)))
        if p.plan.interval is not None:
            typer.echo(interval_line(p.plan.interval))
        for lf in p.report.findings:
            typer.echo(str(lf), err=True)
        if p.blocked:
            typer.echo(
                f"{file}: preflight errors: the program was not run (fix the blueprint or "
                "waive the finding with a reason)",
                err=True,
            )
    if p.blocked:
        raise typer.Exit(EXIT_INVALID)
