"""`rackform alerts FILE... [--env ENV] -o DIR`: one Prometheus rule file per blueprint,
`DIR/<name>.rules.yml`, with a group per environment."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
import yaml

from rackform.alerts.rules import rule_file
from rackform.cli.app import app
from rackform.cli.common import Env, prepare_files


@app.command()
def alerts(
    files: Annotated[list[Path], typer.Argument(help="Blueprint files.", show_default=False)],
    out: Annotated[Path, typer.Option("--out", "-o", help="Directory for the rule files.")],
    env: Env = None,
) -> None:
    """Write Prometheus recording and alerting rules for the clusters: utilization below the
    alert level on training clusters, the idle policy's condition, exporter down or GPUs
    missing, XID errors, uncorrectable ECC, pending row remaps. Load them with `rule_files:`."""
    docs: dict[Path, dict] = {}
    for _, prepared in prepare_files(files, env):  # a mistake anywhere: no half set of rules
        name = prepared[0].plan.name
        docs[out / f"{name}.rules.yml"] = rule_file([p.plan for p in prepared])
    out.mkdir(parents=True, exist_ok=True)
    for path, doc in docs.items():
        path.write_text(yaml.safe_dump(doc, sort_keys=False, width=1000))
        typer.echo(f"wrote {path}")
