"""How `rackform plan` says each node group is configured and about how long it takes: push in
rounds of the run's width (the endpoint's 20 connections where the inventory tunnels), boot all
at once; the figures from the catalog."""

from __future__ import annotations

import json

from blueprint_helpers import rackform
from planhelp import AWS_INFERENCE, AWS_TRAINING, COLOCATION, variant, write_blueprint

from rackform.blueprint.loader import load_effective
from rackform.catalog.preflight import load_preflight_figures
from rackform.engine import compile_effective
from rackform.plan.configuring import configuring, fork_width

FIGURES = load_preflight_figures().configure
NODE_S = FIGURES.node_converge_s.value


def planned(tmp_path, doc):
    return configuring(compile_effective(load_effective(write_blueprint(tmp_path, doc))))


def test_512_aws_training_nodes_are_pushed_20_at_a_time_through_the_endpoint(tmp_path):
    doc = variant(AWS_TRAINING, **{"node_groups.0.count": 512})
    (c,) = planned(tmp_path, doc)
    assert (c.how, c.nodes, c.width, c.rounds) == ("push", 512, 20, 26)  # ceil(512 / 20)
    assert c.expected_s == 26 * NODE_S and "Instance Connect Endpoint" in c.why


def test_listed_hosts_are_pushed_all_at_once_and_serving_groups_configure_at_boot(tmp_path):
    (colo,) = planned(tmp_path, COLOCATION)
    assert (colo.how, colo.width, colo.rounds, colo.expected_s, colo.why) == (
        "push", 3, 1, NODE_S, ""
    )  # fmt: skip
    big = variant(AWS_INFERENCE, **{"node_groups.0.count": 300, "node_groups.0.max_count": 400})
    (serve,) = planned(tmp_path, big)
    # Each node on its own at boot: the count changes nothing.
    assert (serve.how, serve.width, serve.rounds, serve.expected_s) == ("boot", 300, 1, NODE_S)


def test_the_width_is_bounded_by_the_tunnel_then_by_half_the_controllers_memory():
    assert fork_width(3, False, None, FIGURES) == (5, "")  # Ansible's default at least
    assert fork_width(100, True, None, FIGURES)[0] == 20
    width, why = fork_width(400, False, 2_000, FIGURES)  # 1,000 MiB at 40 MiB a fork: 25
    assert width == 25 and "half of the controller's 2000 MiB" in why
    assert fork_width(400, False, 100, FIGURES)[0] == 5


def test_plan_shows_the_configuration_in_text_and_json():
    doc = json.loads(rackform("plan", "blueprints/aws-inference.yaml", "--json").stdout)
    (group,) = doc["configuration"]["groups"]
    assert group["how"] == "boot" and doc["configuration"]["node_converge_s"] == NODE_S
    text = rackform("plan", "blueprints/baremetal-training.yaml").stdout
    assert "Configuration (one node's converge 1,417 s" in text
    assert "pushed from the controller over SSH" in text


def test_a_baked_images_nodes_that_configure_at_boot_take_the_baked_figure(tmp_path):
    # The image's roles skipped at boot (measured on the testbed); push runs every role, so a
    # pushed group of a baked blueprint keeps the plain figure.
    baked = {**AWS_INFERENCE, "image": {"bake": True}}
    (serve,) = planned(tmp_path, baked)
    assert serve.how == "boot" and serve.baked
    assert serve.expected_s == FIGURES.node_boot_baked_s.value < NODE_S
    (train,) = planned(tmp_path, {**AWS_TRAINING, "image": {"bake": True}})
    assert train.how == "push" and not train.baked and train.per_node_s == NODE_S
    (plain,) = planned(tmp_path, AWS_INFERENCE)
    assert not plain.baked and plain.expected_s == NODE_S
