"""The blueprint's JSON Schema as text: what `rackform schema` prints, blueprints/schema.json
holds and `rackform init` writes into a new repository for editors."""

from __future__ import annotations

import json

from rackform.blueprint.schema.model import Blueprint


def schema_json() -> str:
    return json.dumps(Blueprint.model_json_schema(), indent=2, sort_keys=True) + "\n"
