"""Waivers: a blueprint may accept a preflight finding by its code, saying why.

The codes belong to the preflight rules (`rackform.preflight.registry`). They are looked up
when a waiver is validated or the JSON Schema is generated, not at import time, because the
rules themselves are written against this schema.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import Field, field_validator

from rackform.schema.base import RuleViolations, Strict, Violation, closest


def waivable_codes() -> dict[str, str]:
    """Every preflight code and its level."""
    from rackform.preflight.registry import codes

    return codes()


def _enum(schema: dict[str, Any]) -> None:
    schema["enum"] = sorted(waivable_codes())


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
        known = waivable_codes()
        if v not in known:
            raise RuleViolations(
                [Violation((), f"unknown preflight code {v!r}", closest(v, list(known)))]
            )
        return v

    @field_validator("reason")
    @classmethod
    def _said(cls, v: str) -> str:
        if not v.strip():
            raise ValueError("a waiver needs a reason")
        return v.strip()


def duplicate_waivers(waivers: tuple[Waiver, ...]) -> list[Violation]:
    seen: set[str] = set()
    out = []
    for i, w in enumerate(waivers):
        if w.code in seen:
            out.append(
                Violation(
                    ("waivers", i, "code"),
                    f"{w.code!r} is waived twice",
                    "keep one waiver per code",
                )
            )
        seen.add(w.code)
    return out
