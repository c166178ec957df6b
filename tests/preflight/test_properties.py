"""Properties over many workloads and clusters: preflight and cost never crash on a valid
blueprint, every finding is a registered, located rule, and the numbers move the right way."""

from __future__ import annotations

import math

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from preflight_bp import aws, bare, load

from rackform.blueprint.schema.sections import WorkloadSpec
from rackform.blueprint.targets.aws.catalog import load_aws_catalog
from rackform.catalog import load_catalog
from rackform.catalog.preflight import load_preflight_figures
from rackform.plan import sizing
from rackform.preflight.registry import codes
from rackform.preflight.report import run

TRAIN_TYPES = sorted(load_aws_catalog().instances)
GPUS = sorted(load_catalog().gpus)

workloads = st.fixed_dictionaries(
    {
        "model_params_b": st.floats(0.05, 2000),
        "method": st.sampled_from(["pretrain", "full", "lora", "qlora"]),
        "seq_len": st.sampled_from([512, 2048, 4096, 32768]),
        "micro_batch": st.integers(1, 16),
        "activation_checkpointing": st.booleans(),
        "sharding": st.sampled_from(["fsdp", "ddp"]),
        "tensor_parallel": st.sampled_from([1, 2, 8, 16]),
        "checkpoint_contents": st.sampled_from(["full", "weights"]),
        "checkpoints_retained": st.integers(1, 50),
    },
    optional={
        "global_batch": st.integers(1, 4096),
        "checkpoint_interval_min": st.floats(1, 600),
        "tokens_b": st.floats(0.1, 20000),
        "expected_utilization_pct": st.floats(5, 100),
    },
)


@st.composite
def clusters(draw):
    w = draw(workloads)
    if draw(st.booleans()):
        it = draw(st.sampled_from(TRAIN_TYPES))
        efa = load_aws_catalog().instance(it).efa_interfaces.value > 0
        fabric = draw(st.sampled_from(["efa", "ethernet"] if efa else ["ethernet"]))
        # Spot training must checkpoint (a schema rule), so spot only with an interval.
        spot_ok = "checkpoint_interval_min" in w
        market = draw(st.sampled_from(["on-demand", "spot"] if spot_ok else ["on-demand"]))
        return aws(it, draw(st.integers(1, 16)), fabric, w, target={"market": market})
    target = {"capex_usd_per_gpu": 25000, "power_usd_per_kwh": 0.1}
    fabric = draw(st.sampled_from(["infiniband", "roce", "ethernet"]))
    storage = {"checkpoint": {"write_gbps": draw(st.floats(0.1, 100))}}
    return bare(
        draw(st.sampled_from(GPUS)),
        draw(st.sampled_from([1, 2, 4, 8])),
        draw(st.integers(1, 6)),
        fabric,
        w,
        target=target,
        storage=storage,
    )


@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(data=clusters())
def test_preflight_and_cost_hold_for_any_valid_cluster(tmp_path, data):
    report = run(load(tmp_path, data))
    known = codes()
    for lf in report.findings:
        assert known[lf.finding.code] == lf.finding.level
        assert lf.finding.path and lf.finding.message and lf.finding.fix
        assert lf.line >= 1 and lf.col >= 1
    c = report.cost
    types = [g.get("instance_type") for g in data.get("node_groups", [])]
    unpriced = [t for t in types if t and load_aws_catalog().instance(t).on_demand_usd_hr is None]
    if unpriced:  # a type whose price the catalog does not record: said, never guessed
        assert c.usd_per_hour is None
        assert any(f"price for {unpriced[0]}" in n for n in c.notes)
        return
    assert c.usd_per_hour is not None and c.usd_per_hour > 0
    assert c.usd_per_month >= c.usd_per_hour * c.hours_per_month
    if c.run is not None:
        hours = [a.hours for a in c.run.at]  # sorted by utilization: busier is faster
        assert hours == sorted(hours, reverse=True) and all(h > 0 for h in hours)
    if c.utilization is not None:
        assert c.utilization.usd_per_month >= 0


@settings(max_examples=200, deadline=None)
@given(w=workloads.map(lambda d: WorkloadSpec(**d)), gpus=st.integers(1, 512))
def test_memory_per_gpu_never_grows_with_more_fsdp_gpus(w, gpus):
    f = load_preflight_figures().memory
    if w.sharding != "fsdp":
        return
    fewer = sizing.training_memory(w, gpus, f).per_gpu_gb
    more = sizing.training_memory(w, gpus + 1, f).per_gpu_gb
    assert more <= fewer
    assert math.isclose(
        sizing.training_memory(w, gpus, f).replica_gb,
        sizing.training_memory(w, gpus + 1, f).replica_gb,
    )
