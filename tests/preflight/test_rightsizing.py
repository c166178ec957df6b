"""Right-sizing rules: interconnect and node type against what the cluster runs."""

from __future__ import annotations

import re

from preflight_bp import aws, bare, found

LORA_7B = {"model_params_b": 7, "method": "lora"}
FULL_13B = {"model_params_b": 13, "method": "full"}


def test_single_node_lora_with_efa_warns(tmp_path):
    f = found(tmp_path, aws(count=1, fabric="efa", workload=LORA_7B))["fabric-unused"]
    assert (f.level, f.path) == ("warning", ("network", "fabric"))
    assert "single-node" in f.message and "efa" in f.message
    assert "fabric-unused" not in found(
        tmp_path, aws("g5.xlarge", fabric="ethernet", workload=LORA_7B)
    )


def test_single_node_infiniband_warns_without_a_workload(tmp_path):
    assert "fabric-unused" in found(tmp_path, bare(hosts=1))


def test_multi_node_lora_that_fits_one_gpu_warns(tmp_path):
    f = found(tmp_path, aws(count=2, workload=LORA_7B))["fabric-unused"]
    assert "all-reduce 0.14 GB of adapter gradients" in f.message  # 1% of 7B in bf16
    # A LoRA whose frozen base must be sharded across nodes uses the fabric: no warning.
    big = {"model_params_b": 180, "method": "lora"}
    assert "fabric-unused" not in found(tmp_path, aws(count=2, workload=big))


def test_four_node_full_finetune_on_ethernet_is_an_error(tmp_path):
    f = found(tmp_path, bare(hosts=4, fabric="ethernet", workload=FULL_13B))["fabric-missing"]
    assert (f.level, f.path) == ("error", ("network", "fabric"))
    assert "across 4 nodes over ethernet" in f.message and "26.0 GB" in f.message
    assert "infiniband or roce" in f.fix
    # With the fabric's speed known the message says what a step waits: 7B's 14 GB of bf16
    # gradients, twice over, at 100 Gb/s is about 2.2 s (the domain notes' figure).
    data = bare(hosts=4, fabric="ethernet", workload={"model_params_b": 7, "method": "full"})
    data["network"]["gbps_per_node"] = 100
    assert "(about 2.2 s per step at 100 Gb/s)" in found(tmp_path, data)["fabric-missing"].message
    aws_fix = found(tmp_path, aws("g6e.48xlarge", count=4, fabric="ethernet", workload=FULL_13B))
    assert "efa" in aws_fix["fabric-missing"].fix
    # RDMA fabrics, one node, or LoRA: no error.
    assert "fabric-missing" not in found(tmp_path, bare(hosts=4, fabric="roce", workload=FULL_13B))
    assert "fabric-missing" not in found(
        tmp_path, bare(hosts=1, fabric="ethernet", workload=FULL_13B)
    )
    lora = found(tmp_path, bare(hosts=4, fabric="ethernet", workload=LORA_7B))
    assert "fabric-missing" not in lora


def test_tensor_parallel_across_nodes(tmp_path):
    w = {**FULL_13B, "tensor_parallel": 16}
    f = found(tmp_path, aws(count=2, workload=w))["tensor-parallel-across-nodes"]
    assert (f.level, f.path) == ("error", ("workload", "tensor_parallel"))
    assert "keep the group <= 8 GPUs" in f.fix
    w["tensor_parallel"] = 8
    assert "tensor-parallel-across-nodes" not in found(tmp_path, aws(count=2, workload=w))


def serve(params_b: float, **kw) -> dict:
    return {"model_params_b": params_b, "method": "serve", **kw}


def test_inference_with_training_fabric_and_gpus(tmp_path):
    out = found(tmp_path, aws(count=1, purpose="inference", workload=serve(8)))
    assert out["inference-training-fabric"].path == ("network", "fabric")
    f = out["inference-training-gpu"]
    assert "H100-SXM" in f.message and "g6e.48xlarge" in f.message
    plain = found(
        tmp_path, aws("g6e.12xlarge", fabric="ethernet", purpose="inference", workload=serve(8))
    )
    assert not plain


def test_a_site_is_offered_servers_of_its_own_size_never_a_clouds_instance_types(tmp_path):
    # Bare metal buys servers: the cheaper node suggested is one as large as the blueprint's
    # (8 GPUs) with inference-class GPUs, named by its GPUs, not an AWS instance type.
    doc = bare(purpose="inference", fabric="ethernet", workload=serve(8))
    f = found(tmp_path, doc)["inference-training-gpu"]
    assert re.search(r"; 8 x [\w-]+ \(\d+ GB usable\) holds it", f.message), f.message
    assert "xlarge" not in f.message


def test_inference_node_too_small(tmp_path):
    # 405B in bf16 is 810 GB: more than 8 x H100 hold, and nothing smaller would hold it.
    out = found(tmp_path, aws(fabric="ethernet", purpose="inference", workload=serve(405)))
    f = out["inference-node-too-small"]
    assert f.level == "error" and "810 GB of bf16 weights" in f.message
    assert "inference-training-gpu" not in out


def test_inference_kv_cache_tight(tmp_path):
    w = serve(70, seq_len=32768)
    out = found(tmp_path, aws("g6e.12xlarge", fabric="ethernet", purpose="inference", workload=w))
    f = out["inference-kv-cache-tight"]
    assert f.level == "warning" and "as many KV heads as attention heads" in f.message
    assert "grouped-query" in f.fix
    assert "inference-node-too-small" not in out
    w["seq_len"] = 4096
    assert not found(
        tmp_path, aws("g6e.12xlarge", fabric="ethernet", purpose="inference", workload=w)
    )
