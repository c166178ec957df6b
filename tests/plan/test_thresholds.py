"""Thresholds as data: catalog defaults per GPU model and node count, blueprint overrides, a
source for every figure, and None (never a guess) where no calibrated figure exists."""

from __future__ import annotations

import re

import pytest
from blueprint_helpers import AWS_TRAINING, BARE_METAL

from rackform.acceptance.argv import job_argv
from rackform.blueprint.loader import load_effective
from rackform.catalog import load_catalog
from rackform.engine import compile_effective
from rackform.plan.model import thaw
from rackform.plan.thresholds import GroupError, for_group, without_blueprint

# Each catalog model's device-name pattern (gpus.yaml `device_name`).
DEVICE_NAMES = {k: g.device_name for k, g in load_catalog().gpus.items()}


def job_args(e) -> list[str]:
    """The smoke job's arguments from the expectations, as `rackform smoke` builds them (the
    one builder: rackform/acceptance/argv.py), without the run's own steps and directory."""
    return job_argv(e, steps=1, checkpoint_dir="/ck", nodes=e.nodes)[4:]


def spec_of(write, text: str, env: str | None = None):
    return compile_effective(load_effective(write(text), env))


def test_p5_single_node_defaults(write):
    e = for_group(spec_of(write, AWS_TRAINING), nodes=1)
    assert (e.gpu_model, e.gpus_per_node, e.nodes, e.fabric) == ("H100-SXM", 8, 1, "efa")
    assert e.peak_tflops.value == 989
    assert e.allreduce_busbw_gbps.value == 460  # azurehpc-health-checks 8xH100
    assert "azurehpc-health-checks" in e.allreduce_busbw_gbps.source
    # Calibrated on an H100: 0.8 x the median of three measured runs (36.3%).
    assert e.mfu_pct.value == 29.0 and "H100-SXM smoke_mfu_pct_min" in e.mfu_pct.source
    assert "rackform-h100-smoke" in e.mfu_pct.source
    # 8 instance-store drives x 3.5 GB/s (an estimate) in RAID 0; a quarter of it.
    assert e.checkpoint_write_gbps.value == 7.0
    assert "estimate: 8 drives x 3.5 GB/s" in e.checkpoint_write_gbps.source
    # An estimate is no claim to verify: the storage ceiling has no floor.
    assert e.storage_write_gbps.value is None
    assert e.loss_drop_fraction.value == 0.2
    assert e.checkpoint_dir == "/mnt/checkpoints"


def test_multi_node_is_point_nine_over_rdma_only(write):
    spec = spec_of(write, AWS_TRAINING)
    two = for_group(spec, nodes=2).allreduce_busbw_gbps
    assert two.value == 414.0 and "0.9 x" in two.source
    eth = for_group(
        spec_of(write, AWS_TRAINING.replace("fabric: efa", "fabric: ethernet")), nodes=2
    ).allreduce_busbw_gbps
    assert eth.value is None and "ethernet" in eth.source


def test_declared_array_speed_sets_both_storage_floors(write):
    bm = BARE_METAL + "storage: {checkpoint: {write_gbps: 24}}\n"
    e = for_group(spec_of(write, bm))
    assert e.storage_write_gbps.value == 19.2  # 0.8 x declared
    assert e.checkpoint_write_gbps.value == 6.0  # 0.25 x declared
    assert e.fabric == "infiniband"
    assert for_group(spec_of(write, BARE_METAL)).checkpoint_write_gbps.value is None


def test_blueprint_overrides_win_and_say_so(write):
    text = AWS_TRAINING + (
        "validation:\n  thresholds: {allreduce_busbw_gbps: 400, mfu_pct: 40,"
        " checkpoint_write_gbps: 2.5, loss_drop_fraction: 0.5}\n"
    )
    e = for_group(spec_of(write, text), nodes=4)
    assert e.allreduce_busbw_gbps.value == 400
    assert e.mfu_pct.value == 40
    assert e.checkpoint_write_gbps.value == 2.5
    assert e.loss_drop_fraction.value == 0.5
    for t in (e.allreduce_busbw_gbps, e.mfu_pct, e.checkpoint_write_gbps, e.loss_drop_fraction):
        assert t.source.startswith("blueprint validation.thresholds.")


def test_environment_overrides_reach_the_thresholds(write):
    text = AWS_TRAINING + "environments:\n  dev: {validation: {thresholds: {mfu_pct: 10}}}\n"
    assert for_group(spec_of(write, text, "dev")).mfu_pct.value == 10
    assert for_group(spec_of(write, text)).mfu_pct.value == 29.0


@pytest.mark.parametrize("gpu", ["H200-SXM", "A100-SXM-80GB", "L4"])
def test_an_mfu_floor_never_measured_on_the_gpu_is_the_default_and_says_so(write, gpu):
    text = BARE_METAL.replace("gpu: H100-SXM", f"gpu: {gpu}")
    t = for_group(spec_of(write, text)).mfu_pct
    assert t.value == 25.0 and f"{gpu}'s own floor is still to be measured" in t.source


@pytest.mark.parametrize(
    ("gpu", "per_node", "why"),
    [
        ("A100-SXM-40GB", 8, "no calibrated all-reduce figure for A100-SXM-40GB"),
        ("H100-SXM", 4, "for 8 GPUs per node, not 4"),
    ],
)
def test_no_calibrated_figure_is_none_with_the_reason(write, gpu, per_node, why):
    text = BARE_METAL.replace("gpu: H100-SXM", f"gpu: {gpu}").replace(
        "gpus_per_node: 8", f"gpus_per_node: {per_node}"
    )
    t = for_group(spec_of(write, text)).allreduce_busbw_gbps
    assert t.value is None and why in t.source


def test_cpu_only_group_expects_no_gpu(write):
    text = BARE_METAL.replace("    gpu: H100-SXM\n    gpus_per_node: 8\n", "")
    e = for_group(spec_of(write, text))
    assert e.gpus_per_node == 0 and e.gpu_model is None
    assert e.peak_tflops.value is None and e.mfu_pct.value is None
    assert e.nccl is None
    assert "--expect-gpus" in job_args(e) and "--peak-tflops" not in job_args(e)


def test_expected_node_count_is_the_groups_in_the_environment(write):
    """With a blueprint the node count is declared: never left for the job to call 'not
    given'. A single-node group included (it used to be dropped when it was 1)."""
    text = AWS_TRAINING + "environments:\n  dev: {node_groups: [{name: gpu, count: 1}]}\n"
    default, dev = for_group(spec_of(write, text)), for_group(spec_of(write, text, "dev"))
    assert default.nodes == 2 and default.allreduce_busbw_gbps.value == 414.0  # 2-node floor
    assert dev.nodes == 1 and dev.allreduce_busbw_gbps.value == 460
    assert job_args(default)[:2] == ["--expect-nodes", "2"]
    assert job_args(dev)[:2] == ["--expect-nodes", "1"]
    # A run meant to cover fewer nodes (`rackform smoke --nodes 1`) says so explicitly.
    one = for_group(spec_of(write, text), nodes=1)
    assert job_args(one)[:2] == ["--expect-nodes", "1"] and one.allreduce_busbw_gbps.value == 460
    assert "--expect-nodes" not in job_args(without_blueprint())  # nothing declared


def test_job_and_host_arguments(write):
    e = for_group(spec_of(write, AWS_TRAINING), nodes=2)
    args = job_args(e)
    pairs = dict(zip(args[::2], args[1::2], strict=True))
    assert pairs == {
        "--expect-nodes": "2",
        "--expect-gpus": "8",
        "--expect-gpu-model": "H100-SXM",
        "--expect-gpu-pattern": DEVICE_NAMES["H100-SXM"],
        "--expect-fabric": "efa",
        "--expect-nccl": "2.21.5",
        "--peak-tflops": "989",
        "--mfu-min": "29",
        "--busbw-min": "414",
        "--checkpoint-write-min": "7",
        "--loss-drop": "0.2",
    }
    assert e.host_args() == [
        "--dcgm-level", "1", "--expect-gpus", "8",
        # The catalog's H100 SXM: 18 NVLinks, PCIe gen 5, an 8-GPU board of NVSwitches.
        "--expect-nvlinks", "18", "--expect-pcie-gen", "5", "--expect-fabric-manager",
    ]  # fmt: skip


@pytest.mark.parametrize(
    ("gpu", "per_node", "links"),
    [
        ("H100-SXM", 4, ["--expect-nvlinks", "18", "--expect-pcie-gen", "5"]),  # no NVSwitch
        ("A100-SXM-80GB", 8, ["--expect-nvlinks", "12", "--expect-pcie-gen", "4",
                              "--expect-fabric-manager"]),
        ("L4", 4, ["--expect-pcie-gen", "4"]),  # no NVLink on the model
        ("H100-PCIe", 2, ["--expect-pcie-gen", "5"]),  # its NVLink bridge is optional
        ("A10G", 1, []),  # the catalog gives neither
    ],
)  # fmt: skip
def test_the_links_a_node_must_have_come_from_the_catalog(write, gpu, per_node, links):
    text = BARE_METAL.replace(
        "gpu: H100-SXM\n    gpus_per_node: 8", f"gpu: {gpu}\n    gpus_per_node: {per_node}"
    )
    assert text != BARE_METAL
    args = for_group(spec_of(write, text)).host_args()
    assert args[:4] == ["--dcgm-level", "1", "--expect-gpus", str(per_node)]
    flags = ("--expect-nvlinks", "--expect-pcie-gen", "--expect-fabric-manager")
    i = next((args.index(f) for f in flags if f in args), len(args))
    assert args[i:] == links


def test_groups(write):
    two = BARE_METAL.replace(
        "network:",
        "  - name: small\n    gpu: L4\n    gpus_per_node: 4\n"
        "    hosts: [{name: s1, address: 10.0.0.9}]\nnetwork:",
    )
    spec = spec_of(write, two)
    with pytest.raises(GroupError, match="pick one with --group"):
        for_group(spec)
    with pytest.raises(GroupError, match="no node group 'big'; the cluster has hgx, small"):
        for_group(spec, "big")
    assert for_group(spec, "small").gpu_model == "L4"
    # The plan carries each group's expectations, and no cluster-wide set for one job across
    # different groups: the roles get no thresholds then.
    by_group = spec.group_expectations
    assert {n: e.gpu_model for n, e in by_group.items()} == {"hgx": "H100-SXM", "small": "L4"}
    assert by_group["small"] == for_group(spec, "small") and by_group["hgx"].nodes == 2
    assert spec.expectations is None and spec.group_vars["smoke_train_job_args"] == ()


def test_without_blueprint_expects_nothing_but_learning():
    e = without_blueprint()
    assert e.gpus_per_node is None and e.gpu_model is None
    assert job_args(e) == ["--loss-drop", "0.2"]
    assert all(v is None for n, v, _ in e.table() if n != "loss_drop_fraction")


def test_every_catalog_gpu_has_a_device_name_pattern():
    assert all(isinstance(p, str) and p for p in DEVICE_NAMES.values()), DEVICE_NAMES


@pytest.mark.parametrize(
    ("name", "model"),
    [
        ("NVIDIA H100 80GB HBM3", "H100-SXM"),
        ("NVIDIA H100 PCIe", "H100-PCIe"),
        ("NVIDIA H200", "H200-SXM"),
        ("NVIDIA A100-SXM4-80GB", "A100-SXM-80GB"),
        ("NVIDIA L40S", "L40S"),
        ("NVIDIA L4", "L4"),
        ("NVIDIA A10G", "A10G"),
    ],
)
def test_device_names_match_exactly_one_model(name, model):
    hits = [k for k, pat in DEVICE_NAMES.items() if re.search(pat, name)]
    assert hits == [model]


def test_the_role_still_gets_no_expect_nodes(write):
    """The smoke_train role adds --expect-nodes itself from the nodes in the run; the plan's
    job arguments, which now always declare the count, reach it without one."""
    text = AWS_TRAINING + "environments:\n  dev: {node_groups: [{name: gpu, count: 1}]}\n"
    for env in (None, "dev"):
        plan = spec_of(write, text, env)
        assert "--expect-nodes" in job_args(plan.expectations)
        role = thaw(plan.group_vars)["smoke_train_job_args"]
        assert "--expect-nodes" not in role
        assert role == job_args(plan.expectations)[2:]
