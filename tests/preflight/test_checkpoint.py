"""Checkpoint rules: the numbers the domain notes pin, and where each finding points."""

from __future__ import annotations

import pytest
from preflight_bp import aws, bare, found, load

W70 = {
    "model_params_b": 70,
    "method": "full",
    "checkpoint_contents": "weights",
    "checkpoint_interval_min": 30,
}


def storage(gbps: float) -> dict:
    return {"checkpoint": {"write_gbps": gbps}}


def test_70b_weights_at_1_gbps_every_30_min_is_an_error(tmp_path):
    data = bare(workload=W70, storage=storage(1))
    t = load(tmp_path, data).sizing.checkpoint
    assert t.size_gb == 140
    assert t.seconds == pytest.approx(140)
    assert t.seconds / 1800 == pytest.approx(0.078, abs=0.001)
    out = found(tmp_path, data)
    f = out["checkpoint-overhead"]
    assert (f.level, f.path) == ("error", ("workload", "checkpoint_interval_min"))
    assert "a 140 GB checkpoint at 1 GB/s per node" in f.message
    assert "takes 140.0 s every 30 min: 7.8% of training time" in f.message
    assert "checkpoint every 117 min or more" in f.fix  # 140 s is 2% of 117 min
    assert out["checkpoint-slow"].path == ("storage", "checkpoint", "write_gbps")


def test_70b_weights_at_20_gbps_passes(tmp_path):
    data = bare(workload=W70, storage=storage(20))
    t = load(tmp_path, data).sizing.checkpoint
    assert t.seconds == pytest.approx(7)
    assert t.seconds / 1800 == pytest.approx(0.004, abs=0.0005)  # about 0.4%
    out = found(tmp_path, data)
    assert "checkpoint-overhead" not in out and "checkpoint-slow" not in out


def test_full_state_suggests_weights_only(tmp_path):
    w = {**W70, "checkpoint_contents": "full"}  # 980 GB at 20 GB/s: 49 s, 2.7%
    f = found(tmp_path, bare(workload=w, storage=storage(20)))["checkpoint-overhead"]
    assert "2.7%" in f.message
    assert "checkpoint_contents: weights" in f.fix


def test_fsdp_nodes_write_their_shards_in_parallel(tmp_path):
    w = {"model_params_b": 70, "method": "full", "checkpoint_interval_min": 30}
    t = load(tmp_path, aws(count=4, workload=w)).sizing.checkpoint
    # p5.48xlarge: 8 instance-store drives x 3.5 GB/s in RAID0, four nodes at once.
    assert (t.size_gb, t.node_gbps, t.writers) == (980, 28, 4)
    assert t.seconds == pytest.approx(980 / 112)
    ddp = load(tmp_path, aws(count=4, workload={**w, "sharding": "ddp"})).sizing.checkpoint
    assert ddp.writers == 1 and ddp.seconds == pytest.approx(35)


def test_checkpoints_kept_must_fit_the_array(tmp_path):
    w = {"model_params_b": 70, "method": "full", "sharding": "ddp", "checkpoints_retained": 40}
    f = found(tmp_path, aws(count=4, workload=w))["checkpoint-capacity"]
    assert f.path == ("workload", "checkpoints_retained")
    assert "39,200 GB on each node's array, which holds 30,720 GB" in f.message
    w["checkpoints_retained"] = 3
    assert "checkpoint-capacity" not in found(tmp_path, aws(count=4, workload=w))


def test_raid_level_needs_enough_drives(tmp_path):
    data = aws("g5.xlarge", fabric="ethernet", storage={"checkpoint": {"raid_level": 10}})
    f = found(tmp_path, data)["checkpoint-raid-drives"]
    assert "RAID10 needs at least 2 drives but g5.xlarge has 1" in f.message
    listed = bare(storage={"checkpoint": {"raid_level": 5, "devices": ["nvme-a", "nvme-b"]}})
    assert "checkpoint-raid-drives" in found(tmp_path, listed)


def test_unknown_write_speed_is_reported_not_passed(tmp_path):
    f = found(tmp_path, bare(workload=W70))["checkpoint-throughput-unknown"]
    assert f.level == "warning" and "were not checked" in f.message
    assert "checkpoint-overhead" not in found(tmp_path, bare(workload=W70))
