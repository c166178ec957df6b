"""Run every rule over one compiled plan, apply its waivers, and locate the findings in the file
(through the effective blueprint's own record of where each value came from: the file is
neither read nor merged again). The report carries the cost the plan was priced at."""

from __future__ import annotations

from dataclasses import dataclass, replace

from rackform.blueprint.problems import dotted
from rackform.plan.model import Plan
from rackform.plan.pricing import Cost
from rackform.preflight.base import Finding
from rackform.preflight.registry import RULES


@dataclass(frozen=True)
class LocatedFinding:
    """A finding as a user sees it: FILE:LINE:COL, the field, the level and code, the message
    and how to fix it (or the reason it is waived)."""

    file: str
    line: int
    col: int
    env: str  # "" for the base blueprint
    finding: Finding

    def __str__(self) -> str:
        f = self.finding
        path = dotted(f.path) + (f" [env {self.env}]" if self.env else "")
        head = f"{self.file}:{self.line}:{self.col}: {path}: "
        if f.waived is not None:
            return f"{head}waived {f.level} {f.code}: {f.message} (waived: {f.waived})"
        return f"{head}{f.level} {f.code}: {f.message} (fix: {f.fix})"

    def as_dict(self) -> dict:
        f = self.finding
        return {
            "level": f.level,
            "code": f.code,
            "path": dotted(f.path),
            "message": f.message,
            "fix": f.fix,
            "waived": f.waived is not None,
            "waiver_reason": f.waived,
            "file": self.file,
            "line": self.line,
            "col": self.col,
            "env": self.env,
        }


@dataclass(frozen=True)
class Report:
    findings: tuple[LocatedFinding, ...]
    cost: Cost

    @property
    def blocked(self) -> bool:
        """True when an unwaived error stops the blueprint."""
        return any(lf.finding.blocks for lf in self.findings)

    def as_dict(self) -> dict:
        """The `findings` and `cost` members of a command's `--json` output."""
        return {
            "findings": [lf.as_dict() for lf in self.findings],
            "cost": self.cost.as_dict(),
        }


def findings(plan: Plan) -> list[Finding]:
    """Every rule's findings, with the plan's waivers applied."""
    return [
        replace(f, waived=plan.waivers.get(f.code))
        for rule in RULES
        if rule.target in (None, plan.target_type)
        for f in rule.check(plan)
    ]


def run(plan: Plan) -> Report:
    """Findings located in the blueprint file (the only use preflight makes of the effective
    blueprint), and the plan's cost."""
    eff = plan.effective
    located = []
    for f in findings(plan):
        loc = eff.locate(f.path)
        located.append(LocatedFinding(eff.source, loc.line, loc.col, eff.env_label, f))
    return Report(tuple(located), plan.cost)
