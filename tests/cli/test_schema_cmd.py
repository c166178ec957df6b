"""`rackform schema` and the committed blueprints/schema.json."""

from __future__ import annotations

import json

from blueprint_helpers import ROOT, rackform


def test_committed_schema_is_current():
    r = rackform("schema")
    assert r.returncode == 0
    committed = (ROOT / "blueprints" / "schema.json").read_text()
    assert r.stdout == committed, (
        "blueprints/schema.json is stale: run `rackform schema > blueprints/schema.json`"
    )


def test_every_field_is_described():
    schema = json.loads((ROOT / "blueprints" / "schema.json").read_text())
    missing = []
    for name, model in [("Blueprint", schema), *schema["$defs"].items()]:
        for field, prop in model.get("properties", {}).items():
            if "description" not in prop:
                missing.append(f"{name}.{field}")
        assert model.get("additionalProperties") is False or "properties" not in model, name
    assert not missing, missing
