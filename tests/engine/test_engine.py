"""One path for every command: the engine loads, compiles and checks a blueprint once, every
command that acts refuses a blocked blueprint with the lines `validate` prints, and `--env`
means the same everywhere (`default` is the base blueprint; a wrong name lists the valid ones)."""

from __future__ import annotations

import os
import subprocess
import sys
from collections import Counter

import pytest
from blueprint_helpers import AWS_TRAINING, BARE_METAL, FULL_ON_ETHERNET, ROOT, rackform
from typer.testing import CliRunner

from rackform.blueprint import loader
from rackform.blueprint.problems import BlueprintError
from rackform.cli.main import app
from rackform.engine import (
    Blocked,
    NotAllPrepared,
    for_action,
    prepare,
    prepare_all,
    prepare_many,
    require_clear,
)
from rackform.plan import sizing
from rackform.plan.targets.compilers import COMPILERS

BLOCKED = FULL_ON_ETHERNET
ENVS = "environments:\n  dev: {}\n  prod: {}\n"
WITH_ENVS = BARE_METAL + ENVS


def _blocking_lines(path) -> list[str]:
    r = rackform("validate", path)
    assert r.returncode == 2
    lines = [line for line in r.stderr.splitlines() if ": error " in line]
    assert lines
    return lines


def test_the_engine_refuses_a_blocked_blueprint(write):
    path = write(BLOCKED)
    prepared = prepare(path)
    assert prepared.blocked and [lf.finding.code for lf in prepared.blocking] == ["fabric-missing"]
    with pytest.raises(Blocked) as exc:
        require_clear(prepared)
    assert exc.value.lines == [str(lf) for lf in prepared.blocking]
    with pytest.raises(Blocked):
        for_action(path)


@pytest.mark.parametrize(
    ("command", "says"),
    [
        (["compile", "-o", "{tmp}/out"], "nothing was written"),
        (["configure"], "nothing was configured"),
        (["smoke", "--no-host-checks", "--blueprint"], "the smoke job did not run"),
        (["plan"], "the program was not run"),
    ],
)
def test_every_acting_command_refuses_with_the_lines_validate_prints(
    write, tmp_path, command, says
):
    path = write(BLOCKED)
    args = [a.format(tmp=tmp_path) for a in command]
    r = rackform(*args, path)
    assert r.returncode == 2, r.stderr
    for line in _blocking_lines(path):
        assert line in r.stderr
    assert says in r.stderr
    assert "Traceback" not in r.stderr
    assert not (tmp_path / "out").exists()


def test_prepare_many_reports_every_bad_file_at_once(write):
    a = write(AWS_TRAINING.replace("count: 2", "count: -3"), "a.yaml")
    good = write(WITH_ENVS, "good.yaml")
    b = write(AWS_TRAINING.replace("fabric: efa", "fabric: efaa"), "b.yaml")
    with pytest.raises(NotAllPrepared) as exc:
        prepare_many([a, good, b])
    assert isinstance(exc.value, BlueprintError)  # what every command already catches
    sources = [p.file for p in exc.value.problems]
    assert str(a) in sources and str(b) in sources
    paths = {(p.file, p.path) for p in exc.value.problems}
    assert (str(a), "node_groups[0].count") in paths and (str(b), "network.fabric") in paths
    # The good file is still prepared, in every environment, in the order given.
    got = [
        (f, None if ps is None else [p.plan.environment for p in ps]) for f, ps in exc.value.by_file
    ]
    assert got == [(a, None), (good, ["default", "dev", "prod"]), (b, None)]


def test_prepare_many_with_an_environment_prepares_only_it(write):
    one = write(WITH_ENVS, "one.yaml")
    two = write(WITH_ENVS, "two.yaml")
    got = prepare_many([one, two], "dev")
    assert [(f, [p.plan.environment for p in ps]) for f, ps in got] == [
        (one, ["dev"]),
        (two, ["dev"]),
    ]
    with pytest.raises(NotAllPrepared) as exc:
        prepare_many([one, two], "qa")
    assert len(exc.value.problems) == 2
    assert all("unknown environment 'qa'" in str(p) for p in exc.value.problems)


def test_a_file_is_read_once_and_each_environment_merged_once(write, monkeypatch):
    path = write(WITH_ENVS)
    reads, merges = [], []
    real_read, real_merge = loader.read, loader.merge
    monkeypatch.setattr(loader, "read", lambda p: reads.append(p) or real_read(p))
    monkeypatch.setattr(loader, "merge", lambda *a: merges.append(a[2]) or real_merge(*a))
    prepared = prepare_all(path)
    assert [p.plan.environment for p in prepared] == ["default", "dev", "prod"]
    assert len(reads) == 1
    assert merges == [("environments", "dev"), ("environments", "prod")]
    # validate, end to end in-process: the same.
    reads.clear()
    result = CliRunner().invoke(app, ["validate", str(path)])
    assert result.exit_code == 0, result.output
    assert len(reads) == 1


def _count_calls(monkeypatch, calls: Counter) -> None:
    """Count every call of each target's price and of the sizing arithmetic, wherever a module
    imported the function (a second computation behind another name counts too)."""
    for kind in {type(c) for c in COMPILERS.values()}:
        real = kind.cost
        monkeypatch.setattr(
            kind, "cost", lambda self, plan, real=real: calls.update(["cost"]) or real(self, plan)
        )
    for name in ("training_memory", "serving_memory", "checkpoint_gb"):
        real = getattr(sizing, name)

        def counted(*args, real=real, name=name):
            calls.update([name])
            return real(*args)

        for module in [m for n, m in sys.modules.items() if n.startswith("rackform")]:
            if getattr(module, name, None) is real:
                monkeypatch.setattr(module, name, counted)


@pytest.mark.parametrize(
    "example", sorted((ROOT / "blueprints").glob("*.yaml")), ids=lambda p: p.stem
)
def test_prepare_prices_and_sizes_each_environment_once(example, monkeypatch):
    # Compile derives the cost and the workload's sizing once into the plan; preflight's rules
    # and report read them there (the utilization-gap rule of aws-training.yaml once priced the
    # cluster a second time, and each checkpoint rule sized the checkpoint again).
    calls: Counter = Counter()
    _count_calls(monkeypatch, calls)
    prepared = prepare_all(example)
    training = [p for p in prepared if p.plan.training and p.plan.workload]
    serving = [p for p in prepared if not p.plan.training and p.plan.workload]
    assert calls["cost"] == len(prepared)
    assert calls["training_memory"] == len(training)
    assert calls["checkpoint_gb"] == len(training)
    assert calls["serving_memory"] == len(serving)
    for p in prepared:
        assert p.report.cost is p.plan.cost


def test_default_is_the_base_blueprint_everywhere(write):
    path = write(WITH_ENVS)
    assert prepare(path, "default").plan == prepare(path, None).plan == prepare(path, "").plan
    assert prepare(path, "default").plan.environment == "default"


@pytest.mark.parametrize(
    "command",
    [
        ["validate"],
        ["plan"],
        ["compile", "-o", "{tmp}/out"],
        ["configure", "--check"],
        ["smoke", "--blueprint"],
        ["up"],
        ["preview"],
        ["destroy", "--yes"],
    ],
)
def test_env_means_the_same_for_every_command(write, tmp_path, command):
    # A blocked blueprint: every command stops right after the engine (nothing is contacted,
    # no job runs), so what it printed shows how it read --env.
    path = write(BLOCKED + ENVS)
    args = [a.format(tmp=tmp_path) for a in command]
    wrong = rackform(*args, path, "--env", "qa")
    assert wrong.returncode == 2
    assert "unknown environment 'qa' (valid: default, dev, prod)" in wrong.stderr
    # `--env default` goes as far as `--env dev`: past the engine, to the preflight findings
    # (destroy, which a finding does not stop, to the missing Pulumi CLI).
    for env in ("default", "dev"):
        r = rackform(*args, path, "--env", env)
        assert r.returncode == 2, r.stderr
        assert "unknown environment" not in r.stderr
        assert "fabric-missing" in r.stderr or "pulumi CLI is not on PATH" in r.stderr


def test_an_environment_may_not_be_called_default(write):
    path = write(BARE_METAL + "environments:\n  default: {}\n")
    with pytest.raises(BlueprintError) as exc:
        prepare_all(path)
    (p,) = exc.value.problems
    assert (p.path, p.line) == ("environments.default", 14)
    assert "names the base blueprint" in p.message


def test_paths_on_the_command_line_are_the_working_directorys(tmp_path):
    (tmp_path / "bp.yaml").write_text(AWS_TRAINING)
    r = rackform("compile", "bp.yaml", "-o", "out", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "out" / "Pulumi.t-cluster-default.yaml").is_file()
    assert not (ROOT / "out").exists()


@pytest.mark.parametrize(
    ("command", "module"),
    [(["plan"], "pulumi"), (["up"], "pulumi"), (["configure"], "ansible_runner")],
)
def test_without_the_deploy_extra_a_command_names_what_to_install(tmp_path, command, module):
    # The deploy extra is installed here; hide it from a subprocess the way a bare
    # `pip install rackform` would leave it: importing it fails.
    hide = tmp_path / "hide"
    hide.mkdir()
    (hide / "sitecustomize.py").write_text(
        "import sys\nfor m in ('pulumi', 'pulumi_aws', 'ansible_runner'):\n    sys.modules[m] = None\n"
    )
    bp = tmp_path / "bp.yaml"
    bp.write_text(BARE_METAL.lstrip())
    r = subprocess.run(
        [sys.executable, "-m", "rackform", *command, str(bp)],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": f"{hide}{os.pathsep}{ROOT}"},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 1, r.stderr
    assert f"needs {module}, from the deploy extra (pip install 'rackform[deploy]')" in r.stderr
    assert "internal error" not in r.stderr and "Traceback" not in r.stderr
