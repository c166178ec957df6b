"""One environment of one blueprint, compiled and checked: its plan and its preflight report."""

from __future__ import annotations

from dataclasses import dataclass

from rackform.plan.model import Plan
from rackform.preflight.report import LocatedFinding, Report


@dataclass(frozen=True)
class Prepared:
    plan: Plan
    report: Report

    @property
    def blocked(self) -> bool:
        return self.report.blocked

    @property
    def blocking(self) -> list[LocatedFinding]:
        return [lf for lf in self.report.findings if lf.finding.blocks]
