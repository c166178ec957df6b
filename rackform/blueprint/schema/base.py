"""The base model every blueprint section derives from, and the way cross-field rules report
problems at an exact field path."""

from __future__ import annotations

import difflib
import ipaddress
from collections.abc import Hashable, Iterable
from dataclasses import dataclass
from typing import Annotated

from pydantic import AfterValidator, BaseModel, ConfigDict

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


def repeated(keys: Iterable[Hashable]) -> list[int]:
    """The position of every key that an earlier one already had: where a list that must hold
    each name (or code) once names one again."""
    seen: set[Hashable] = set()
    out = []
    for i, key in enumerate(keys):
        if key in seen:
            out.append(i)
        seen.add(key)
    return out


def closest(word: str, choices: list[str]) -> str:
    """A fix hint: the nearest valid choice, or the list of them."""
    near = difflib.get_close_matches(word, choices, n=1, cutoff=0.5)
    return f"did you mean {near[0]!r}?" if near else "one of: " + ", ".join(sorted(choices))


def _cidr(value: str) -> str:
    try:
        return str(ipaddress.ip_network(value, strict=True))
    except ValueError as exc:
        raise ValueError(f"{value!r} is not a valid CIDR ({exc}); write e.g. 10.20.0.0/16") from exc


Cidr = Annotated[str, AfterValidator(_cidr)]
