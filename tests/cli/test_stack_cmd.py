"""`rackform preview|up|destroy` through the Automation API, against a recording fake `pulumi`
on PATH (this machine has no Pulumi CLI): what is run, where, with which backend and config,
Pulumi's exit status passed through, and destroy's guards."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import fake_pulumi
import moto_server
import pytest
from blueprint_helpers import AWS_TRAINING, ROOT


@pytest.fixture
def fake(tmp_path):
    bin_dir = tmp_path / "bin"
    fake_pulumi.install(bin_dir)

    def run(*args, stdin: str | None = None, **env):
        return subprocess.run(
            [sys.executable, "-m", "rackform", *map(str, args)],
            cwd=ROOT,
            env=fake_pulumi.environ(bin_dir, tmp_path, **env),
            input=stdin,
            capture_output=True,
            text=True,
            timeout=120,
        )

    def calls() -> list[dict]:
        log = tmp_path / "pulumi.log"
        lines = log.read_text().splitlines() if log.exists() else []
        return [json.loads(line) for line in lines]

    run.calls = calls
    run.tmp = tmp_path
    return run


def _ops(calls):
    return [c["argv"][1] for c in calls if c["argv"][:1] == ["--non-interactive"]]


def test_up_creates_the_stack_sets_its_config_and_runs_up(fake):
    r = fake("up", "blueprints/aws-training.yaml", "--env", "dev")
    assert r.returncode == 0, r.stderr
    assert "fake pulumi up on stack llm-train-a-dev" in r.stdout
    calls = fake.calls()
    assert _ops(calls)[:3] == ["stack", "stack", "config"]
    assert ["--non-interactive", "stack", "init", "llm-train-a-dev"] in [c["argv"] for c in calls]
    config = next(c["argv"] for c in calls if "set-all" in c["argv"])
    assert "rackform:blueprint=blueprints/aws-training.yaml" in config
    assert "rackform:environment=dev" in config
    assert "aws:region=us-east-1" in config
    up = next(c for c in calls if "up" in c["argv"])
    assert {"--yes", "--skip-preview"} <= set(up["argv"])
    assert up["argv"][up["argv"].index("--stack") + 1] == "llm-train-a-dev"
    assert Path(up["cwd"]) == ROOT  # where Pulumi.yaml is
    state = fake.tmp / "state"
    assert up["backend"] == f"file://{state}"
    assert state.is_dir()


def test_revalidate_sets_a_new_validation_request_only_when_asked(fake):
    def request(*flags):
        r = fake("up", "blueprints/aws-training.yaml", "--env", "dev", *flags)
        assert r.returncode == 0, r.stderr
        config = [c["argv"] for c in fake.calls() if "set-all" in c["argv"]][-1]
        return [a for a in config if a.startswith("rackform:revalidate=")]

    assert request() == []  # a plain `up` leaves the stack's request as it was
    (first,) = request("--revalidate")
    assert first.removeprefix("rackform:revalidate=")  # a time stamp: new on every request


def test_a_second_run_selects_the_existing_stack(fake):
    assert fake("preview", "blueprints/baremetal-training.yaml", "--env", "staging").returncode == 0
    r = fake("preview", "blueprints/baremetal-training.yaml", "--env", "staging")
    assert r.returncode == 0, r.stderr
    inits = [c for c in fake.calls() if c["argv"][1:3] == ["stack", "init"]]
    assert len(inits) == 1
    previews = [c for c in fake.calls() if "preview" in c["argv"]]
    assert len(previews) == 2 and all("--event-log" in c["argv"] for c in previews)
    config = next(c["argv"] for c in fake.calls() if "set-all" in c["argv"])
    assert not any(a.startswith("aws:region") for a in config)  # bare metal: no AWS provider


def test_pulumis_exit_status_is_passed_through(fake):
    r = fake("up", "blueprints/aws-training.yaml", "--env", "dev", FAKE_PULUMI_EXIT="3")
    assert r.returncode == 3
    assert "fake up failed" in r.stderr
    r = fake("preview", "blueprints/aws-training.yaml", FAKE_PULUMI_EXIT="255")
    assert r.returncode == 255


def test_pulumi_backend_url_is_respected(fake, tmp_path):
    url = f"file://{tmp_path / 'elsewhere'}"
    r = fake("preview", "blueprints/aws-training.yaml", PULUMI_BACKEND_URL=url)
    assert r.returncode == 0, r.stderr
    assert {c["backend"] for c in fake.calls() if c["argv"] != ["version"]} == {url}


def test_a_self_managed_backend_needs_a_passphrase(fake):
    r = fake("up", "blueprints/aws-training.yaml", PULUMI_CONFIG_PASSPHRASE="")
    assert r.returncode == 0  # an empty passphrase is a choice, and allowed
    env = fake_pulumi.environ(fake.tmp / "bin", fake.tmp)
    del env["PULUMI_CONFIG_PASSPHRASE"]
    r = subprocess.run(
        [sys.executable, "-m", "rackform", "up", "blueprints/aws-training.yaml"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
    )
    assert r.returncode == 2
    assert "PULUMI_CONFIG_PASSPHRASE" in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1


def test_missing_pulumi_cli_is_one_line_naming_the_fix(fake, tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    r = fake("up", "blueprints/aws-training.yaml", PATH=str(empty))
    assert r.returncode == 2
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1
    assert "pulumi CLI is not on PATH" in lines[0] and "install" in lines[0]
    assert "rackform plan" in lines[0]
    assert fake.calls() == []


def test_destroy_refuses_a_protected_cluster_without_running_pulumi(fake):
    r = fake("destroy", "blueprints/aws-training.yaml", "--env", "prod", "--yes")
    assert r.returncode == 2
    assert "protected" in r.stderr and "lifecycle.protect" in r.stderr
    assert fake.calls() == []


def test_destroy_asks_first(fake):
    r = fake("destroy", "blueprints/aws-training.yaml", "--env", "dev", stdin="n\n")
    assert r.returncode == 1
    assert "Destroy every resource of stack llm-train-a-dev?" in r.stdout
    assert not any("destroy" in c["argv"] for c in fake.calls())
    r = fake("destroy", "blueprints/aws-training.yaml", "--env", "dev", stdin="")
    assert r.returncode == 1
    assert not any("destroy" in c["argv"] for c in fake.calls())
    r = fake("destroy", "blueprints/aws-training.yaml", "--env", "dev", stdin="y\n")
    assert r.returncode == 0, r.stderr
    assert sum("destroy" in c["argv"] for c in fake.calls()) == 1


def test_destroy_yes_skips_the_question(fake):
    r = fake("destroy", "blueprints/aws-training.yaml", "--env", "dev", "--yes")
    assert r.returncode == 0, r.stderr
    assert "Destroy every resource" not in r.stdout
    destroy = next(c["argv"] for c in fake.calls() if "destroy" in c["argv"])
    assert destroy[destroy.index("--stack") + 1] == "llm-train-a-dev"


def test_an_invalid_blueprint_never_reaches_pulumi(fake, write):
    path = write("name: x\n")
    r = fake("up", path)
    assert r.returncode == 2
    assert "Traceback" not in r.stderr
    assert fake.calls() == []


# Four nodes of a full fine-tune over plain ethernet: preflight's fabric-missing error.
BLOCKED = AWS_TRAINING.replace("fabric: efa", "fabric: ethernet").replace(
    "count: 2", "count: 4"
) + ("workload: {model_params_b: 13, method: full, checkpoint_interval_min: 60}\n")


@pytest.mark.parametrize("operation", ["up", "preview"])
def test_a_blocked_blueprint_never_reaches_pulumi(fake, write, operation):
    path = write(BLOCKED)
    r = fake(operation, path)
    assert r.returncode == 2
    assert f"{path}:13:19: network.fabric: error fabric-missing" in r.stderr
    assert fake.calls() == []


def test_destroy_of_a_blocked_blueprint_still_tears_down(fake, write):
    # Removing a cluster cannot make what preflight warns about worse.
    path = write(BLOCKED)
    r = fake("destroy", path, "--yes")
    assert r.returncode == 0, r.stderr
    assert sum("destroy" in c["argv"] for c in fake.calls()) == 1


def test_refresh_reads_live_state_only_when_asked(fake):
    # heal's replace terminates a training node outside the stack: `up --refresh` is what
    # launches it again (a plain up would trust the state that still holds it).
    def up_argv(*flags):
        r = fake("up", "blueprints/aws-training.yaml", "--env", "dev", *flags)
        assert r.returncode == 0, r.stderr
        return next(c["argv"] for c in reversed(fake.calls()) if "up" in c["argv"])

    assert "--refresh" not in up_argv()
    assert "--refresh" in up_argv("--refresh")


def test_image_build_updates_only_the_node_images_resources(fake, tmp_path):
    bp = tmp_path / "baked.yaml"
    bp.write_text((ROOT / "blueprints/aws-training.yaml").read_text() + "image:\n  bake: true\n")
    r = fake("image", "build", bp, "--env", "dev", RACKFORM_PROJECT=str(ROOT))
    assert r.returncode == 0, r.stderr
    up = next(c["argv"] for c in fake.calls() if "up" in c["argv"])
    targets = [up[i + 1] for i, a in enumerate(up) if a == "--target"]
    assert targets == [
        "urn:pulumi:llm-train-a-dev::**rackform:aws:NodeImage**",
        "urn:pulumi:llm-train-a-dev::**::llm-train-a-dev-bootstrap-image-artifact",
    ]


def test_image_build_refuses_in_one_line_what_it_cannot_build(fake):
    r = fake("image", "build", "blueprints/aws-training.yaml", "--env", "dev")
    assert r.returncode == 2
    assert r.stderr.strip().splitlines() == [
        "rackform: blueprints/aws-training.yaml: the blueprint bakes no node image "
        "(image.bake is not true); nothing was built"
    ]
    r = fake("image", "build", "blueprints/baremetal-training.yaml", "--env", "staging")
    assert r.returncode == 2
    assert r.stderr.strip().splitlines() == [
        "rackform: blueprints/baremetal-training.yaml: the blueprint bakes no node image "
        "(image.bake is not true); nothing was built"
    ]
    # A disk image's options are refused where the image is built in the stack.
    r = fake("image", "build", "blueprints/aws-training.yaml", "--env", "dev", "--out", "x")
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert "builds its node image in its stack" in r.stderr
    r = fake("image", "build", "blueprints/aws-training.yaml", "--env", "dev", "--cpus", "2")
    assert r.returncode == 2 and "--cpus" in r.stderr, r.stderr
    assert not [c for c in fake.calls() if "up" in c["argv"]]


def test_image_build_without_the_pulumi_cli_says_so_in_one_line(tmp_path):
    bp = tmp_path / "baked.yaml"
    bp.write_text((ROOT / "blueprints/aws-training.yaml").read_text() + "image:\n  bake: true\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PULUMI_", "RACKFORM_"))}
    env.update(PATH=os.path.dirname(sys.executable), RACKFORM_PROJECT=str(ROOT),
               RACKFORM_STATE=str(tmp_path / "state"), PULUMI_CONFIG_PASSPHRASE="x")  # fmt: skip
    r = subprocess.run(
        [sys.executable, "-m", "rackform", "image", "build", str(bp), "--env", "dev"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert r.returncode == 2
    (line,) = [ln for ln in r.stderr.splitlines() if ln.startswith("rackform:")]
    assert "the pulumi CLI is not on PATH" in line


# `up` after the stack's update: the wait for the nodes configured at boot. The serving group's
# nodes configure themselves (an AWS inference blueprint); moto's server stands in for Auto
# Scaling and EC2 (tests/moto_server.py), the fake for Pulumi.
INFERENCE = "blueprints/aws-inference.yaml"


def _serving(aws):
    from rackform.blueprint.targets.aws.names import asg_name
    from rackform.engine import prepare
    from rackform.targets.aws.bootstrap import group_artifact

    plan = prepare(ROOT / INFERENCE, "dev").plan
    (g,) = plan.node_groups
    (iid,) = aws.group(asg_name(plan, g), plan.name, g.count, env="dev")
    return plan, iid, group_artifact(plan, g, asg_name(plan, g)).sha256


def _ups(fake) -> list[list[str]]:
    return [c["argv"] for c in fake.calls() if "up" in c["argv"]]


def _held(fake, stack: str) -> dict:
    state = json.loads((fake.tmp / "pulumi-state.json").read_text())
    return json.loads(state["stacks"][stack]["rackform:boot"])


@pytest.mark.usefixtures("no_aws")
def test_up_names_a_node_not_configured_at_boot_records_it_and_exits_3(fake, aws):
    plan, iid, sha = _serving(aws)
    env = moto_server.aws_env(aws.endpoint, {})
    r = fake("up", INFERENCE, "--env", "dev", "--boot-deadline", "0.01", **env)
    assert r.returncode == 3, r.stderr
    assert "waiting up to 0.01 min for the nodes of serve" in r.stdout
    (line,) = [ln for ln in r.stdout.splitlines() if ln.startswith(iid)]
    assert "node group serve): not configured" in line and "rackform up" in line
    assert "0 of 1 nodes configured at boot passed" in r.stdout
    assert "the cluster is not validated" in r.stdout
    # The wait went into the stack's validation: a second update, of the Validate stage alone.
    first, second = _ups(fake)
    assert "--target" not in first
    assert (
        second[second.index("--target") + 1]
        == f"urn:pulumi:{plan.stack}::**::{plan.stack}-validate"
    )
    held = _held(fake, plan.stack)
    assert (held["status"], held["measured"], held["expected"]) == ("fail", 0, 1)
    assert held["detail"] == f"{iid} missing"

    # The node configures itself and tags itself: the next `up` passes, and records it.
    aws.ec2.create_tags(Resources=[iid], Tags=[{"Key": "rackform:configured", "Value": sha}])
    r = fake("up", INFERENCE, "--env", "dev", "--boot-deadline", "0.01", **env)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "every node configured at boot passed (1)" in r.stdout
    assert len(_ups(fake)) == 4 and _held(fake, plan.stack)["status"] == "pass"
    # The same outcome again: the stack holds it already, no second update.
    assert fake("up", INFERENCE, "--env", "dev", "--boot-deadline", "0.01", **env).returncode == 0
    assert len(_ups(fake)) == 5


@pytest.mark.usefixtures("no_aws")
def test_up_with_boot_deadline_0_does_not_wait(fake, aws):
    _serving(aws)  # a node not configured: a wait would name it and exit 3
    env = moto_server.aws_env(aws.endpoint, {})
    r = fake("up", INFERENCE, "--env", "dev", "--boot-deadline", "0", **env)
    assert r.returncode == 0, r.stderr
    assert "not waiting for the nodes of serve" in r.stdout and "waiting up to" not in r.stdout
    assert len(_ups(fake)) == 1


def test_up_of_a_cluster_configured_at_boot_without_the_pulumi_cli_fails_before_waiting(
    fake, tmp_path
):
    empty = tmp_path / "empty"
    empty.mkdir()
    r = fake("up", INFERENCE, "--env", "dev", PATH=str(empty))
    assert r.returncode == 2
    (line,) = r.stderr.strip().splitlines()
    assert "pulumi CLI is not on PATH" in line
    assert "waiting" not in r.stdout and fake.calls() == []


def test_up_refuses_boot_tls_options_that_do_not_go_together_before_pulumi(fake, tmp_path):
    cert = tmp_path / "cert.pem"
    cert.write_text("-----BEGIN CERTIFICATE-----\n")
    r = fake("up", "blueprints/aws-training.yaml", "--env", "dev", "--boot-tls-cert", cert)
    assert r.returncode == 2, r.stdout + r.stderr
    (line,) = r.stderr.strip().splitlines()
    assert "needs its certificate and its key, both" in line
    assert fake.calls() == []
