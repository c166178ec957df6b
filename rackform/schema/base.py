"""The base model every blueprint section derives from, and the way cross-field rules report
problems at an exact field path."""

from __future__ import annotations

from dataclasses import dataclass

from pydantic import BaseModel, ConfigDict

Path = tuple[str | int, ...]


class Strict(BaseModel):
    """extra="forbid" catches typo'd YAML keys; frozen because a blueprint is a value."""

    model_config = ConfigDict(extra="forbid", frozen=True, validate_default=True)


@dataclass(frozen=True)
class Violation:
    """One broken cross-field rule: where (relative to the model that checked it), what, and
    how to fix it."""

    path: Path
    message: str
    fix: str = ""


class RuleViolations(ValueError):
    """Raised by `mode="after"` validators. pydantic keeps the exception in the error's context,
    so the loader can expand it into one located problem per violation."""

    def __init__(self, violations: list[Violation]):
        self.violations = violations
        super().__init__("; ".join(v.message for v in violations))


def check(violations: list[Violation]) -> None:
    if violations:
        raise RuleViolations(violations)
