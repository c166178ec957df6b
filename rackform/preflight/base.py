"""What a preflight rule is and what it finds.

In the manner of aws-parallelcluster's validators: one small class per rule, each with a
stable code and a level, each finding naming the blueprint field, what is wrong (with the
numbers) and how to fix it. A rule reads one compiled `Plan`: every fact it needs (the
workload's sizing, the slowest checkpoint array, the cost, the catalog and preflight figures)
is computed once by compile and carried there; a rule computes only its own comparison, and
never touches the network or a disk. Each rule names its code; its level and summary are data
(`rackform.catalog.codes`).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import ClassVar

from rackform.blueprint.yamlmap import Path
from rackform.catalog.codes import CODES, Level
from rackform.plan.model import Plan

ERROR: Level = "error"
WARNING: Level = "warning"


@dataclass(frozen=True)
class Finding:
    level: Level
    code: str
    path: Path  # into the effective blueprint: where the report locates it in the file
    message: str
    fix: str
    waived: str | None = None  # the waiver's reason, when the blueprint accepts the finding

    @property
    def blocks(self) -> bool:
        """An unwaived error stops `validate` and `plan`."""
        return self.level == ERROR and self.waived is None


class Rule:
    """One check. Subclasses set `code` (a key of `CODES`, which gives its level and summary)
    and implement `check`, which reads the plan and yields findings."""

    code: ClassVar[str]
    level: ClassVar[Level]
    summary: ClassVar[str]  # one line, for the README and `--help`
    # The target whose plans the rule reads (a target's own rule); None: every plan.
    target: ClassVar[str | None] = None

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        if cls.code not in CODES:
            raise TypeError(f"{cls.__name__}: code {cls.code!r} is not in catalog/codes.py")
        cls.level, cls.summary = CODES[cls.code]

    def check(self, plan: Plan) -> Iterable[Finding]:
        raise NotImplementedError

    def finding(self, path: Path, message: str, fix: str) -> Finding:
        return Finding(self.level, self.code, path, message, fix)


def group_path(plan: Plan, index: int) -> Path:
    """The field that chose a group's GPU: instance_type on AWS, gpu elsewhere."""
    field = "instance_type" if plan.node_groups[index].instance else "gpu"
    return ("node_groups", index, field)


def gb(value: float) -> str:
    """GB for messages: 0.64 GB, 16.4 GB, 1120 GB."""
    if value >= 100:
        return f"{value:,.0f} GB"
    return f"{value:.1f} GB" if value >= 1 else f"{value:.2f} GB"
