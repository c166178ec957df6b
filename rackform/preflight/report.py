"""Run every rule over one effective blueprint, apply its waivers, locate the findings in the
file and price the cluster."""

from __future__ import annotations

from dataclasses import dataclass, replace

from rackform.cost import Cost, estimate
from rackform.environments import merge
from rackform.loader import DEFAULT_ENV, Effective, environments, read
from rackform.preflight.base import Context, Finding
from rackform.preflight.registry import RULES
from rackform.problems import dotted
from rackform.yamlmap import Loc, Located, Path


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


def findings(effective: Effective, ctx: Context | None = None) -> list[Finding]:
    """Every rule's findings, with the blueprint's waivers applied."""
    ctx = ctx or Context.of(effective)
    waived = {w.code: w.reason for w in effective.blueprint.waivers}
    out = []
    for rule in RULES:
        for f in rule.check(ctx):
            out.append(replace(f, waived=waived.get(f.code)))
    return out


class Locator:
    """Maps a path in an effective blueprint to where the user wrote it: the environment's
    override when it set the value, else the base."""

    def __init__(self, doc: Located):
        self.doc = doc
        self._origins: dict[str, dict[Path, Path]] = {}

    def _origin(self, env: str) -> dict[Path, Path]:
        if env not in self._origins:
            data = self.doc.data
            override = data["environments"][env] or {}
            base = {k: v for k, v in data.items() if k != "environments"}
            rest = {k: v for k, v in override.items() if k != "environments"}
            self._origins[env] = merge(base, rest, ("environments", env))[1]
        return self._origins[env]

    def locate(self, env: str, path: Path) -> Loc:
        raw = path
        if env:
            origin = self._origin(env)
            for cut in range(len(path), -1, -1):  # nearest ancestor whose origin is known
                if path[:cut] in origin:
                    raw = origin[path[:cut]] + path[cut:]
                    break
        return self.doc.locate(raw)


def run(effective: Effective, locator: Locator | None = None) -> Report:
    """Findings located in the blueprint file, and the cost. Pass a `Locator` to share one
    parse of the file between its environments."""
    locator = locator or Locator(read(effective.source))
    env = effective.environment
    if env == DEFAULT_ENV and env not in environments(locator.doc):
        env = ""
    ctx = Context.of(effective)
    located = []
    for f in findings(effective, ctx):
        loc = locator.locate(env, f.path)
        located.append(LocatedFinding(effective.source, loc.line, loc.col, env, f))
    return Report(tuple(located), estimate(ctx))
