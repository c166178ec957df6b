"""`rackform schema`"""

from __future__ import annotations

import typer

from rackform.blueprint.schema.jsonschema import schema_json
from rackform.cli.app import app


@app.command()
def schema() -> None:
    """Print the blueprint JSON Schema (also committed as blueprints/schema.json)."""
    typer.echo(schema_json(), nl=False)
