"""`rackform plan`: the tree and counts, --json, determinism, offline, and user mistakes."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

from blueprint_helpers import AWS_TRAINING, ROOT, rackform

from rackform.blueprint.loader import load_effective
from rackform.engine import compile_effective


def test_plan_prints_the_tree_and_counts():
    r = rackform("plan", "blueprints/aws-training.yaml", "--env", "staging")
    assert r.returncode == 0, r.stderr
    out = r.stdout
    assert "stack llm-train-a-staging" in out
    assert "rackform:cluster:Cluster  llm-train-a-staging" in out
    assert "networkInterfaces=32 (1 efa, 31 efa-only)" in out
    assert "ingress=[all self; tcp/22 <llm-train-a-staging-eice-sg>.id; tcp/22 10.20.0.0/16]" in out
    nodes = compile_effective(
        load_effective(ROOT / "blueprints/aws-training.yaml", "staging")
    ).nodes
    assert re.search(rf"^ +{nodes}  aws:ec2/instance:Instance$", out, re.MULTILINE)
    assert re.search(r"^ +1  aws:ec2/placementGroup:PlacementGroup$", out, re.MULTILINE)
    lines = out.splitlines()
    # Children are indented under their parent.
    top = next(i for i, line in enumerate(lines) if line.startswith("rackform:cluster:Cluster"))
    after = [line for line in lines[top + 1 :] if not line.startswith("    ")]  # continuations
    assert after[0].startswith("  rackform:")


def test_plan_folds_many_identical_instances_into_one_line(write):
    path = write(
        (ROOT / "blueprints" / "aws-training.yaml").read_text().replace("count: 4", "count: 40")
    )
    r = rackform("plan", path)
    assert r.returncode == 0, r.stderr
    assert "llm-train-a-default-gpu-{0..39} (40)" in r.stdout
    assert "40  aws:ec2/instance:Instance" in r.stdout


def test_plan_json_lists_every_resource_with_parent_and_inputs():
    r = rackform("plan", "blueprints/aws-inference.yaml", "--env", "dev", "--json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["stack"] == "llm-serve-a-dev"
    names = {x["name"] for x in doc["resources"]}
    for res in doc["resources"]:
        assert set(res) >= {"type", "name", "parent", "inputs"}
        assert res["parent"] is None or res["parent"] in names
    assert doc["counts"]["aws:autoscaling/group:Group"] == 1
    assert "aws:ec2/placementGroup:PlacementGroup" not in doc["counts"]
    assert sum(doc["counts"].values()) == len(doc["resources"])
    asg = next(x for x in doc["resources"] if x["type"] == "aws:autoscaling/group:Group")
    assert (asg["inputs"]["minSize"], asg["inputs"]["desiredCapacity"]) == (1, 1)
    # Beside the inputs, the options that decide how a change reaches the resource.
    assert asg["options"] == {
        "ignore_changes": ["desiredCapacity"],
        "replace_on_changes": [],
        "delete_before_replace": False,
    }
    refresh = asg["inputs"]["instanceRefresh"]["preferences"]
    assert (refresh["minHealthyPercentage"], refresh["maxHealthyPercentage"]) == (100, 200)
    assert doc["rollout"]["strategy"] == "create-first"


def test_plan_shows_training_nodes_deleted_first_and_the_downtime():
    r = rackform("plan", "blueprints/aws-training.yaml", "--json")
    doc = json.loads(r.stdout)
    nodes = [x for x in doc["resources"] if x["type"] == "aws:ec2/instance:Instance"]
    assert nodes and all(x["options"]["delete_before_replace"] for x in nodes)
    assert doc["rollout"]["strategy"] == "delete-first"
    assert "placement group" in doc["rollout"]["why"]
    text = rackform("plan", "blueprints/aws-training.yaml").stdout
    assert "[delete-before-replace]" in text
    assert "Rollout: delete-first" in text and "the cluster is down until" in text


def test_a_target_that_creates_no_nodes_has_no_rollout_in_its_plan():
    # The replacement story is the target's own (its runtime's `replacement`): hosts a site
    # lists are never replaced by the stack.
    doc = json.loads(rackform("plan", "blueprints/colo-inference.yaml", "--json").stdout)
    assert doc["resources"] and doc["rollout"] is None
    assert "Rollout:" not in rackform("plan", "blueprints/colo-inference.yaml").stdout


def test_plan_is_deterministic_and_needs_no_credentials_network_or_cli(tmp_path):
    # An empty PATH (no pulumi, no ssh), no HOME, no AWS credentials, a proxy that goes
    # nowhere: the plan must not notice.
    env = {
        "PATH": str(tmp_path),
        "HOME": str(tmp_path),
        "PYTHONPATH": str(ROOT),
        "HTTPS_PROXY": "http://127.0.0.1:9",
        "HTTP_PROXY": "http://127.0.0.1:9",
        "AWS_EC2_METADATA_DISABLED": "true",
    }
    cmd = [sys.executable, "-m", "rackform", "plan", "blueprints/colo-inference.yaml", "--json"]
    runs = [subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True) for _ in (1, 2)]
    assert all(r.returncode == 0 for r in runs), runs[0].stderr
    assert runs[0].stdout == runs[1].stdout
    assert not os.listdir(tmp_path)  # nothing written to HOME


def test_plan_invalid_blueprint_exits_2_with_located_problem(write):
    path = write(
        """
        name: x
        purpose: training
        owner: a@example.com
        target: {type: aws, region: us-east-1, availability_zone: us-east-1a, ssh_cidrs: [10.0.0.0/8], markt: spot}
        node_groups: [{name: gpu, instance_type: p5.48xlarge, count: 1}]
        network: {fabric: efa}
        """
    )
    r = rackform("plan", path)
    assert r.returncode == 2
    assert "Traceback" not in r.stderr
    assert ":4:" in r.stderr and "markt" in r.stderr


def test_plan_program_error_exits_2(write):
    path = write(
        (ROOT / "blueprints" / "aws-training.yaml")
        .read_text()
        .replace("market: on-demand", "market: on-demand\n  vpc_cidr: 10.9.0.0/28")
    )
    r = rackform("plan", path)
    assert r.returncode == 2, r.stderr
    line = next(i + 1 for i, text in enumerate(path.read_text().splitlines()) if "vpc_cidr" in text)
    assert r.stderr.startswith(f"{path}:{line}:")
    assert "target.vpc_cidr: 10.9.0.0/28 is too small" in r.stderr
    assert "(fix: use a /27 or larger" in r.stderr
    assert "Traceback" not in r.stderr


def test_plan_unknown_environment_exits_2():
    r = rackform("plan", "blueprints/aws-training.yaml", "--env", "qa")
    assert r.returncode == 2
    assert "unknown environment 'qa'" in r.stderr


def test_env_default_is_the_base_blueprint():
    base = rackform("plan", "blueprints/baremetal-training.yaml", "--json")
    named = rackform("plan", "blueprints/baremetal-training.yaml", "--env", "default", "--json")
    assert base.returncode == named.returncode == 0, named.stderr
    assert base.stdout == named.stdout


def test_plan_shows_findings_and_cost_and_blocks_on_a_preflight_error(write):
    # A 4-node full fine-tune over plain ethernet: preflight's fabric-missing error.
    path = write(
        AWS_TRAINING.replace("fabric: efa", "fabric: ethernet").replace("count: 2", "count: 4")
        + "workload: {model_params_b: 13, method: full, checkpoint_interval_min: 60}\n"
    )
    r = rackform("plan", path)
    assert r.returncode == 2
    assert "4 x p5.48xlarge on-demand" in r.stdout and "total" in r.stdout
    assert "error fabric-missing" in r.stderr
    assert f"{path}:13:19: network.fabric: error fabric-missing" in r.stderr
    doc = json.loads(rackform("plan", path, "--json").stdout)
    assert {f["code"] for f in doc["findings"] if f["level"] == "error"} == {"fabric-missing"}
    assert doc["cost"]["usd_per_hour"] > 0


def test_plan_lines_fit_the_terminal(tmp_path):
    # Lines of up to 481 characters used to ignore the terminal's width.
    env = {**os.environ, "COLUMNS": "100", "PYTHONPATH": str(ROOT)}
    cmd = [sys.executable, "-m", "rackform", "plan", "blueprints/aws-training.yaml", "-e", "dev"]
    r = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    for line in r.stdout.splitlines():
        if len(line) > 100:
            # Only a line holding one input too long to split may pass the width.
            assert "  " not in line.strip(), line
    assert "networkInterfaces=32 (1 efa, 31 efa-only)" in r.stdout  # an input is never split


def test_help_is_rewrapped_not_broken_mid_sentence():
    top = rackform("--help")
    assert top.returncode == 0
    commands = top.stdout.split("Commands:")[1].splitlines()
    assert all(line.startswith("  ") and line[2] != " " for line in commands if line.strip())
    smoke = rackform("smoke", "--help")
    assert "Processes: default one per GPU, or 2 on CPU." in smoke.stdout


def test_plan_shows_the_node_images_builder_under_the_cluster(write):
    path = write((ROOT / "blueprints" / "aws-training.yaml").read_text() + "image:\n  bake: true\n")
    r = rackform("plan", path, "--env", "dev", "--json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    image = [x for x in doc["resources"] if x["parent"] == "llm-train-a-dev-node-image"]
    assert {x["type"] for x in image} >= {
        "aws:imagebuilder/component:Component",
        "aws:imagebuilder/imageRecipe:ImageRecipe",
        "aws:imagebuilder/infrastructureConfiguration:InfrastructureConfiguration",
        "aws:imagebuilder/distributionConfiguration:DistributionConfiguration",
        "aws:imagebuilder/image:Image",
    }
    plain = json.loads(
        rackform("plan", "blueprints/aws-training.yaml", "--env", "dev", "--json").stdout
    )
    assert not [x for x in plain["resources"] if "imagebuilder" in x["type"]]


def test_plan_shows_the_data_tiers_own_stack_first_where_the_blueprint_keeps_a_file_system(
    write,
):
    import yaml

    doc = yaml.safe_load((ROOT / "blueprints" / "aws-training.yaml").read_text())
    doc["storage"] = {**doc["storage"], "shared": {"fsx": {"storage_tib": 2.4}}}
    path = write(yaml.safe_dump(doc, sort_keys=False))
    r = rackform("plan", path, "--json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    data = doc["data"]
    assert (data["stack"], data["kept"]) == ("llm-train-a-default-data", True)
    fs = next(x for x in data["resources"] if x["type"].endswith("LustreFileSystem"))
    assert fs["protect"] and fs["inputs"]["subnetIds"] == "<llm-train-a-default-nodes>.id"
    assert all(x["protect"] for x in data["resources"])
    assert sum(data["counts"].values()) == len(data["resources"])
    # The cluster's stack reads the network it shares with the file system, holds none of it.
    names = {x["name"] for x in doc["resources"]}
    assert not names & {x["name"] for x in data["resources"]}
    assert "aws:fsx/lustreFileSystem:LustreFileSystem" not in doc["counts"]
    out = rackform("plan", path).stdout
    assert out.index("Data tier: stack llm-train-a-default-data") < out.index(
        "Cluster: stack llm-train-a-default, reading the data tier's ids"
    )
    assert "Data tier's resources by type:" in out


def test_a_plan_without_a_kept_file_system_has_no_data_tier():
    r = rackform("plan", "blueprints/aws-training.yaml", "--env", "dev", "--json")
    assert "data" not in json.loads(r.stdout)
    assert "Data tier" not in rackform("plan", "blueprints/aws-training.yaml").stdout
