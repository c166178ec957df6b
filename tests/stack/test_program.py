"""The program as Pulumi runs it: `stacks/__main__.py` reading its stack config, under the mock
runtime, registers exactly what `rackform plan` shows; it takes the same engine path as every
command (a blueprint preflight blocks is refused before anything is registered); config
mistakes are clear errors; paths resolve the same from any working directory."""

from __future__ import annotations

import os
import runpy
import subprocess
import sys

import pulumi
import pytest
import yaml
from planhelp import AWS_TRAINING, BARE_METAL, plan, variant, write_blueprint

from rackform.blueprint.loader import load_effective
from rackform.engine import compile_effective, prepare
from rackform.paths import config_path, project_root
from rackform.stack.errors import ProgramError
from rackform.stack.offline import record, record_program
from rackform.targets.runtimes import runtime

ROOT = project_root()
MAIN = ROOT / "stacks" / "__main__.py"
# Four nodes of full fine-tuning over plain ethernet: preflight's fabric-missing error.
BLOCKED = variant(
    AWS_TRAINING,
    **{"network.fabric": "ethernet", "node_groups.0.count": 4, "workload.model_params_b": 13},
)


def _main_under_mocks(config: dict[str, str], stack: str):
    return record_program(lambda: runpy.run_path(str(MAIN)), stack, config)


def _view(records):
    return [(r.type, r.name, r.parent, r.inputs, r.dependencies, r.protect) for r in records]


@pytest.mark.parametrize(
    ("blueprint", "env", "stack"),
    [
        ("blueprints/aws-training.yaml", "dev", "llm-train-a-dev"),
        ("blueprints/aws-inference.yaml", "prod", "llm-serve-a-prod"),
        ("blueprints/colo-inference.yaml", "default", "colo-serve-default"),
    ],
)
def test_stack_program_registers_what_plan_shows(blueprint, env, stack):
    p = prepare(ROOT / blueprint, env).plan
    config = dict(p.stack_config)
    assert config["rackform:blueprint"] == blueprint
    from_main = _main_under_mocks(config, stack)
    assert _view(from_main) == _view(record(p, runtime(p.target_type)))
    assert len(from_main) > 5


def test_committed_stack_files_point_at_blueprints_that_plan():
    files = sorted((ROOT / "stacks").glob("Pulumi.*.yaml"))
    assert files
    for path in files:
        config = yaml.safe_load(path.read_text())["config"]
        stack = path.name.removeprefix("Pulumi.").removesuffix(".yaml")
        bp = config_path(config["rackform:blueprint"], ROOT)
        p = prepare(bp, config["rackform:environment"]).plan
        assert p.stack == stack
        assert dict(p.stack_config) == config


def _compile(cwd, *args: str) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "rackform", "compile", *args],
        cwd=cwd,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr


def test_compile_from_another_directory_writes_a_config_the_program_resolves(tmp_path):
    # `rackform compile` run from a directory other than the blueprint's (and the project's):
    # the stack config names the blueprint as the program resolves it, from the project.
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    _compile(elsewhere, str(ROOT / "blueprints/aws-training.yaml"), "--env", "dev", "-o", "out")
    config = yaml.safe_load((elsewhere / "out" / "Pulumi.llm-train-a-dev.yaml").read_text())
    config = config["config"]
    assert config["rackform:blueprint"] == "blueprints/aws-training.yaml"
    assert config_path(config["rackform:blueprint"], ROOT).is_file()
    # And a blueprint outside the project is named absolutely.
    bp = write_blueprint(tmp_path, AWS_TRAINING)
    _compile(tmp_path, "bp.yaml", "-o", "out2")
    outside = yaml.safe_load((tmp_path / "out2" / "Pulumi.t-train-default.yaml").read_text())
    assert outside["config"]["rackform:blueprint"] == str(bp.resolve())
    # The program, run from yet another directory, finds both and plans them.
    os.chdir(elsewhere)
    try:
        for cfg, stack in ((config, "llm-train-a-dev"), (outside["config"], "t-train-default")):
            assert len(_main_under_mocks(cfg, stack)) > 5
    finally:
        os.chdir(ROOT)


def test_an_invalid_blueprint_fails_the_program_with_located_problems(tmp_path):
    bad = write_blueprint(tmp_path, variant(AWS_TRAINING, **{"node_groups.0.count": -1}))
    config = {"rackform:blueprint": str(bad), "rackform:environment": "default"}
    with pytest.raises(pulumi.RunError, match=r"bp\.yaml:\d+:\d+: node_groups\[0\]\.count"):
        _main_under_mocks(config, "t-train-default")


def test_a_blocked_blueprint_registers_nothing_and_says_what_validate_says(tmp_path):
    path = write_blueprint(tmp_path, BLOCKED)
    config = {"rackform:blueprint": str(path), "rackform:environment": "default"}
    registered = []
    with pytest.raises(pulumi.RunError) as err:
        registered = _main_under_mocks(config, "t-train-default")
    assert registered == []
    validate = subprocess.run(
        [sys.executable, "-m", "rackform", "validate", str(path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert validate.returncode == 2
    blocking = [line for line in validate.stderr.splitlines() if ": error " in line]
    assert blocking and all(line in str(err.value) for line in blocking)
    assert "fabric-missing" in str(err.value) and "nothing was created" in str(err.value)


def test_region_in_stack_config_must_match_the_blueprint(tmp_path):
    path = write_blueprint(tmp_path, AWS_TRAINING)
    config = {
        "rackform:blueprint": str(path),
        "rackform:environment": "default",
        "aws:region": "eu-west-1",
    }
    with pytest.raises(pulumi.RunError, match="aws:region is eu-west-1 but the blueprint says"):
        _main_under_mocks(config, "t-train-default")


def test_program_error_type_for_direct_callers(tmp_path):
    from rackform.stack import program

    p = compile_effective(load_effective(write_blueprint(tmp_path, AWS_TRAINING)))
    with pytest.raises(ProgramError):
        record_program(
            lambda: program.build(p, runtime(p.target_type)),
            "t-train-default",
            {"aws:region": "eu-west-1"},
        )


def test_plans_are_deterministic_and_repeatable_in_one_process(tmp_path):
    first = _view(plan(tmp_path, AWS_TRAINING))
    other = _view(plan(tmp_path, BARE_METAL))
    again = _view(plan(tmp_path, AWS_TRAINING))
    assert first == again
    assert first != other


def test_the_data_tiers_stack_config_makes_the_program_build_the_data_tier(tmp_path):
    """`pulumi up -s <stack>-data` (what `rackform up` runs first): the same program, its config
    naming the tier, registers what `rackform plan` shows for the data tier's stack; the
    cluster's stack then registers what plan shows for it, reading the data tier's outputs."""
    from rackform.stack.offline import record_data, record_stacks

    doc = {**AWS_TRAINING, "storage": {"shared": {"fsx": {"import_path": "s3://ml-data/x/"}}}}
    p = compile_effective(load_effective(write_blueprint(tmp_path, doc)))
    config = dict(p.data_stack_config)
    assert config["rackform:tier"] == "data"
    data, outputs = record_data(p, runtime(p.target_type))
    assert _view(_main_under_mocks(config, p.data_stack)) == _view(data)
    cluster = record_program(
        lambda: runpy.run_path(str(MAIN)),
        p.stack,
        dict(p.stack_config),
        references={p.data_stack: outputs},
    )
    assert _view(cluster) == _view(record_stacks(p, runtime(p.target_type))[-1][1])


def test_a_data_tier_config_on_a_blueprint_without_one_is_refused(tmp_path):
    path = write_blueprint(tmp_path, AWS_TRAINING)
    config = {
        "rackform:blueprint": str(path),
        "rackform:environment": "default",
        "rackform:tier": "data",
    }
    with pytest.raises(pulumi.RunError, match="keeps no file system in a stack of its own"):
        _main_under_mocks(config, "t-train-default-data")
