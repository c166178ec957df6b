"""Utilization rules: the gap to 85% priced, and the way capacity is bought."""

from __future__ import annotations

from preflight_bp import aws, bare, found

from rackform.blueprint.targets.aws.catalog import load_aws_catalog


def work(pct: float, **kw) -> dict:
    return {"model_params_b": 13, "method": "full", "expected_utilization_pct": pct, **kw}


def test_gap_to_target_is_priced(tmp_path):
    f = found(tmp_path, aws(count=2, workload=work(65)))["utilization-gap"]
    assert (f.level, f.path) == ("warning", ("workload", "expected_utilization_pct"))
    month = 2 * load_aws_catalog().instance("p5.48xlarge").on_demand_usd_hr.value * 730
    idle = month * (1 - 65 / 85)
    assert f"about ${idle:,.0f}/month of GPUs paid for and idle" in f.message
    assert "utilization-gap" not in found(tmp_path, aws(count=2, workload=work(85)))


def test_gap_names_the_extra_run_cost(tmp_path):
    f = found(tmp_path, aws(count=2, workload=work(65, tokens_b=10)))["utilization-gap"]
    assert "and the run costs $" in f.message and "more than at 85%" in f.message


def test_owned_hardware_below_breakeven(tmp_path):
    f = found(tmp_path, bare(hosts=2, workload=work(50)))["utilization-ownership"]
    assert "pays off above about 70%" in f.message
    assert "utilization-ownership" not in found(tmp_path, bare(hosts=2, workload=work(75)))


def test_busy_on_demand_cloud_points_at_committed_capacity(tmp_path):
    f = found(tmp_path, aws(count=2, workload=work(90)))["utilization-ownership"]
    p5 = load_aws_catalog().instance("p5.48xlarge")
    block, od = p5.capacity_block_usd_hr.value, p5.on_demand_usd_hr.value
    assert f"p5.48xlarge capacity blocks at ${block:g}/h vs ${od:g}/h on-demand" in f.message
    spot = aws(count=2, workload=work(90, checkpoint_interval_min=30), target={"market": "spot"})
    assert "utilization-ownership" not in found(tmp_path, spot)
