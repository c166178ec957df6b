"""Preflight over NVLink domains, with numbers checked by hand in the comments: the tensor x
expert group within one domain, a job of part-filled domains, and the gradients' ring
all-reduce across domains against a step's compute."""

from __future__ import annotations

import dataclasses

from topology_bp import hgx_rails, nvl72_site, plan_of

from rackform.preflight.report import findings
from rackform.preflight.topology import ring_allreduce_s


def codes(plan) -> dict:
    return {f.code: f for f in findings(plan)}


def test_the_tensor_expert_group_fits_an_nvl72_domain_but_not_an_hgx_node(tmp_path):
    w = {"model_params_b": 405, "method": "pretrain", "tensor_parallel": 8, "expert_parallel": 8}
    # 8 x 8 = 64 GPUs <= 72 of one NVL72 domain (18 trays x 4).
    assert "tensor-parallel-across-nodes" not in codes(plan_of(tmp_path, nvl72_site(workload=w)))
    # On HGX B200 the domain is a node's 8 GPUs: 64 > 8.
    f = codes(plan_of(tmp_path, hgx_rails(workload=w)))["tensor-parallel-across-nodes"]
    assert f.message.startswith(
        "tensor_parallel x expert_parallel = 8 x 8 = 64 spans NVLink domains of 8 GPUs (a node)"
    )
    # 9 x 9 = 81 > 72: too large for an NVL72 too.
    w |= {"tensor_parallel": 9, "expert_parallel": 9}
    f = codes(plan_of(tmp_path, nvl72_site(workload=w)))["tensor-parallel-across-nodes"]
    assert "= 81 spans NVLink domains of 72 GPUs (an NVLink domain)" in f.message


def test_a_job_of_part_filled_domains_is_named(tmp_path):
    w = {"model_params_b": 70, "method": "pretrain"}
    # Two racks, the second of 10 trays: 18 x 4 + 10 x 4 = 112 GPUs = 1.56 domains of 72.
    bp = nvl72_site(racks=2, workload=w)
    bp["node_groups"][0]["hosts"] = bp["node_groups"][0]["hosts"][:28]
    f = codes(plan_of(tmp_path, bp))["job-not-domain-multiple"]
    assert f.message.startswith("the job's 112 GPUs are 1.56 NVLink domains of 72: nvl-r2 (40)")
    assert "use a multiple of 72 GPUs (72 or 144)" in f.fix
    # Whole racks: 2 x 72 = 144, a multiple.
    assert "job-not-domain-multiple" not in codes(
        plan_of(tmp_path, nvl72_site(racks=2, workload=w))
    )


def test_ring_bus_factor_as_nccl_tests_reports_it():
    # 14 GB of a 7B model's fp16 gradients over 8 ranks at 12.5 GB/s (100 GbE):
    # 14e9 x 2 x 7/8 / 12.5e9 = 1.96 s; DOMAIN.md's "about 2.2 s" is the large-n limit 28/12.5.
    assert round(ring_allreduce_s(14e9, 8, 12.5), 3) == 1.96
    assert ring_allreduce_s(14e9, 1, 12.5) == 0.0


def test_allreduce_across_domains_against_a_step(tmp_path):
    # 70B pretraining on 16 HGX B200 nodes (128 GPUs) over 100 Gb/s Ethernet a node, TP 8:
    #   gradients per rank: 70e9 x 2 bytes / 8 = 17.5 GB; ranks 128 / 8 = 16;
    #   all-reduce: 17.5e9 x 2 x 15/16 / (100/8 = 12.5 GB/s) = 2.625 s;
    #   compute: 6 x 70e9 x (64 x 4096 tokens) / (128 x 2250e12 x 0.40 MFU) = 0.956 s. Slow.
    w = {"model_params_b": 70, "method": "pretrain", "tensor_parallel": 8,
         "global_batch": 64, "seq_len": 4096}  # fmt: skip
    bp = hgx_rails(units=4, per_unit=4, workload=w)
    bp["network"] = {"fabric": "ethernet", "gbps_per_node": 100}
    f = codes(plan_of(tmp_path, bp))["allreduce-across-domains-slow"]
    assert f.path == ("network", "gbps_per_node")
    assert "moves 2(16-1)/16 x 17.5 GB per rank at most 12.5 GB/s" in f.message
    assert "2.62 s a step, longer than the step's 0.96 s of compute at 40% MFU" in f.message
    # 3200 Gb/s a node (400 GB/s): 17.5e9 x 2 x 15/16 / 400e9 = 0.082 s < 0.956 s. Fine.
    bp["network"] = {"fabric": "infiniband", "gbps_per_node": 3200}
    assert "allreduce-across-domains-slow" not in codes(plan_of(tmp_path, bp))


def test_the_rule_reads_the_figure_not_a_literal(tmp_path):
    # The same 3200 Gb/s cluster with the allowed share cut to 5%: 0.082 s > 0.05 x 0.956 s.
    w = {"model_params_b": 70, "method": "pretrain", "tensor_parallel": 8,
         "global_batch": 64, "seq_len": 4096}  # fmt: skip
    plan = plan_of(tmp_path, hgx_rails(units=4, per_unit=4, workload=w))
    fig = plan.figures.topology.allreduce_max_step_fraction
    tight = dataclasses.replace(
        plan.figures,
        topology=dataclasses.replace(
            plan.figures.topology,
            allreduce_max_step_fraction=dataclasses.replace(fig, value=0.05),
        ),
    )
    assert "allreduce-across-domains-slow" not in codes(plan)
    assert "allreduce-across-domains-slow" in codes(dataclasses.replace(plan, figures=tight))
