"""`rackform init`: the repository it creates works from its own directory for every target and
purpose (validate, plan, compile, the Pulumi program under Pulumi's mocks, `up` without and with
a Pulumi CLI); its files say what they claim (schema, editor wiring, pin, README commands); it
never overwrites a file, and a mistake writes nothing."""

from __future__ import annotations

import contextlib
import fnmatch
import json
import os
import re
import runpy
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import fake_pulumi
import pytest
import typer.main
import yaml
from blueprint_helpers import rackform
from typer.testing import CliRunner

from rackform import __version__
from rackform.blueprint.schema.jsonschema import schema_json
from rackform.blueprint.targets.schemas import SCHEMAS
from rackform.cli.main import app
from rackform.engine import prepare
from rackform.init.repo import PURPOSES, TARGETS, render, requirement
from rackform.init.write import write_new
from rackform.stack.offline import record, record_program
from rackform.targets.runtimes import runtime

COMBOS = [(t, p) for t in TARGETS for p in PURPOSES]
LAYOUT = {
    "Pulumi.yaml",
    "__main__.py",
    "requirements.txt",
    ".gitignore",
    ".vscode/settings.json",
    "README.md",
    "blueprints/schema.json",
}


def files_in(root: Path) -> set[str]:
    return {p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file()}


def blueprint_of(root: Path) -> str:
    (bp,) = (p for p in files_in(root) if p.startswith("blueprints/") and p.endswith(".yaml"))
    return bp


def make(root: Path, target: str = "aws", purpose: str = "training") -> Path:
    write_new(root, render(root, target, purpose))
    return root


def lines(text: str) -> list[str]:
    return text.strip().splitlines()


@pytest.mark.parametrize(("target", "purpose"), COMBOS)
def test_the_new_repository_validates_plans_and_compiles_from_its_directory(
    tmp_path, target, purpose
):
    r = rackform("init", "clusters", "--target", target, "--purpose", purpose, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    repo = tmp_path / "clusters"
    bp = blueprint_of(repo)
    stacks = {p for p in files_in(repo) if p.startswith("stacks/")}
    assert files_in(repo) == LAYOUT | {bp} | stacks
    assert lines(r.stdout)[:-1] == [f"clusters/{p}" for p in render(repo, target, purpose)]
    assert lines(r.stdout)[-1].startswith(f"next: cd clusters && rackform validate {bp}")

    r = rackform("validate", bp, "--json", cwd=repo)
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["valid"] and doc["problems"] == []
    assert [f for f in doc["findings"] if not f["waived"]] == []  # not even a warning
    envs = [e["name"] for e in doc["files"][0]["environments"]]
    assert envs == ["default", "dev", "prod"]
    # Each named environment has its stack config, and plans and compiles from here.
    for env in envs[1:]:
        plan = rackform("plan", bp, "--env", env, "--json", cwd=repo)
        assert plan.returncode == 0, plan.stderr
        doc = json.loads(plan.stdout)
        assert not doc["blocked"] and len(doc["resources"]) > 3
        stack = doc["stack"]
        assert f"stacks/Pulumi.{stack}.yaml" in stacks
        done = rackform("compile", bp, "--env", env, cwd=repo)
        assert done.returncode == 0, done.stderr
        compiled = yaml.safe_load((repo / "build" / f"Pulumi.{stack}.yaml").read_text())
        committed = yaml.safe_load((repo / "stacks" / f"Pulumi.{stack}.yaml").read_text())
        assert committed == compiled
        assert committed["config"]["rackform:blueprint"] == bp
    assert len(stacks) == len(envs) - 1


@pytest.mark.parametrize(("target", "purpose"), COMBOS)
def test_the_new_program_under_pulumi_mocks_registers_what_plan_shows(tmp_path, target, purpose):
    repo = make(tmp_path / "r", target, purpose)
    program = repo / "__main__.py"
    for stack_file in sorted((repo / "stacks").glob("Pulumi.*.yaml")):
        config = yaml.safe_load(stack_file.read_text())["config"]
        stack = stack_file.name.removeprefix("Pulumi.").removesuffix(".yaml")
        from_program = record_program(lambda: runpy.run_path(str(program)), stack, config)
        plan = prepare(repo / config["rackform:blueprint"], config["rackform:environment"]).plan
        assert plan.project == repo.resolve()  # the new repository is its own Pulumi project
        assert plan.stack == stack

        def view(records):
            return [(r.type, r.name, r.parent, r.inputs, r.dependencies) for r in records]

        assert view(from_program) == view(record(plan, runtime(plan.target_type)))
        assert len(from_program) > 3


def test_up_and_preview_without_the_pulumi_cli_say_so_in_one_line(tmp_path):
    repo = make(tmp_path / "r")
    empty = tmp_path / "bin"
    empty.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PULUMI_", "RACKFORM_"))}
    for command in ("up", "preview"):
        r = subprocess.run(
            [sys.executable, "-m", "rackform", command, blueprint_of(repo), "--env", "dev"],
            cwd=repo,
            env={**env, "PATH": str(empty)},
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert r.returncode == 2
        (line,) = lines(r.stderr)
        assert line.startswith("rackform: the pulumi CLI is not on PATH; install it")


def test_up_runs_pulumi_in_the_new_repository_from_anywhere(tmp_path):
    # From another directory, `up` finds the repository holding the blueprint as its project
    # and gives Pulumi the same stack config the repository commits.
    repo = make(tmp_path / "r")
    bin_dir = tmp_path / "fakebin"
    fake_pulumi.install(bin_dir)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    r = subprocess.run(
        [sys.executable, "-m", "rackform", "up", str(repo / blueprint_of(repo)), "--env", "dev"],
        cwd=elsewhere,
        env=fake_pulumi.environ(bin_dir, tmp_path),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 0, r.stderr
    calls = [json.loads(x) for x in (tmp_path / "pulumi.log").read_text().splitlines()]
    up = next(c for c in calls if "up" in c["argv"])
    assert Path(up["cwd"]) == repo
    stack = up["argv"][up["argv"].index("--stack") + 1]
    config = next(c["argv"] for c in calls if "set-all" in c["argv"])
    committed = yaml.safe_load((repo / "stacks" / f"Pulumi.{stack}.yaml").read_text())
    for key, value in committed["config"].items():
        assert f"{key}={value}" in config


def test_the_project_files_are_a_python_pulumi_project_running_the_installed_rackform(tmp_path):
    repo = make(tmp_path / "gpu clusters!")
    project = yaml.safe_load((repo / "Pulumi.yaml").read_text())
    assert project["name"] == "gpu-clusters"  # from the directory, in Pulumi's characters
    assert project["runtime"] == {
        "name": "python",
        "options": {"toolchain": "pip", "virtualenv": ".venv"},
    }
    assert "main" not in project  # the program and requirements.txt sit beside Pulumi.yaml
    assert (repo / project["stackConfigDir"]).is_dir()
    program = (repo / "__main__.py").read_text()
    assert "from rackform.stack.program import main" in program
    assert len(program.splitlines()) < 12  # thin: no engine code copied in
    pins = [x for x in lines((repo / "requirements.txt").read_text()) if not x.startswith("#")]
    assert pins == [f"rackform[deploy]=={__version__}"]
    ignored = lines((repo / ".gitignore").read_text())
    assert {".venv/", "build/", "reports/"} <= set(ignored)


def test_requirement_pins_a_released_version_only():
    assert requirement("1.2.3") == "rackform[deploy]==1.2.3"
    assert requirement("0.0.0+source") == "rackform[deploy]"  # nothing installable to pin


def test_the_schema_is_wired_to_editors(tmp_path):
    repo = make(tmp_path / "r", "colocation", "inference")
    bp = repo / blueprint_of(repo)
    schema = repo / "blueprints" / "schema.json"
    assert schema.read_text() == schema_json()  # what `rackform schema` prints
    first = bp.read_text().splitlines()[0]
    modeline = re.fullmatch(r"# yaml-language-server: \$schema=(\S+)", first)
    assert modeline and (bp.parent / modeline[1]).resolve() == schema.resolve()
    settings = json.loads((repo / ".vscode" / "settings.json").read_text())
    ((path, glob),) = settings["yaml.schemas"].items()
    assert (repo / path).resolve() == schema.resolve()
    assert fnmatch.fnmatch(bp.relative_to(repo).as_posix(), glob)
    assert not fnmatch.fnmatch("blueprints/schema.json", glob)


@pytest.mark.parametrize("target", TARGETS)
def test_every_rackform_command_in_the_readme_exists_with_its_options(tmp_path, target):
    readme = render(tmp_path / "r", target)["README.md"]
    commands = typer.main.get_command(app).commands
    used = re.findall(r"(?m)(?:^|`)rackform ([a-z]+)((?: [^`\n#]*)?)", readme)
    assert {c for c, _ in used} >= {"validate", "plan", "compile", "up", "preview", "destroy"}
    for name, rest in used:
        assert name in commands, name
        known = {"--help"} | {o for p in commands[name].params for o in p.opts}
        for option in re.findall(r"(?<!\S)(--?[a-z][a-z-]*)", rest):
            assert option in known, (name, option)
    assert "{{" not in readme


def test_templates_cover_every_target():
    assert set(TARGETS) == set(SCHEMAS)


def test_a_second_run_names_each_existing_file_and_writes_nothing(tmp_path):
    repo = tmp_path / "r"
    assert rackform("init", repo).returncode == 0
    (repo / "README.md").write_text("ours\n")
    before = {p: (repo / p).read_bytes() for p in files_in(repo)}
    r = rackform("init", repo, "--purpose", "inference")  # another blueprint, same other files
    assert r.returncode == 2
    exists = [x for x in lines(r.stderr) if x.endswith(" exists")]
    assert exists == [
        f"rackform: {repo / p} exists" for p in sorted(LAYOUT, key=list(render(repo)).index)
    ]
    assert lines(r.stderr)[-1].startswith("rackform: nothing was written")
    assert r.stdout == ""
    assert {p: (repo / p).read_bytes() for p in files_in(repo)} == before


def test_one_existing_file_stops_everything(tmp_path):
    # What a repository created with a README on a forge looks like after `git clone`.
    repo = tmp_path / "r"
    (repo / ".git").mkdir(parents=True)
    (repo / "README.md").write_text("# ours\n")
    r = rackform("init", "r", cwd=tmp_path)
    assert r.returncode == 2
    assert lines(r.stderr)[0] == "rackform: r/README.md exists"
    assert len(lines(r.stderr)) == 2
    assert files_in(repo) == {"README.md"} and sorted(os.listdir(repo)) == [".git", "README.md"]


def test_an_existing_directory_without_those_files_is_used(tmp_path):
    repo = tmp_path / "r"
    (repo / ".git").mkdir(parents=True)
    (repo / "blueprints").mkdir()
    (repo / "blueprints" / "other.yaml").write_text("name: other\n")
    r = rackform("init", ".", cwd=repo)
    assert r.returncode == 0, r.stderr
    assert (repo / "blueprints" / "other.yaml").read_text() == "name: other\n"
    assert lines(r.stdout)[-1].startswith("next: rackform validate blueprints/")  # no cd


def test_a_file_where_a_directory_must_go(tmp_path):
    (tmp_path / "f").write_text("keep\n")
    for target in ("f", "f/sub"):
        r = rackform("init", target, cwd=tmp_path)
        assert r.returncode == 2
        assert lines(r.stderr) == ["rackform: f: not a directory; nothing was written"]
    repo = tmp_path / "r"
    repo.mkdir()
    (repo / "blueprints").write_text("not a directory\n")
    r = rackform("init", repo)
    assert r.returncode == 2
    assert lines(r.stderr)[0] == f"rackform: {repo / 'blueprints'} exists"
    assert sorted(os.listdir(repo)) == ["blueprints"]
    assert (tmp_path / "f").read_text() == "keep\n"


def test_unknown_target_or_purpose_is_one_line_and_writes_nothing(tmp_path):
    r = rackform("init", "r", "--target", "gcp", cwd=tmp_path)
    assert r.returncode == 2
    assert lines(r.stderr) == [
        "rackform: unknown target 'gcp' (valid: aws, bare_metal, colocation)"
    ]
    r = rackform("init", "r", "--purpose", "both", cwd=tmp_path)
    assert r.returncode == 2
    assert lines(r.stderr) == ["rackform: unknown purpose 'both' (valid: training, inference)"]
    assert os.listdir(tmp_path) == []


@pytest.fixture
def shared_dir():
    """A directory `nobody` may enter (pytest's tmp_path is root's alone)."""
    d = Path(tempfile.mkdtemp(prefix="rackform-init-test-")).resolve()
    d.chmod(0o755)
    try:
        yield d
    finally:
        for p in (d, *d.rglob("*")):
            if p.is_dir():
                p.chmod(0o755)
        shutil.rmtree(d)


@contextlib.contextmanager
def as_nobody():
    """Root writes regardless of modes: as root (CI), act as `nobody` for a while (in this
    process: the interpreter lives where `nobody` may not run it)."""
    if os.geteuid() != 0:
        yield
        return
    os.setegid(65534)
    os.seteuid(65534)
    try:
        yield
    finally:
        os.seteuid(0)
        os.setegid(0)


def init_in_process(*args: str):
    """`rackform init` through the real app (exit status, stderr), in this process."""
    return CliRunner().invoke(app, ["init", *args])


@pytest.fixture
def warm(shared_dir):
    """One run as root first: what `init` imports lazily is then loaded (the standard library
    lives where `nobody` may not read it)."""
    assert init_in_process(str(shared_dir / "warm")).exit_code == 0
    shutil.rmtree(shared_dir / "warm")


def test_an_unwritable_directory_or_parent_writes_nothing(shared_dir, warm, monkeypatch):
    monkeypatch.chdir(shared_dir)
    parent = shared_dir / "ro"
    parent.mkdir()
    parent.chmod(0o555)
    with as_nobody():
        new = init_in_process("ro/new")
        inside = init_in_process("ro")
    assert new.exit_code == 2
    assert lines(new.stderr) == [
        "rackform: ro/new: cannot write (Permission denied); nothing was written"
    ]
    assert inside.exit_code == 2
    assert lines(inside.stderr) == [
        "rackform: ro/Pulumi.yaml: cannot write (Permission denied); nothing was written"
    ]
    assert os.listdir(parent) == []


def test_a_write_that_fails_halfway_removes_what_it_wrote(shared_dir, warm, monkeypatch):
    # The repository is writable but its stacks/ is not: every file before the stack configs
    # gets written, then the first stack config fails; all of it must go again.
    monkeypatch.chdir(shared_dir)
    repo = shared_dir / "r"
    repo.mkdir()
    repo.chmod(0o777)
    (repo / "stacks").mkdir()
    (repo / "stacks").chmod(0o555)
    with as_nobody():
        r = init_in_process("r")
    assert r.exit_code == 2
    (line,) = lines(r.stderr)
    assert re.fullmatch(
        r"rackform: r/stacks/Pulumi\.aws-train-dev\.yaml: cannot write \(Permission denied\); "
        r"nothing was written",
        line,
    )
    assert sorted(os.listdir(repo)) == ["stacks"]
    assert os.listdir(repo / "stacks") == []


def test_help_states_the_exit_status():
    r = rackform("init", "--help")
    assert r.returncode == 0
    text = " ".join(r.stdout.split())
    assert "never overwrites a file" in text
    assert "Exit status: 0 written; 2 nothing written" in text
    assert "--target" in text and "--purpose" in text
