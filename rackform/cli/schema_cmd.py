"""`rackform schema`"""

from __future__ import annotations

import json

import typer

from rackform.blueprint.schema.model import Blueprint
from rackform.cli.app import app


def schema_json() -> str:
    return json.dumps(Blueprint.model_json_schema(), indent=2, sort_keys=True) + "\n"


@app.command()
def schema() -> None:
    """Print the blueprint JSON Schema (also committed as blueprints/schema.json)."""
    typer.echo(schema_json(), nl=False)
