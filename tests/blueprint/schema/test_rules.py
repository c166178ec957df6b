"""Cross-field rules: each broken rule is reported at the field that breaks it, with a fix."""

from __future__ import annotations

import pytest
from blueprint_helpers import AWS_TRAINING, BARE_METAL

from rackform.blueprint.loader import load_effective
from rackform.blueprint.problems import BlueprintError
from rackform.blueprint.schema.sections import FABRICS
from rackform.blueprint.targets.schemas import SCHEMAS


def messages(write, text):
    with pytest.raises(BlueprintError) as exc:
        load_effective(write(text))
    return {p.path: p for p in exc.value.problems}


def test_valid_bases_load(write):
    assert load_effective(write(AWS_TRAINING)).blueprint.node_groups[0].count == 2
    assert len(load_effective(write(BARE_METAL, "b.yaml")).blueprint.node_groups[0].hosts) == 2


def test_efa_only_on_aws(write):
    out = messages(write, BARE_METAL.replace("infiniband", "efa"))
    assert out["network.fabric"].message == "EFA exists only on AWS"
    assert "infiniband" in out["network.fabric"].fix


def test_infiniband_not_on_aws(write):
    out = messages(write, AWS_TRAINING.replace("fabric: efa", "fabric: infiniband"))
    assert "not available on aws" in out["network.fabric"].message


@pytest.mark.parametrize(
    "extra,path,needle",
    [
        (
            "    gpu: A100-SXM-80GB\n",
            "node_groups[0].gpu",
            "p5.48xlarge carries H100-SXM, not A100-SXM-80GB",
        ),
        ("    gpus_per_node: 4\n", "node_groups[0].gpus_per_node", "p5.48xlarge has 8 GPUs, not 4"),
    ],
)
def test_instance_type_fixes_gpu_model_and_count(write, extra, path, needle):
    text = AWS_TRAINING.replace("    count: 2\n", "    count: 2\n" + extra)
    assert needle in messages(write, text)[path].message


def test_unknown_instance_type_suggests_closest(write):
    out = messages(write, AWS_TRAINING.replace("p5.48xlarge", "p5.48xlrge"))
    assert out["node_groups[0].instance_type"].fix == "did you mean 'p5.48xlarge'?"


def test_host_names_and_addresses_unique(write):
    text = BARE_METAL.replace("{name: n2, address: 10.0.0.2}", "{name: n1, address: 10.0.0.1}")
    out = messages(write, text)
    assert "host 'n1' is listed twice" in out["node_groups[0].hosts[1].name"].message
    assert "is already host 'n1'" in out["node_groups[0].hosts[1].address"].message


def test_same_address_different_ports_is_fine(write):
    text = BARE_METAL.replace(
        "{name: n2, address: 10.0.0.2}", "{name: n2, address: 10.0.0.1, port: 2222}"
    )
    assert load_effective(write(text)).blueprint.node_groups[0].hosts[1].port == 2222


@pytest.mark.parametrize("cidr", ["10.0.0.0/33", "10.0.0.1/8", "banana"])
def test_cidrs_validated(write, cidr):
    out = messages(write, AWS_TRAINING.replace("10.20.0.0/16", cidr))
    assert "is not a valid CIDR" in out["target.ssh_cidrs[0]"].message


@pytest.mark.parametrize(
    ("cidrs", "share"),
    [
        ("0.0.0.0/0", "100%"),
        ("0.0.0.0/1, 128.0.0.0/1", "100%"),  # the internet, in two halves
        ("'::/0'", "100%"),
        ("2000::/4, 3000::/4", "100%"),  # all of IPv6's global unicast
        ("8.0.0.0/8", "0.453%"),  # a public /8: far more than the default limit
    ],
)
def test_ssh_cidrs_that_together_open_the_internet_are_refused(write, cidrs, share):
    text = AWS_TRAINING.replace("[10.20.0.0/16]", f"[{cidrs}]")
    problem = messages(write, text)["target.ssh_cidrs"]
    assert f"open SSH to {share} of the internet" in problem.message


@pytest.mark.parametrize(
    "cidrs", ["10.0.0.0/8, 172.16.0.0/12, 192.168.0.0/16", "203.0.113.7/32", "2001:db8::/32", ""]
)
def test_private_networks_and_a_few_public_addresses_pass(write, cidrs):
    text = AWS_TRAINING.replace("[10.20.0.0/16]", f"[{cidrs}]")
    assert load_effective(write(text)).blueprint.target.ssh_cidrs == tuple(
        c.strip() for c in cidrs.split(",") if c.strip()
    )


def test_the_share_limit_is_configurable(write):
    text = AWS_TRAINING.replace("[10.20.0.0/16]", "[8.0.0.0/8]")
    raised = text.replace("  ssh_cidrs:", "  ssh_max_public_share_pct: 0.5\n  ssh_cidrs:")
    assert load_effective(write(raised)).blueprint.target.ssh_cidrs == ("8.0.0.0/8",)


def test_allow_public_ssh_is_refused_where_nodes_have_no_public_address(write):
    text = AWS_TRAINING.replace("  ssh_cidrs:", "  allow_public_ssh: true\n  ssh_cidrs:")
    problem = messages(write, text)["target.allow_public_ssh"]
    assert "no public address" in problem.message
    assert "Instance Connect Endpoint" in problem.fix


def test_placement_group_by_name_for_training_only(write):
    reserved = AWS_TRAINING.replace(
        "  ssh_cidrs:",
        "  market: reservation\n  reservation_id: cr-0123456789abcdef0\n"
        "  placement_group: reserved-pg\n  ssh_cidrs:",
    )
    assert load_effective(write(reserved)).blueprint.target.placement_group == "reserved-pg"
    inference = (
        AWS_TRAINING.replace("purpose: training", "purpose: inference")
        .replace("fabric: efa", "fabric: ethernet")
        .replace("  ssh_cidrs:", "  placement_group: pg\n  ssh_cidrs:")
    )
    assert (
        "inference nodes are not placed"
        in messages(write, inference)["target.placement_group"].message
    )


def test_replacing_the_dlami_array_needs_allow_wipe_and_a_dlami(write):
    def with_ami(ami: str, extra: str = "") -> str:
        return AWS_TRAINING.replace("  ssh_cidrs:", f"  ami: {ami}\n  ssh_cidrs:") + extra

    out = messages(write, with_ami("{image: dlami-ubuntu-22.04, instance_store: replace}"))
    assert "erases its drives" in out["target.ami.instance_store"].message
    assert "allow_wipe: true" in out["target.ami.instance_store"].fix
    out = messages(write, with_ami("{image: ubuntu-22.04, instance_store: replace}"))
    assert "nothing to replace" in out["target.ami.instance_store"].message
    wipe = "storage: {checkpoint: {allow_wipe: true}}\n"
    ok = with_ami("{image: dlami-ubuntu-22.04, instance_store: replace}", wipe)
    assert load_effective(write(ok)).blueprint.target.ami.instance_store == "replace"


def test_training_and_inference_never_mix(write):
    text = AWS_TRAINING + "workload: {model_params_b: 7, method: serve}\n"
    assert "training and inference never share" in messages(write, text)["workload.method"].message
    inf = AWS_TRAINING.replace("purpose: training", "purpose: inference").replace(
        "fabric: efa", "fabric: ethernet"
    )
    out = messages(write, inf + "workload: {model_params_b: 7, method: full}\n")
    assert "inference cluster cannot run 'full'" in out["workload.method"].message


def test_min_nodes_is_at_most_the_nodes_and_only_for_training(write):
    ok = AWS_TRAINING + "workload: {model_params_b: 7, method: full, min_nodes: 2}\n"
    assert load_effective(write(ok)).blueprint.workload.min_nodes == 2
    out = messages(write, ok.replace("min_nodes: 2", "min_nodes: 3"))["workload.min_nodes"]
    assert out.message == "min_nodes 3 but the node groups have 2 nodes" and "2 or fewer" in out.fix
    assert out.line  # located: the file's line of the field
    inf = AWS_TRAINING.replace("purpose: training", "purpose: inference").replace(
        "fabric: efa", "fabric: ethernet"
    )
    serve = inf + "workload: {model_params_b: 7, method: serve, min_nodes: 1}\n"
    assert "trains nothing" in messages(write, serve)["workload.min_nodes"].message


def test_zone_must_be_in_region(write):
    out = messages(write, AWS_TRAINING.replace("us-east-1a", "us-west-2a"))
    assert "not in region 'us-east-1'" in out["target.availability_zone"].message


def test_reserved_markets_need_a_reservation(write):
    out = messages(
        write, AWS_TRAINING.replace("  ssh_cidrs:", "  market: capacity-block\n  ssh_cidrs:")
    )
    assert out["target.reservation_id"].fix == "add reservation_id: cr-..."


def test_training_groups_do_not_autoscale(write):
    out = messages(
        write, AWS_TRAINING.replace("    count: 2\n", "    count: 2\n    max_count: 4\n")
    )
    assert "do not autoscale" in out["node_groups[0].max_count"].message


def test_bare_metal_count_must_match_hosts(write):
    out = messages(
        write, BARE_METAL.replace("    gpus_per_node: 8\n", "    gpus_per_node: 8\n    count: 3\n")
    )
    assert "count 3 but 2 hosts listed" in out["node_groups[0].count"].message


COLO = """
name: colo
purpose: inference
owner: team@example.com
target:
  type: colocation
  site: s1
  racks: [{name: r1, power_kw: 12}]
node_groups:
  - name: g
    gpu: H100-SXM
    gpus_per_node: 8
    hosts:
      - {name: a, address: 10.0.0.1, rack: r1}
      - {name: b, address: 10.0.0.2, rack: r1}
      - {name: c, address: 10.0.0.3, rack: r9}
network: {fabric: ethernet}
"""


def test_colocation_rack_power_and_membership(write):
    out = messages(write, COLO)
    # 2 hosts x 8 GPUs x 700 W = 11.2 kW fits 12 kW; the host in an unknown rack is an error.
    assert "host 'c' is in no declared rack" in out["node_groups[0].hosts[2].rack"].message
    over = messages(write, COLO.replace("rack: r9", "rack: r1"))
    assert (
        over["target.racks[0].power_kw"].message
        == "rack 'r1' draws 16.8 kW of GPU power against a 12 kW budget"
    )


def test_spot_training_must_checkpoint(write):
    spot = AWS_TRAINING.replace("  ssh_cidrs:", "  market: spot\n  ssh_cidrs:")
    out = messages(write, spot)
    assert (
        out["target.market"].fix == "set workload.checkpoint_interval_min, or use market: on-demand"
    )
    ok = spot + "workload: {model_params_b: 7, method: full, checkpoint_interval_min: 20}\n"
    assert load_effective(write(ok, "ok.yaml")).blueprint.target.market == "spot"


@pytest.mark.parametrize(
    ("region", "zone", "path", "text"),
    [
        ("us-east-9", "us-east-9a", "target.region", "'us-east-9' is not an AWS region"),
        ("us-west-2", "us-east-2a", "target.availability_zone", "is not in region 'us-west-2'"),
        ("us-east-1", "us-east-12", "target.availability_zone", "is not in region 'us-east-1'"),
    ],
)
def test_regions_and_zones_are_checked(write, region, zone, path, text):
    bp = AWS_TRAINING.replace("region: us-east-1", f"region: {region}").replace(
        "availability_zone: us-east-1a", f"availability_zone: {zone}"
    )
    with pytest.raises(BlueprintError) as exc:
        load_effective(write(bp))
    assert any(p.path == path and text in p.message for p in exc.value.problems), [
        str(p) for p in exc.value.problems
    ]


def test_local_zones_and_every_provider_region_are_accepted(write):
    bp = AWS_TRAINING.replace(
        "availability_zone: us-east-1a", "availability_zone: us-east-1-bos-1a"
    )
    assert load_effective(write(bp)).blueprint.target.availability_zone == "us-east-1-bos-1a"
    bp = AWS_TRAINING.replace("region: us-east-1", "region: eu-central-2").replace(
        "availability_zone: us-east-1a", "availability_zone: eu-central-2b"
    )
    assert load_effective(write(bp, "eu.yaml")).blueprint.target.region == "eu-central-2"


def test_every_targets_fabrics_are_the_schemas():
    # A target lists the fabrics it can have; each must be one the schema accepts, or the
    # rule that refuses the others could never be met.
    for kind, schema in SCHEMAS.items():
        assert schema.fabrics and set(schema.fabrics) <= set(FABRICS), kind


def test_a_node_group_field_of_another_target_is_refused_where_it_is_written(write):
    # Each target adds its own node-group fields; on another target's group they are a
    # mistake, named with the target they belong to, at their line.
    metal = BARE_METAL.replace(
        "    gpus_per_node: 8\n", "    gpus_per_node: 8\n    instance_type: p5.48xlarge\n"
    )
    out = messages(write, metal)
    p = out["node_groups[0].instance_type"]
    assert (p.line, p.message, p.fix) == (
        9,
        "instance_type is for aws node groups, not bare_metal",
        "remove instance_type",
    )
    aws = AWS_TRAINING.replace(
        "    count: 2\n", "    count: 2\n    hosts: [{name: a, address: 10.0.0.1}]\n"
    )
    p = messages(write, aws)["node_groups[0].hosts"]
    assert p.message == "hosts is for bare_metal and colocation node groups, not aws"
    # Shown with the other mistakes when the blueprint as a whole does not validate.
    out = messages(write, metal.replace("purpose: training", "purpose: trainin"))
    assert {"purpose", "node_groups[0].instance_type"} <= set(out)
