"""What `rackform init` writes, as file contents: the Pulumi project and its thin program, one
blueprint for the chosen target and purpose with the stack config of each of its environments,
the blueprint JSON Schema wired to the editor, `.gitignore`, `requirements.txt` and a README of
the next commands.

The blueprints are each target's (`init/<purpose>.yaml` beside its compiler, with what the
compiler says of it), the other files templates shipped here (`templates/`); everything derived from a
blueprint (its stack configs, the README's names) comes from the engine's plan of it, so `init`
cannot write a stack config the program would read differently."""

from __future__ import annotations

import re
import tempfile
from pathlib import Path

import yaml

from rackform import __version__
from rackform.blueprint.schema.jsonschema import schema_json
from rackform.engine import prepare_all
from rackform.plan.model import Plan, thaw
from rackform.plan.targets.compilers import COMPILERS

TEMPLATES = Path(__file__).resolve().parent / "templates"
TARGETS = tuple(COMPILERS)  # each target's compiler has its blueprints under init/
PURPOSES = ("training", "inference")
SCHEMA = "blueprints/schema.json"
# Destination -> template (the package keeps no dot-files and no second __main__.py).
FIXED = {
    "Pulumi.yaml": "Pulumi.yaml",
    "__main__.py": "program.py",
    "requirements.txt": "requirements.txt",
    ".gitignore": "gitignore",
    ".vscode/settings.json": "vscode-settings.json",
    "README.md": "README.md",
}
MODELINE = f"# yaml-language-server: $schema={Path(SCHEMA).name}\n"
STACK_HEADER = (
    "# Stack config of {source}, environment {env} (`rackform compile` writes the same).\n"
)
_PLACEHOLDER = re.compile(r"\{\{(\w+)\}\}")


class InitError(Exception):
    """A mistake in what `init` was asked for (one line)."""


def choose(value: str, valid: tuple[str, ...], what: str) -> str:
    """`value` when it is one of `valid`, else InitError naming the valid ones."""
    if value not in valid:
        raise InitError(f"unknown {what} {value!r} (valid: {', '.join(valid)})")
    return value


def project_name(directory: Path) -> str:
    """The Pulumi project's name, from the directory's (the characters Pulumi allows)."""
    name = re.sub(r"[^A-Za-z0-9_.-]+", "-", directory.resolve().name).strip("-.")
    return name or "gpu-clusters"


def requirement(version: str = __version__) -> str:
    """The pinned requirement; a source tree that was never installed has no version to pin."""
    return "rackform[deploy]" if "+" in version else f"rackform[deploy]=={version}"


def fill(text: str, values: dict[str, str]) -> str:
    """Replace every `{{key}}`; a key without a value is a bug in the templates."""
    return _PLACEHOLDER.sub(lambda m: values[m.group(1)], text)


def blueprint_template(target: str, purpose: str) -> str:
    choose(target, tuple(COMPILERS), "target")
    choose(purpose, PURPOSES, "purpose")
    return MODELINE + COMPILERS[target].init_template(purpose).read_text(encoding="utf-8")


def stack_file(plan: Plan) -> str:
    source = plan.stack_config["rackform:blueprint"]
    head = STACK_HEADER.format(source=source, env=plan.environment)
    return head + yaml.safe_dump({"config": thaw(plan.stack_config)}, sort_keys=False)


def plans(blueprint: str, rel: str) -> list[Plan]:
    """Every environment's plan of the blueprint as the created repository's program sees it:
    compiled at `rel` inside a scratch project. A template that preflight blocks is a bug."""
    with tempfile.TemporaryDirectory(prefix="rackform-init-") as scratch:
        path = Path(scratch) / rel
        path.parent.mkdir(parents=True)
        path.write_text(blueprint, encoding="utf-8")
        prepared = prepare_all(path, project=Path(scratch))
    blocked = [p.plan.environment for p in prepared if p.blocked]
    if blocked:
        raise RuntimeError(f"the init template is blocked by preflight in {blocked}")
    return [p.plan for p in prepared]


def render(directory: Path, target: str = "aws", purpose: str = "training") -> dict[str, str]:
    """Relative path -> content of every file `init` writes into `directory`."""
    text = blueprint_template(target, purpose)
    blueprint = f"blueprints/{yaml.safe_load(text)['name']}.yaml"
    # The base blueprint, then each environment (every template names some: dev first).
    base, *envs = plans(text, blueprint)
    values = {
        "project": project_name(directory),
        "version": __version__,
        "requirement": requirement(),
        "schema": SCHEMA,
        "blueprint": blueprint,
        "cluster": base.name,
        "purpose": purpose,
        "target": COMPILERS[target].label,
        "target_notes": COMPILERS[target].init_notes,
        "envs": ", ".join(p.environment for p in envs),
        "env": envs[0].environment,
        "stack": envs[0].stack,
    }
    values["after_up"] = fill(COMPILERS[target].after_up, values)  # it names the blueprint too
    files = {
        dest: fill((TEMPLATES / name).read_text(encoding="utf-8"), values)
        for dest, name in FIXED.items()
    }
    files[blueprint] = text
    files[SCHEMA] = schema_json()
    for p in envs:
        files[f"stacks/Pulumi.{p.stack}.yaml"] = stack_file(p)
    return files
