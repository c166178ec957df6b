"""What every command shares: the `FILE` and `--env` arguments, the engine call, and printing
problems with the right exit status. A command parses and prints; the work is the engine's."""

from __future__ import annotations

import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Annotated

import typer
import yaml

from rackform.blueprint.problems import BlueprintError, Problem
from rackform.engine import Blocked, Prepared, prepare, prepare_many, require_clear
from rackform.telemetry.prometheus import Prometheus, TelemetryError

EXIT_INVALID = 2
# Some node configured at boot did not pass (`boot serve`, `up`): each is named, with what to do.
EXIT_NOT_VALIDATED = 3

File = Annotated[Path, typer.Argument(help="Blueprint file.", show_default=False)]
Env = Annotated[
    str | None,
    typer.Option(
        "--env",
        "-e",
        help="Environment: a name under `environments`, or default (the base blueprint, "
        "also when not given).",
    ),
]

# How the commands after `up` reach Slurm's controller and the nodes over SSH (without them,
# ssh's own keys and known_hosts): on AWS the stack's, from `pulumi stack output ssh_access
# --show-secrets`.
PrivateKey = Annotated[
    Path | None,
    typer.Option("--private-key", help="SSH key for Slurm's controller (and the nodes)."),
]
KnownHosts = Annotated[
    Path | None,
    typer.Option("--known-hosts", help="known_hosts file for Slurm's controller (and the nodes)."),
]

# The options of every command that reads Prometheus (reap, heal), and its client from them.
PrometheusUrl = Annotated[
    str, typer.Option("--prometheus", help="Prometheus base URL, e.g. http://prom:9090.")
]
PrometheusTimeout = Annotated[
    float, typer.Option("--timeout", help="Seconds to wait for Prometheus.", min=0.1)
]
PrometheusCa = Annotated[
    str | None,
    typer.Option(
        "--prometheus-ca",
        help="CA file for an https Prometheus (default $RACKFORM_PROMETHEUS_CA); a token "
        "or basic auth comes from $RACKFORM_PROMETHEUS_TOKEN or "
        "$RACKFORM_PROMETHEUS_USER/$RACKFORM_PROMETHEUS_PASSWORD.",
    ),
]


def prometheus_client(url: str, timeout: float, ca: str | None) -> Prometheus:
    """The client, or exit 2 naming what is wrong with the URL or the CA file."""
    try:
        return Prometheus(url, timeout, ca)
    except TelemetryError as exc:
        raise user_error(str(exc)) from None


def need(module: str, command: str, extra: str = "deploy") -> None:
    """Exit 1 with the install line when `module` (of `extra`) is not installed."""
    import importlib.util

    try:
        found = importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):  # a parent package is missing, or a module set to None
        found = False
    if not found:
        print(
            f"rackform: `{command}` needs {module}, from the {extra} extra "
            f"(pip install 'rackform[{extra}]')",
            file=sys.stderr,
        )
        raise typer.Exit(1)


def fail(problems: Iterable[Problem]) -> typer.Exit:
    """Print one line per problem on stderr; return the Exit to raise (status 2)."""
    for p in problems:
        print(p, file=sys.stderr)
    return typer.Exit(EXIT_INVALID)


def user_error(message: str) -> typer.Exit:
    print(f"rackform: {message}", file=sys.stderr)
    return typer.Exit(EXIT_INVALID)


def refuse(exc: Blocked, what: str) -> typer.Exit:
    """A blocked blueprint: its located preflight errors, then what was not done."""
    for line in exc.lines:
        print(line, file=sys.stderr)
    for p in exc.prepared:
        eff = p.plan.effective
        print(
            f"{eff.source}: preflight errors (env {eff.environment}): {what}; fix the blueprint "
            "or waive the finding with a reason (`waivers:`)",
            file=sys.stderr,
        )
    return typer.Exit(EXIT_INVALID)


def prepared(file: Path, env: str | None) -> Prepared:
    """The engine's compiled and checked plan, or exit 2 with the located problems."""
    try:
        return prepare(file, env)
    except BlueprintError as exc:
        raise fail(exc.problems) from None


def for_action(file: Path, env: str | None, what: str) -> Prepared:
    """`prepared`, refusing a blueprint with an unwaived preflight error (`what` says what was
    not done)."""
    p = prepared(file, env)
    try:
        require_clear(p)
    except Blocked as exc:
        raise refuse(exc, what) from None
    return p


def prepare_files(files: list[Path], env: str | None) -> list[tuple[Path, list[Prepared]]]:
    """Every file's environments (or `env`), or every file's problems and exit 2: nothing is
    done with some files when another is wrong."""
    try:
        return prepare_many(files, env)
    except BlueprintError as exc:
        raise fail(exc.problems) from None


def extra_vars_of(pairs: list[str]) -> dict:
    """`-e KEY=VALUE` (VALUE parsed as YAML, so true/12/[a] keep their types) or `-e @FILE`."""
    out: dict = {}
    for pair in pairs:
        if pair.startswith("@"):
            try:
                loaded = yaml.safe_load(Path(pair[1:]).read_text(encoding="utf-8"))
            except (OSError, yaml.YAMLError) as exc:
                raise typer.BadParameter(f"{pair[1:]}: {exc}", param_hint="--extra-vars") from None
            if not isinstance(loaded, dict):
                raise typer.BadParameter(f"{pair[1:]}: not a mapping", param_hint="--extra-vars")
            out.update(loaded)
            continue
        key, sep, value = pair.partition("=")
        if not sep or not key.isidentifier():
            raise typer.BadParameter(f"{pair!r} is not KEY=VALUE", param_hint="--extra-vars")
        out[key] = yaml.safe_load(value) if value else ""
    return out
