"""Cost figures for the example blueprints, computed by hand here from catalog values."""

from __future__ import annotations

from pathlib import Path

import pytest
from blueprint_helpers import AWS_TRAINING, BARE_METAL

from rackform.blueprint.loader import load_effective
from rackform.blueprint.targets.aws.catalog import load_aws_catalog
from rackform.catalog import load_catalog
from rackform.catalog.preflight import load_preflight_figures
from rackform.engine import compile_effective
from rackform.plan.cost import render

ROOT = Path(__file__).resolve().parents[2]
CAT = load_catalog()
AWS = load_aws_catalog()
FIG = load_preflight_figures()
HOURS = FIG.cost.hours_per_month.value
MFU = FIG.cost.mfu_fraction.value
S3 = FIG.cost.storage_usd_per_gb_month.value


def cost_of(path: Path | str, env: str | None = None):
    return compile_effective(load_effective(ROOT / "blueprints" / path, env)).cost


def market(text: str, line: str) -> str:
    return text.replace("ssh_cidrs: [10.20.0.0/16]", f"ssh_cidrs: [10.20.0.0/16]\n  {line}")


RES_ID = "reservation_id: cr-0123456789abcdef0"


def test_aws_training_example_by_hand():
    c = cost_of("aws-training.yaml", "prod")
    p5 = AWS.instance("p5.48xlarge")
    hour = 4 * p5.on_demand_usd_hr.value
    assert c.basis == "aws on-demand"
    # 70B full state (2 + 12 bytes per parameter) = 980 GB, three kept.
    assert c.storage.usd_per_month == pytest.approx(980 * 3 * S3)
    # The hourly and the monthly total add up the same lines, storage included.
    assert c.usd_per_hour == pytest.approx(hour + 980 * 3 * S3 / HOURS)
    assert c.usd_per_month == pytest.approx(hour * HOURS + 980 * 3 * S3)
    # 20B tokens: 6 x 70e9 x 20e9 FLOPs over 32 H100s at the catalog's MFU.
    busy = 6 * 70e9 * 20e9 / (32 * CAT.gpu("H100-SXM").bf16_dense_tflops.value * 1e12 * MFU)
    at = {a.utilization_pct: a for a in c.run.at}
    assert set(at) == {65, 85}
    assert at[65].hours == pytest.approx(busy / 3600 / 0.65)
    assert at[85].hours == pytest.approx(busy / 3600 / 0.85)
    assert at[65].usd == pytest.approx(busy / 3600 / 0.65 * hour)
    # Expected 65% against the 85% target: that share of the month is idle capacity.
    assert c.utilization.usd_per_month == pytest.approx(hour * HOURS * (1 - 65 / 85))
    assert c.utilization.run_usd == pytest.approx(at[65].usd - at[85].usd)


def test_bare_metal_example_by_hand():
    c = cost_of("baremetal-training.yaml")
    capex = 30000 * 32 / 36
    kw = 32 * CAT.gpu("H100-SXM").power_w.value / 1000 * FIG.power.server_power_factor.value
    power = kw * 0.12 * HOURS
    assert [round(line.usd_per_month, 2) for line in c.compute] == [
        round(capex, 2),
        round(power, 2),
    ]
    assert c.storage.usd_per_month == pytest.approx(13 * 14 * 3 * S3)
    assert c.usd_per_month == pytest.approx(capex + power + 13 * 14 * 3 * S3)
    busy_h = 6 * 13e9 * 300e9 / (32 * 989e12 * MFU) / 3600
    assert [a.hours for a in c.run.at] == pytest.approx([busy_h / 0.65, busy_h / 0.85])
    assert c.utilization is None and c.notes == ()


def test_colocation_example_by_hand():
    c = cost_of("colo-inference.yaml")
    assert c.usd_per_month == pytest.approx((17 + 17) * 180 + 32 * 9000 / 36)
    assert c.storage is None and c.run is None  # inference: no checkpoints, no run


def test_spot_is_a_discount_range(write):
    spot = (
        market(AWS_TRAINING, "market: spot")
        + "workload: {model_params_b: 7, method: full, checkpoint_interval_min: 30}\n"
    )
    c = cost_of(write(spot))
    od = 2 * AWS.instance("p5.48xlarge").on_demand_usd_hr.value
    low, high = FIG.cost.spot_discount_low.value, FIG.cost.spot_discount_high.value
    assert c.spot_usd_per_hour_range == pytest.approx((od * (1 - high), od * (1 - low)))
    # The cautious end, plus the checkpoints' storage.
    assert c.usd_per_hour == pytest.approx(od * (1 - low) + c.storage.usd_per_hour)
    assert any("spot prices vary" in n for n in c.notes)


def test_capacity_block_and_reservation_prices(write):
    block = market(AWS_TRAINING, f"market: capacity-block\n  {RES_ID}")
    c = cost_of(write(block))
    assert c.usd_per_hour == 2 * AWS.instance("p5.48xlarge").capacity_block_usd_hr.value
    c = cost_of(write(block.replace("p5.48xlarge", "p5en.48xlarge"), "en.yaml"))
    assert c.usd_per_hour is None and c.usd_per_month is None  # no block price in the catalog
    assert "no capacity-block price for p5en.48xlarge" in c.notes[0]
    c = cost_of(write(market(AWS_TRAINING, f"market: reservation\n  {RES_ID}"), "r.yaml"))
    rate = FIG.cost.reservation_rate_of_on_demand.value
    assert c.usd_per_hour == pytest.approx(
        2 * AWS.instance("p5.48xlarge").on_demand_usd_hr.value * rate
    )


def test_missing_prices_leave_no_partial_total(write):
    c = cost_of(
        write(BARE_METAL.replace("type: bare_metal", "type: bare_metal, capex_usd_per_gpu: 25000"))
    )
    assert len(c.compute) == 1  # hardware priced, electricity not
    assert c.usd_per_hour is None
    assert any("power_usd_per_kwh" in n for n in c.notes)


def test_lora_checkpoints_cost_only_adapters(write):
    w = "workload: {model_params_b: 7, method: lora, checkpoints_retained: 5}\n"
    c = cost_of(write(AWS_TRAINING + w))
    adapters = 7e9 * FIG.memory.lora_adapter_fraction.value
    assert c.storage.usd_per_month == pytest.approx(adapters * 14 / 1e9 * 5 * S3)


def test_render_shows_every_line_and_source():
    text = "\n".join(render(cost_of("aws-training.yaml")))
    assert "4 x p5.48xlarge on-demand" in text
    assert AWS.instance("p5.48xlarge").on_demand_usd_hr.source.date in text
    assert "at 65% utilization" in text and "at 85% utilization" in text
    assert "utilization: expected 65% vs target 85%" in text


def test_a_region_the_catalog_does_not_price_gets_no_total(write):
    text = AWS_TRAINING.replace("region: us-east-1", "region: us-west-2").replace(
        "availability_zone: us-east-1a", "availability_zone: us-west-2a"
    )
    c = compile_effective(load_effective(write(text))).cost
    assert c.usd_per_hour is None and c.usd_per_month is None and c.compute == ()
    assert any(
        "no price for p5.48xlarge in us-west-2 (it prices us-east-1)" in n for n in c.notes
    ), c.notes


@pytest.mark.parametrize(
    ("path", "env"),
    [
        ("aws-training.yaml", "prod"),
        ("baremetal-training.yaml", None),
        ("colo-inference.yaml", None),
    ],
)
def test_the_totals_add_up_the_lines_they_show(path, env):
    c = cost_of(path, env)
    lines = [*c.compute, *([c.storage] if c.storage else [])]
    assert c.usd_per_hour == pytest.approx(sum(ln.usd_per_hour for ln in lines))
    assert c.usd_per_month == pytest.approx(sum(ln.usd_per_month for ln in lines))
    assert c.usd_per_month == pytest.approx(c.usd_per_hour * HOURS)


def test_a_parked_group_costs_nothing_and_finds_nothing_about_checkpoints(write):
    # count: 0 parks a group: it stays in the blueprint, has no node, costs no compute, and no
    # rule reasons about checkpoints that no node writes.
    text = AWS_TRAINING.replace("count: 2", "count: 0") + (
        "workload: {model_params_b: 70, method: full, checkpoint_interval_min: 5}\n"
    )
    plan = compile_effective(load_effective(write(text)))
    c = plan.cost
    assert [ln.usd_per_hour for ln in c.compute] == [0]
    assert c.usd_per_hour == pytest.approx(c.storage.usd_per_hour)  # kept checkpoints only
    from rackform.preflight.report import run

    codes = {lf.finding.code for lf in run(plan).findings}
    assert not codes & {"checkpoint-overhead", "checkpoint-slow", "checkpoint-throughput-unknown"}


def test_the_object_tier_is_priced_at_what_the_jobs_keep(write):
    w = "workload: {model_params_b: 7, method: full, checkpoints_retained: 4}\n"
    tier = "storage: {object: {url: 's3://team-ckpt/runs'}}\n"
    c = cost_of(write(AWS_TRAINING + w + tier))
    # 7B full state, 14 bytes a parameter: 98 GB, four kept (the jobs' RACKFORM_CHECKPOINT_KEEP).
    assert c.storage.usd_per_month == pytest.approx(98 * 4 * S3)
    assert "4 checkpoints x 98 GB (full) in s3://team-ckpt/runs at $" in c.storage.item
