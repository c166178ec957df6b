"""The checkpoint-interval finding: the declared interval against Daly's, C from the tier's
speed, the cluster's measured write speed, or an asynchronous checkpoint's copy to host
memory; the failure rate from the catalog or the cluster's own audit log."""

from __future__ import annotations

import math

import pytest
from preflight_bp import aws, found, load

from rackform.blueprint.loader import load_effective
from rackform.engine import compile_effective
from rackform.plan.interval import HOUR, FailureRate, Measured

W = {"model_params_b": 70, "method": "full", "checkpoint_interval_min": 30}
LLAMA3 = 419 / (2048 * 54 * 24)  # the catalog's rate, per node-hour


def test_a_large_job_checkpointing_hourly_gets_a_finding(tmp_path):
    data = aws(count=512, workload={**W, "checkpoint_interval_min": 60})
    iv = load(tmp_path, data).interval
    # 980 GB over 512 nodes at 28 GB/s each: C = 980 / 14,336 = 0.0684 s; the job's MTBF
    # 1 / (512 x 1.5786e-4) h = 12.37 h.
    assert iv.c_s == pytest.approx(980 / (28 * 512))
    assert iv.job_mtbf_s / HOUR == pytest.approx(1 / (512 * LLAMA3), rel=1e-3)
    assert iv.best_s == pytest.approx(math.sqrt(2 * iv.c_s * iv.job_mtbf_s), rel=0.01)
    f = found(tmp_path, data)["checkpoint-interval"]
    assert (f.level, f.path) == ("warning", ("workload", "checkpoint_interval_min"))
    assert f"every {iv.best_s / 60:.0f} min would keep" in f.message
    assert "catalog: llama3-2024" in f.message and "estimated: 980 GB" in f.message
    assert f.fix == f"set workload.checkpoint_interval_min to {iv.best_s / 60:.0f}"


def test_a_small_cluster_near_its_best_interval_has_none(tmp_path):
    data = aws(count=4, workload=W)
    iv = load(tmp_path, data).interval
    assert iv.loss_points < 1
    assert "checkpoint-interval" not in found(tmp_path, data)


def test_no_interval_without_a_training_checkpoint(tmp_path):
    serve = aws(instance="g5.xlarge", fabric="ethernet", purpose="inference",
                workload={"model_params_b": 7, "method": "serve"})  # fmt: skip
    assert load(tmp_path, serve).interval is None
    undeclared = load(tmp_path, aws(count=4, workload={**W, "checkpoint_interval_min": None}))
    assert undeclared.interval.goodput_declared is None
    assert "checkpoint-interval" not in found(
        tmp_path, aws(count=4, workload={"model_params_b": 70, "method": "full"})
    )


def test_an_asynchronous_checkpoint_blocks_for_the_copy_to_host_memory(tmp_path):
    data = aws(count=4, workload={**W, "checkpoint_async": True, "checkpoint_interval_min": 1})
    iv = load(tmp_path, data).interval
    # 980 GB over 4 nodes of 8 GPUs: 30.625 GB a GPU at PCIe Gen5 x16's 64 GB/s = 0.4785 s;
    # the restart still reads the whole checkpoint back (980 / 112 = 8.75 s).
    assert iv.asynchronous and iv.c_s == pytest.approx(30.625 / 64)
    assert iv.r_s == pytest.approx(8.75)
    assert "PCIe Gen5 x16" in iv.c_source
    out = found(tmp_path, data)
    # Synchronous, 8.75 s every minute is 14.6% of training: an error; asynchronous, 0.8%.
    assert "checkpoint-overhead" not in out and "checkpoint-slow" not in out
    sync = found(tmp_path, aws(count=4, workload={**W, "checkpoint_interval_min": 1}))
    assert "14.6% of training time" in sync["checkpoint-overhead"].message


def _compiled(tmp_path, data, measured):
    path = tmp_path / "bp.yaml"
    load(tmp_path, data)  # writes it
    return compile_effective(load_effective(path), measured=measured)


def test_the_measured_write_speed_replaces_the_estimate(tmp_path):
    m = Measured(checkpoint_gbps=7.0, checkpoint_source="measured in evidence.json")
    iv = _compiled(tmp_path, aws(count=4, workload=W), m).interval
    assert iv.c_s == pytest.approx(980 / (7 * 4))  # 35 s
    assert iv.c_source == "measured in evidence.json: 980 GB at 7 GB/s per node x 4 nodes"


def test_the_audit_logs_rate_only_with_enough_node_hours(tmp_path):
    own = FailureRate(1e-3, "audit log", 0.75, 0.15, 0.10, True, 40, 40_000.0)
    iv = _compiled(tmp_path, aws(count=4, workload=W), Measured(failures=own)).interval
    assert iv.rate is own and iv.job_mtbf_s == pytest.approx(HOUR / 4e-3)
    few = FailureRate(1e-3, "audit log", 0.75, 0.15, 0.10, True, 2, 2_000.0)
    iv = _compiled(tmp_path, aws(count=4, workload=W), Measured(failures=few)).interval
    assert iv.rate.source.startswith("catalog: llama3-2024")
