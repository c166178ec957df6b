"""`rackform compile FILE [--env ENV] [-o DIR]`: write what the compiled plan holds for Pulumi
and Ansible. Paths are the user's: FILE and DIR relative to the working directory; the stack
config names the blueprint relative to the Pulumi project, as the program reads it."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from rackform.cli.app import app
from rackform.cli.common import Env, File, for_action, user_error
from rackform.paths import user_path
from rackform.plan.files import files_for


def write(files: dict[str, str], out_dir: Path) -> list[Path]:
    """Write every file (only those whose content changed) and return their paths."""
    written = []
    for rel, content in files.items():
        path = out_dir / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        if not path.exists() or path.read_text(encoding="utf-8") != content:
            tmp = path.with_name(path.name + ".tmp")
            tmp.write_text(content, encoding="utf-8")
            tmp.replace(path)  # never a half-written file
        written.append(path)
    return written


@app.command("compile")
def compile_(
    file: File,
    env: Env = None,
    out: Annotated[Path, typer.Option("--out", "-o", help="Output directory.")] = Path("build"),
) -> None:
    """Write the effective blueprint, the Pulumi stack config, and the Ansible inventory
    skeleton and group_vars for one environment. A rerun is byte-identical; a blueprint with an
    unwaived preflight error writes nothing."""
    prepared = for_action(file, env, "nothing was written")
    files = files_for(prepared.plan)
    try:
        paths = write(files, user_path(out))
    except OSError as exc:
        raise user_error(f"{out}: cannot write ({exc.strerror})") from None
    for p in paths:
        typer.echo(str(out / p.relative_to(user_path(out))))
