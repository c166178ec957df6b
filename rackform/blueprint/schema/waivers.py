"""Waivers: a blueprint may accept a preflight finding by its code, saying why.

The codes are data (`rackform.catalog.codes`), the same table the rules take their level and
summary from, so the schema checks a waiver without importing any rule.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import Field, field_validator

from rackform.blueprint.schema.base import RuleViolations, Strict, Violation, closest, repeated
from rackform.catalog.codes import CODES


def _enum(schema: dict[str, Any]) -> None:
    schema["enum"] = sorted(CODES)


class Waiver(Strict):
    code: Annotated[
        str,
        Field(
            description="The preflight finding's code (`rackform validate` prints it).",
            json_schema_extra=_enum,
        ),
    ]
    reason: Annotated[
        str,
        Field(
            description="Why the finding is accepted; every report shows it.",
            min_length=10,
        ),
    ]

    @field_validator("code")
    @classmethod
    def _known(cls, v: str) -> str:
        if v not in CODES:
            raise RuleViolations(
                [Violation((), f"unknown preflight code {v!r}", closest(v, list(CODES)))]
            )
        return v

    @field_validator("reason")
    @classmethod
    def _said(cls, v: str) -> str:
        if not v.strip():
            raise ValueError("a waiver needs a reason")
        return v.strip()


def duplicate_waivers(waivers: tuple[Waiver, ...]) -> list[Violation]:
    return [
        Violation(
            ("waivers", i, "code"),
            f"{waivers[i].code!r} is waived twice",
            "keep one waiver per code",
        )
        for i in repeated(w.code for w in waivers)
    ]
