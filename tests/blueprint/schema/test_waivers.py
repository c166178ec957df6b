"""Waivers in the schema: known codes only, once each, always with a reason."""

from __future__ import annotations

import json

import pytest
from blueprint_helpers import AWS_TRAINING

from rackform.blueprint.loader import load_effective
from rackform.blueprint.problems import BlueprintError
from rackform.blueprint.schema.jsonschema import schema_json
from rackform.preflight.registry import codes


def problems(write, waivers: str) -> list:
    with pytest.raises(BlueprintError) as exc:
        load_effective(write(AWS_TRAINING + "waivers:\n" + waivers))
    return exc.value.problems


def test_a_known_code_with_a_reason_loads(write):
    bp = load_effective(
        write(
            AWS_TRAINING + "waivers: [{code: fabric-unused, reason: dev tests the EFA install}]\n"
        )
    ).blueprint
    assert [(w.code, w.reason) for w in bp.waivers] == [
        ("fabric-unused", "dev tests the EFA install")
    ]


def test_unknown_code_is_a_located_error_with_a_hint(write):
    (p,) = problems(write, "  - {code: fabric-unsued, reason: twelve chars}\n")
    assert (p.path, p.line, p.col) == ("waivers[0].code", 15, 12)
    assert p.message == "unknown preflight code 'fabric-unsued'"
    assert p.fix == "did you mean 'fabric-unused'?"


def test_duplicate_code_is_an_error(write):
    twice = "  - {code: fabric-unused, reason: first reason}\n" * 2
    assert [p.path for p in problems(write, twice)] == ["waivers[1].code"]


@pytest.mark.parametrize("reason", ["", "ok", "'          '"])
def test_a_waiver_needs_a_real_reason(write, reason):
    (p,) = problems(write, f"  - {{code: fabric-unused, reason: {reason}}}\n")
    assert p.path == "waivers[0].reason"


def test_json_schema_lists_the_codes():
    schema = json.loads(schema_json())
    assert schema["$defs"]["Waiver"]["properties"]["code"]["enum"] == sorted(codes())
