"""The program as Pulumi runs it: `stacks/__main__.py` reading its stack config, under the mock
runtime, registers exactly what `rackform plan` shows; config mistakes are clear errors."""

from __future__ import annotations

import runpy

import pulumi
import pytest
from planhelp import AWS_TRAINING, BARE_METAL, plan, variant, write_blueprint

from rackform.blueprint.loader import load_effective
from rackform.stack.config import environment_arg, repo_root, resolve_blueprint, stack_config
from rackform.stack.errors import ProgramError
from rackform.stack.offline import record, record_program

ROOT = repo_root()
MAIN = ROOT / "stacks" / "__main__.py"


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
    effective = load_effective(ROOT / blueprint, environment_arg(env))
    config = stack_config(effective, ROOT)
    assert config["rackform:blueprint"] == blueprint
    from_main = _main_under_mocks(config, stack)
    assert _view(from_main) == _view(record(effective))
    assert len(from_main) > 5


def test_committed_stack_files_point_at_blueprints_that_plan():
    import yaml

    files = sorted((ROOT / "stacks").glob("Pulumi.*.yaml"))
    assert files
    for path in files:
        config = yaml.safe_load(path.read_text())["config"]
        stack = path.name.removeprefix("Pulumi.").removesuffix(".yaml")
        bp = resolve_blueprint(config["rackform:blueprint"], ROOT)
        effective = load_effective(bp, environment_arg(config["rackform:environment"]))
        assert f"{effective.blueprint.name}-{effective.environment}" == stack
        assert stack_config(effective, ROOT) == config


def test_blueprint_path_is_relative_to_the_repository_not_the_cwd(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert resolve_blueprint("blueprints/x.yaml", ROOT) == ROOT / "blueprints" / "x.yaml"
    assert resolve_blueprint("/abs/x.yaml", ROOT).as_posix() == "/abs/x.yaml"
    assert environment_arg("default") is None and environment_arg("dev") == "dev"


def test_an_invalid_blueprint_fails_the_program_with_located_problems(tmp_path):
    bad = write_blueprint(tmp_path, variant(AWS_TRAINING, **{"node_groups.0.count": -1}))
    config = {"rackform:blueprint": str(bad), "rackform:environment": "default"}
    with pytest.raises(pulumi.RunError, match=r"bp\.yaml:\d+:\d+: node_groups\[0\]\.count"):
        _main_under_mocks(config, "t-train-default")


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
    from rackform.pulumi import program

    effective = load_effective(write_blueprint(tmp_path, AWS_TRAINING))
    with pytest.raises(ProgramError):
        record_program(
            lambda: program.build(effective),
            "t-train-default",
            {"aws:region": "eu-west-1"},
        )


def test_plans_are_deterministic_and_repeatable_in_one_process(tmp_path):
    first = _view(plan(tmp_path, AWS_TRAINING))
    other = _view(plan(tmp_path, BARE_METAL))
    again = _view(plan(tmp_path, AWS_TRAINING))
    assert first == again
    assert first != other
