"""`rackform diff --base REF [--head REF] [PATH...] [--json]`: what a pull request changes in
every blueprint whose file changed between two git revisions (`gitops.diff`), as a
Markdown PR comment or JSON.

Exit status: 0, or 1 when a change brings a new unwaived preflight error (the check fails), or 2
for bad input (a ref that does not exist, a shallow clone missing the base, a blueprint invalid
at one of the revisions: the others are still shown)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated

import typer

from rackform.cli.app import app
from rackform.cli.common import EXIT_INVALID, user_error
from rackform.lifecycle.directory import HELP

EXIT_NEW_ERROR = 1


@app.command("diff")
def diff_cmd(
    base: Annotated[str, typer.Option("--base", help="The revision the PR merges into.")],
    head: Annotated[str, typer.Option("--head", help="The PR's revision.")] = "HEAD",
    paths: Annotated[
        list[str] | None,
        typer.Argument(
            help="Files or folders to compare (default: blueprints/).", show_default=False
        ),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Machine-readable output.")] = False,
    output: Annotated[
        Path | None, typer.Option("--output", "-o", help="Also write the output to this file.")
    ] = None,
    state_dir: Annotated[
        Path | None,
        typer.Option(
            "--state-dir",
            help=f"Where rolling changes keep their records, the lifecycle's state directory ({HELP}): a rollout's expected time is made from what the stack's last one measured there, else from the catalog's per-node minutes.",
        ),
    ] = None,
) -> None:
    """Compare every changed blueprint between two revisions, environment by environment:
    effective fields, resources by URN, preflight findings and the cost delta."""
    from rackform.gitops.diff import diff
    from rackform.gitops.diff_render import document, markdown
    from rackform.gitops.gitrev import GitError, resolve, toplevel

    try:
        repo = toplevel(Path.cwd())
        old, new = resolve(repo, base, "--base"), resolve(repo, head, "--head")
        rel = [str((Path.cwd() / p).resolve().relative_to(repo)) for p in paths or ["blueprints"]]
    except GitError as exc:
        raise user_error(str(exc)) from None
    except ValueError:
        raise user_error(f"{' '.join(paths or [])}: not inside the repository {repo}") from None
    if output is not None and not output.parent.is_dir():
        raise user_error(f"--output {output}: no such directory {output.parent}")
    from functools import partial

    from rackform.lifecycle.directory import state_dir as lifecycle_dir
    from rackform.rollout.measured import last_measured

    timings = partial(last_measured, lifecycle_dir(state_dir))
    diffs = diff(repo, old, new, rel, labels=(base, head), timings=timings)
    text = (
        json.dumps(document(diffs, base, head), indent=2) + "\n"
        if as_json
        else markdown(diffs, base, head)
    )
    typer.echo(text, nl=False)
    if output is not None:
        output.write_text(text, encoding="utf-8")
    for bd in diffs:
        for p in bd.problems:
            print(p, file=sys.stderr)
    if any(bd.problems for bd in diffs):
        raise typer.Exit(EXIT_INVALID)
    errors = [(bd, e, f) for bd in diffs for e in bd.environments for f in e.new_errors]
    for _bd, e, f in errors:
        print(
            f"{f['file']}:{f['line']}:{f['col']}: {f['path']} [env {e.environment}]: new "
            f"{f['level']} {f['code']}: {f['message']}",
            file=sys.stderr,
        )
    if errors:
        raise typer.Exit(EXIT_NEW_ERROR)
