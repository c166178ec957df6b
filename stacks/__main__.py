"""The Pulumi program: read the stack config, load and compile the blueprint, build the cluster.
Everything else lives in `rackform.pulumi` (see rackform/pulumi/program.py)."""

from pathlib import Path

import pulumi

from rackform.blueprint.loader import load_effective
from rackform.blueprint.problems import BlueprintError
from rackform.stack.config import environment_arg, resolve_blueprint
from rackform.stack.errors import ProgramError
from rackform.stack.program import build

ROOT = Path(__file__).resolve().parent.parent  # the repository root, where Pulumi.yaml is

config = pulumi.Config("rackform")
blueprint = resolve_blueprint(config.require("blueprint"), ROOT)
try:
    effective = load_effective(blueprint, environment_arg(config.get("environment")))
    build(effective, ROOT)
except BlueprintError as exc:
    raise pulumi.RunError("\n".join(map(str, exc.problems))) from None
except ProgramError as exc:
    fix = f" (fix: {exc.fix})" if exc.fix else ""
    where = ".".join(map(str, exc.path))
    raise pulumi.RunError(f"{blueprint}: {where}: {exc.message}{fix}") from None
