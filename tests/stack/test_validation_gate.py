"""A failed strict validation fails `up` only after the evidence is in the stack's outputs.

The program runs under Pulumi's mock runtime as an update (not a preview), with the engine's
answer for the Validate resource given by the mocks: a recorded report that failed. (The
engine is what this machine cannot run; the Validate provider's own create is tested in
test_stages.py.) The monitor records the stack's outputs as the engine would receive them.
"""

from __future__ import annotations

import asyncio
import contextvars

import pytest
from planhelp import AWS_TRAINING, BARE_METAL, variant, write_blueprint
from pulumi.runtime import set_all_config, set_mocks
from pulumi.runtime.settings import SETTINGS, set_root_resource
from pulumi.runtime.stack import run_in_stack

from rackform.blueprint.loader import load_effective
from rackform.engine import compile_effective
from rackform.stack.offline import RecordingMocks, RecordingMonitor
from rackform.stack.program import build, fail_unless_passed
from rackform.stack.stages import ValidationFailed
from rackform.targets.runtimes import runtime

FAILED = {
    "checks": [{"name": "n1/allreduce_busbw", "status": "fail", "measured": 90, "expected": 460}]
}


# The stack's key pair as its NodeKeys resource would hold it (the provider's create is what
# makes them; tests/targets/test_aws.py calls it).
KEYS = {
    "client_private_key": "-----BEGIN OPENSSH PRIVATE KEY-----\nAAAA\n",
    "host_public_key": "ssh-ed25519 AAAAC3NzaHOST rackform-host@t-train",
}
# How Pulumi's wire format marks a secret value (pulumi.runtime.rpc, _special_secret_sig).
SECRET_SIG = "4dabf18193072939515e22adb298388d"


class ValidationMocks(RecordingMocks):
    def __init__(self, passed: bool):
        super().__init__()
        self.passed = passed

    def new_resource(self, args):
        rid, state = super().new_resource(args)
        if args.typ.endswith("rackform:NodeKeys"):
            state = {**state, **KEYS}
        if args.typ.endswith("rackform:Validate"):
            state = {**state, "report": FAILED, "passed": self.passed, "failure": "busbw low"}
        if args.typ.endswith("rackform:Configure"):
            state = {**state, "content_hash": "sha256:c", "result": {}, "drift": {}}
        if args.typ.endswith("rackform:Host"):
            state = {**state, "facts": {}}
        return rid, state


def _up(plan, passed: bool, config=None) -> tuple[RecordingMonitor, BaseException | None]:
    """Run the program as an update; the monitor (with the stack's outputs) and the program's
    failure, if any."""
    mocks = ValidationMocks(passed)
    monitor = RecordingMonitor(mocks)

    def run() -> BaseException | None:
        loop = asyncio.new_event_loop()
        asyncio.set_event_loop(loop)
        SETTINGS.outputs = set()
        set_all_config(config or {})
        set_mocks(mocks, project="rackform", stack=plan.stack, preview=False, monitor=monitor)
        # set_mocks registers an empty root stack of its own; the program gets a fresh one, as
        # under `pulumi up`, whose outputs (the exports) register when the program ends.
        set_root_resource(None)
        try:
            # As `pulumi up` runs a program: inside the root stack, whose outputs are the exports.
            loop.run_until_complete(run_in_stack(lambda: build(plan, runtime(plan.target_type))))
        except ValidationFailed as exc:
            return exc
        finally:
            loop.close()
            asyncio.set_event_loop(None)
        return None

    return monitor, contextvars.copy_context().run(run)


@pytest.mark.parametrize("strict", [True, False])
def test_a_failed_validation_is_in_the_outputs_and_fails_up_only_when_strict(tmp_path, strict):
    doc = variant(BARE_METAL, validation={"strict": strict})
    plan = compile_effective(load_effective(write_blueprint(tmp_path, doc)))
    monitor, error = _up(plan, passed=False)
    # The evidence reached the stack's outputs whether or not `up` then fails.
    outputs = monitor.stack_outputs
    assert outputs["validation_passed"] is False
    assert outputs["validation"]["checks"][0]["name"] == "n1/allreduce_busbw"
    assert outputs["validation_failure"] == "busbw low"
    if strict:
        assert error is not None
        assert "busbw low" in str(error) and "every resource is kept" in str(error)
    else:
        assert error is None
    # Every resource was registered: nothing is lost with the failure.
    assert {r.type.rsplit(":", 1)[-1] for r in monitor.records} >= {"Host", "Configure", "Validate"}


def test_a_passed_validation_does_not_fail(tmp_path):
    plan = compile_effective(load_effective(write_blueprint(tmp_path, BARE_METAL)))
    monitor, error = _up(plan, passed=True)
    assert error is None and monitor.stack_outputs["validation_passed"] is True


def test_the_stacks_ssh_access_is_exported_as_a_secret_where_the_stack_made_the_keys(tmp_path):
    # What `pulumi stack output ssh_access --show-secrets` gives the commands after `up`
    # (--private-key, --known-hosts); bare metal's keys are the site's own: nothing exported.
    aws = compile_effective(load_effective(write_blueprint(tmp_path, AWS_TRAINING)))
    outputs = _up(aws, passed=True)[0].stack_outputs
    access = outputs["ssh_access"]
    assert SECRET_SIG in access, access  # encrypted in the state, never printed
    assert access["value"] == {
        "private_key": KEYS["client_private_key"],
        "known_hosts": "* ssh-ed25519 AAAAC3NzaHOST\n",
    }
    bare = compile_effective(load_effective(write_blueprint(tmp_path, BARE_METAL)))
    assert "ssh_access" not in _up(bare, passed=True)[0].stack_outputs


BOOT = {"name": "boot_reports", "status": "fail", "measured": 3, "expected": 4, "unit": "nodes"}
OK = {"name": "n1/gpu_count", "status": "pass", "measured": 8, "expected": 8}


def test_strict_does_not_fail_the_program_for_the_wait_for_the_nodes_configured_at_boot(tmp_path):
    # `rackform up` reports that wait itself (exit 3) after recording it with a targeted update;
    # failing that update too would leave the stack unable to record the next wait.
    plan = compile_effective(load_effective(write_blueprint(tmp_path, BARE_METAL)))
    fail_unless_passed(plan, False, "boot_reports: ...", {"checks": [OK, BOOT]})
    with pytest.raises(ValidationFailed, match="busbw"):
        fail_unless_passed(plan, False, "busbw low", {"checks": [OK, BOOT, *FAILED["checks"]]})
    with pytest.raises(ValidationFailed):  # the wait passed, nothing else did
        fail_unless_passed(plan, False, "no check passed", {"checks": [{**BOOT, "status": "pass"}]})
    with pytest.raises(ValidationFailed):
        fail_unless_passed(plan, False, "busbw low", FAILED)


def test_the_stacks_record_of_the_wait_reaches_the_validate_stage(tmp_path):
    import json

    def validate_inputs(config=None) -> dict:
        monitor, _ = _up(plan, passed=True, config=config)
        (found,) = [v for (t, _), v in monitor.mocks.inputs.items() if t.endswith(":Validate")]
        return found

    plan = compile_effective(load_effective(write_blueprint(tmp_path, BARE_METAL)))
    value = json.dumps(BOOT)
    assert validate_inputs({"rackform:boot": value})["boot"] == value
    assert validate_inputs()["boot"] == ""
