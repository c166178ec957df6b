"""The smoke job's NVLink domain arguments, from the plan (rackform/plan/domain_expect.py):
the domain map where a run spans what the declared topology promises, and the catalog's
figures for a full domain, still to be measured for every system (so none is passed)."""

from __future__ import annotations

from pathlib import Path

from topology_bp import hgx_rails, nvl72_site, plan_of

from rackform.blueprint.loader import load_effective
from rackform.engine import compile_effective
from rackform.plan.thresholds import for_group

ROOT = Path(__file__).resolve().parents[2]


def domain_args(args: list[str]) -> list[str]:
    return [args[i + 1] for i, a in enumerate(args) if a == "--nvlink-domain"]


def test_nvl72_racks_are_handed_to_the_job_as_domains(tmp_path):
    plan = plan_of(tmp_path, nvl72_site(racks=2, trays=3))
    exp = plan.expectations
    assert domain_args(exp.threshold_args()) == [
        "nvl-r1=gb1-t01,gb1-t02,gb1-t03",
        "nvl-r2=gb2-t01,gb2-t02,gb2-t03",
    ]
    # Nobody has published them: the job gets no figure, and the reason is kept.
    assert exp.domain_allreduce_gbps.value is None
    assert exp.domain_allreduce_gbps.source == (
        "catalog GB200-NVL72 allreduce_busbw_gbps_domain: to be measured"
    )
    assert exp.domain_alltoall_gbps.value is None
    assert "--domain-allreduce-min" not in exp.threshold_args()
    # `rackform smoke` shows them with the other thresholds, with why there is no figure.
    table = {name: (value, why) for name, value, why in exp.table()}
    assert table["domain_alltoall_gbps"] == (
        None,
        "catalog GB200-NVL72 alltoall_busbw_gbps_domain: to be measured",
    )
    # The role gets them with the other expectations (smoke_train_job_args).
    assert domain_args(plan.group_vars["smoke_train_job_args"]) == domain_args(exp.threshold_args())


def test_one_rack_is_one_domain_of_several_trays(tmp_path):
    exp = plan_of(tmp_path, nvl72_site(racks=1, trays=3)).expectations
    assert domain_args(exp.threshold_args()) == ["nvl-r1=gb1-t01,gb1-t02,gb1-t03"]


def test_hgx_nodes_on_a_declared_fabric_are_a_domain_each(tmp_path):
    exp = plan_of(tmp_path, hgx_rails(units=1, per_unit=2)).expectations
    assert domain_args(exp.threshold_args()) == ["b200-11=b200-11", "b200-12=b200-12"]


def test_a_one_node_run_measures_no_domains(tmp_path):
    plan = plan_of(tmp_path, nvl72_site(racks=2, trays=3))
    exp = for_group(plan, "gb", nodes=1)
    assert exp.nvlink_domains == () and "--nvlink-domain" not in exp.threshold_args()


def test_a_cluster_that_declares_no_topology_keeps_its_job():
    plan = compile_effective(load_effective(ROOT / "blueprints" / "baremetal-training.yaml"))
    assert not plan.topology.declared
    assert "--nvlink-domain" not in plan.expectations.threshold_args()
