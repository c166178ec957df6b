"""`rackform dashboards -o DIR`: the Grafana dashboard for rackform's clusters
(`DIR/rackform-clusters.json`), generated with Grafana Labs' SDK; import it in Grafana or
provision it from DIR."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from rackform.cli.app import app
from rackform.cli.common import need, user_error


@app.command()
def dashboards(
    out: Annotated[Path, typer.Option("--out", "-o", help="Directory for the dashboards.")],
) -> None:
    """Write the Grafana dashboard of every cluster (variables pick the cluster and
    environment): GPU utilization against the target, idle GPU-hours, failures, time to repair
    per cluster and per node, from the series the dcgm role scrapes, `rackform alerts`' rules
    and `rackform metrics` export."""
    need("grafana_foundation_sdk", "rackform dashboards", "report")
    from rackform.catalog.preflight import load_preflight_figures
    from rackform.dashboards.grafana import UID, as_json

    target = load_preflight_figures().utilization.target_fraction.value * 100
    path = out / f"{UID}.json"
    try:
        out.mkdir(parents=True, exist_ok=True)
        path.write_text(as_json(target), encoding="utf-8")
    except OSError as exc:
        raise user_error(f"{path}: {exc.strerror}") from None
    typer.echo(f"wrote {path}")
