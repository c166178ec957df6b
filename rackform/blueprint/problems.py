"""Located problems: what a user sees when a blueprint is wrong."""

from __future__ import annotations

from dataclasses import dataclass

from rackform.blueprint.yamlmap import Path


def dotted(path: Path) -> str:
    out = ""
    for step in path:
        out += f"[{step}]" if isinstance(step, int) else (f".{step}" if out else str(step))
    return out or "(root)"


@dataclass(frozen=True)
class Problem:
    file: str
    line: int | None
    col: int | None
    path: str
    message: str
    fix: str = ""
    level: str = "error"
    env: str = ""  # the environment whose effective blueprint showed the problem

    def __str__(self) -> str:
        where = self.file if self.line is None else f"{self.file}:{self.line}:{self.col}"
        path = f"{self.path} [env {self.env}]" if self.env else self.path
        text = f"{where}: {path}: {self.message}" if path else f"{where}: {self.message}"
        return f"{text} (fix: {self.fix})" if self.fix else text

    def as_dict(self) -> dict:
        return {
            "file": self.file,
            "line": self.line,
            "col": self.col,
            "path": self.path,
            "level": self.level,
            "message": self.message,
            "fix": self.fix,
            "env": self.env,
        }


class BlueprintError(Exception):
    """A user mistake in a blueprint: every problem found, each located."""

    def __init__(self, problems: list[Problem]):
        self.problems = problems
        super().__init__("\n".join(map(str, problems)))
