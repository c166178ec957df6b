"""The CLI reference's exit statuses (rackform/cli/exits.py) against what the code exits with.

Each command module is read, not run: every status it can raise (`typer.Exit(N)`, a module
constant `EXIT_* = N`, or a shared helper of rackform/cli/common.py that exits 2 or 1) must be
declared for one of the module's commands, and every command must declare what the boundary
(rackform/cli/main.py) and its helpers give it."""

from __future__ import annotations

import ast
from pathlib import Path

import typer.main

from rackform.cli.exits import EXITS
from rackform.cli.main import app

CLI = Path(__file__).resolve().parents[2] / "rackform" / "cli"
# rackform/cli/common.py's helpers and the status each exits with.
HELPERS = {"fail": 2, "user_error": 2, "refuse": 2, "for_action": 2, "prepared": 2, "need": 1}


def _commands_by_module() -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}

    def walk(group, prefix=""):
        for name, cmd in group.commands.items():
            if hasattr(cmd, "commands"):
                walk(cmd, f"{prefix}{name} ")
            else:
                out.setdefault(cmd.callback.__module__.rsplit(".", 1)[-1], []).append(prefix + name)

    walk(typer.main.get_command(app))
    return out


def _statuses(module: Path) -> set[int]:
    """Every constant exit status the module's code can raise."""
    tree = ast.parse(module.read_text())
    consts = {"EXIT_INVALID": 2}
    found: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant):
            for t in node.targets:
                if (
                    isinstance(t, ast.Name)
                    and t.id.startswith("EXIT_")
                    and isinstance(node.value.value, int)
                ):
                    consts[t.id] = node.value.value
                    found.add(node.value.value)
        if (
            isinstance(node, ast.ImportFrom)
            and node.module
            and node.module.startswith("rackform.cli.")
        ):
            for alias in node.names:
                if alias.name in HELPERS:
                    found.add(HELPERS[alias.name])
                if alias.name.startswith("EXIT_"):
                    found.add(_imported_const(node.module, alias.name))
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Call)
            and getattr(node.func, "attr", getattr(node.func, "id", "")) == "Exit"
        ):
            for arg in node.args:
                for sub in ast.walk(arg):
                    if isinstance(sub, ast.Constant) and isinstance(sub.value, int):
                        found.add(sub.value)
                    elif isinstance(sub, ast.Name) and sub.id in consts:
                        found.add(consts[sub.id])
    return found


def _imported_const(module: str, name: str) -> int:
    tree = ast.parse((CLI / (module.rsplit(".", 1)[-1] + ".py")).read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and any(
            getattr(t, "id", None) == name for t in node.targets
        ):
            return node.value.value
    raise AssertionError(f"{name} not found in {module}")


def test_every_command_declares_its_exit_statuses():
    commands = [c for cs in _commands_by_module().values() for c in cs]
    assert sorted(commands) == sorted(EXITS), "rackform/cli/exits.py and the commands differ"
    for command, statuses in EXITS.items():
        assert 1 in statuses, f"{command}: the boundary's exit 1 (internal failure) is not declared"


def test_each_status_the_code_exits_with_is_declared():
    undeclared = {}
    for module, commands in _commands_by_module().items():
        declared = {k for c in commands for k in EXITS[c] if isinstance(k, int)}
        missing = _statuses(CLI / f"{module}.py") - declared
        if missing:
            undeclared[module] = sorted(missing)
    assert undeclared == {}, (
        "exit statuses the code raises that rackform/cli/exits.py does not declare"
    )


def test_the_reader_finds_the_statuses_it_should():
    # The reading is not vacuous: reap's constants, diff's new-error status, testbed's literals.
    assert {2, 3, 4, 5} <= _statuses(CLI / "reap_cmd.py")
    assert {1, 2} <= _statuses(CLI / "diff_cmd.py")
    assert {1, 2} <= _statuses(CLI / "testbed_cmd.py")


def test_the_declared_statuses_are_what_commands_exit_with(tmp_path):
    """A few commands run for real: the status each exits with is one the reference declares,
    with the meaning it gives."""
    from typer.testing import CliRunner

    runner = CliRunner()
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: x\npurpose: training\n")
    runs = {
        ("validate", 2): ["validate", str(bad)],
        ("schema", 0): ["schema"],
        ("init", 0): ["init", str(tmp_path / "repo")],
        ("init", 2): ["init", str(tmp_path / "repo")],  # a second run: the files exist
        ("compile", 2): ["compile", str(bad), "-o", str(tmp_path / "out")],
    }
    for (command, want), argv in runs.items():
        r = runner.invoke(app, argv)
        assert r.exit_code == want, (argv, r.output)
        assert want in EXITS[command], f"{command} exits {want}, which exits.py does not declare"
