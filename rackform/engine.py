"""The one path from a blueprint file to anything that touches the world:

    load -> effective blueprint per environment -> compile to one frozen Plan -> preflight(Plan)

It is also the one place a target's layers meet: the schema's, compile's and the running
world's registries each know one layer of every target; compile takes the first two, and
`target` below puts the three parts of one target together for the Pulumi program.

Every command (`validate`, `plan`, `compile`, `configure`, `smoke`, `up`, `preview`, `destroy`,
`testbed`) and the Pulumi program start here; none reads the file or merges environments itself.
What acts on a cluster calls `require_clear` first, so a blueprint with an unwaived preflight error
is refused everywhere with the same located lines `validate` prints.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from pathlib import Path

from rackform.blueprint.loader import Effective, environment_name, load_all, load_effective
from rackform.blueprint.problems import BlueprintError, Problem
from rackform.blueprint.repository import siblings
from rackform.blueprint.targets.schemas import SCHEMAS
from rackform.paths import project_root
from rackform.plan.compile import compile_plan
from rackform.plan.interval import Measured
from rackform.plan.model import Plan
from rackform.plan.targets.compilers import COMPILERS
from rackform.preflight.prepared import Prepared
from rackform.preflight.report import run
from rackform.targets.runtimes import RUNTIMES
from rackform.targets.target import Target


class Blocked(Exception):
    """An unwaived preflight error: the blueprint may not be acted on. `lines` are the located
    findings, exactly as `rackform validate` prints them."""

    def __init__(self, prepared: Sequence[Prepared]):
        self.prepared = list(prepared)
        self.lines = [str(lf) for p in self.prepared for lf in p.blocking]
        super().__init__("\n".join(self.lines))


def target(target_type: str) -> Target:
    """The three parts of one target, from the three registries (the Pulumi program builds the
    cluster with its runtime)."""
    return Target(SCHEMAS[target_type], COMPILERS[target_type], RUNTIMES[target_type])


def compile_effective(
    effective: Effective, project: Path | None = None, measured: Measured | None = None
) -> Plan:
    """The effective blueprint compiled with its own target's parts, in the Pulumi project
    holding it unless `project` says another (`rackform.paths.project_root`), with the
    blueprints beside it where its target's rules count them, and what the cluster `measured`
    of itself where the caller read it: what compile knows of the disk."""
    here, kind = effective.path.parent, effective.blueprint.target.type
    compiler = COMPILERS[kind]
    return compile_plan(
        effective,
        SCHEMAS[kind],
        compiler,
        project or project_root(here),
        siblings(here) if compiler.reads_siblings else (),
        measured,
    )


def _prepare(plan: Plan) -> Prepared:
    return Prepared(plan, run(plan))


def prepare(
    file: str | Path,
    env: str | None = None,
    *,
    project: Path | None = None,
    measured: Measured | None = None,
) -> Prepared:
    """One environment (None or "default": the base blueprint), with what the cluster
    `measured` of itself where given (its checkpoint interval's inputs). Raises BlueprintError
    with every located problem when the file is not a valid blueprint."""
    effective = load_effective(file, environment_name(env))
    return _prepare(compile_effective(effective, project, measured))


def prepare_all(file: str | Path, *, project: Path | None = None) -> list[Prepared]:
    """The base blueprint and every environment, from one read of the file."""
    return [_prepare(compile_effective(e, project)) for e in load_all(file)]


class NotAllPrepared(BlueprintError):
    """Some of several files are not valid blueprints: `problems` holds every file's, and
    `by_file` what each file prepared to (None for a file that did not), so a command that
    reports per file (validate) still reports the good ones."""

    def __init__(self, problems: list[Problem], by_file: list[tuple[Path, list[Prepared] | None]]):
        super().__init__(problems)
        self.by_file = by_file


def prepare_many(
    files: Sequence[str | Path], env: str | None = None, *, project: Path | None = None
) -> list[tuple[Path, list[Prepared]]]:
    """Each file, in every environment (or only `env`), in the order given. A mistake in one
    file does not hide another's: every file is tried, and NotAllPrepared (a BlueprintError)
    carries every file's located problems at once."""
    by_file: list[tuple[Path, list[Prepared] | None]] = []
    problems: list[Problem] = []
    for f in files:
        try:
            one = [prepare(f, env, project=project)] if env else prepare_all(f, project=project)
        except BlueprintError as exc:
            problems += exc.problems
            by_file.append((Path(f), None))
        else:
            by_file.append((Path(f), one))
    if problems:
        raise NotAllPrepared(problems, by_file)
    return [(f, ps) for f, ps in by_file if ps is not None]


def require_clear(*prepared: Prepared) -> None:
    """Raise Blocked when any of them has an unwaived preflight error."""
    blocked = [p for p in prepared if p.blocked]
    if blocked:
        raise Blocked(blocked)


def with_capacity(prepared: Prepared, capacity: object | None) -> Prepared:
    """`prepared` checked again with what the cloud says of its capacity (the runtime's
    `capacity`, read at `up`): its capacity rules find what the offline check could not.
    Raises Blocked on an unwaived error; the same plan where there was nothing to read."""
    if capacity is None:
        return prepared
    plan = dataclasses.replace(prepared.plan, capacity=capacity)
    checked = Prepared(plan, run(plan))
    require_clear(checked)
    return checked


def for_action(
    file: str | Path, env: str | None = None, *, project: Path | None = None
) -> Prepared:
    """`prepare`, refusing a blocked blueprint: what every command that acts calls."""
    prepared = prepare(file, env, project=project)
    require_clear(prepared)
    return prepared
