"""Memory rules, through real blueprints: what fits, what does not, and what is oversized."""

from __future__ import annotations

from preflight_bp import aws, bare, found


def test_7b_lora_fits_one_24gb_gpu(tmp_path):
    out = found(
        tmp_path,
        aws("g5.xlarge", fabric="ethernet", workload={"model_params_b": 7, "method": "lora"}),
    )
    assert "memory-does-not-fit" not in out
    assert "memory-oversized" not in out  # it uses most of the A10G


def test_7b_full_finetune_does_not_fit_24gb(tmp_path):
    out = found(
        tmp_path,
        aws("g5.xlarge", fabric="ethernet", workload={"model_params_b": 7, "method": "full"}),
    )
    f = out["memory-does-not-fit"]
    assert f.level == "error"
    assert f.path == ("node_groups", 0, "instance_type")
    # 7B x 16 bytes of state, plus activations for one 4096-token sequence
    assert "needs 114 GB per GPU (112 GB of weights, gradients and optimizer state" in f.message
    assert "each A10G leaves 21.6 GB of its 24.0 GB" in f.message
    assert "lora or qlora" in f.fix


def test_70b_qlora_fits_one_80gb_gpu_lora_does_not(tmp_path):
    q = found(tmp_path, bare(gpus_per_node=1, workload={"model_params_b": 70, "method": "qlora"}))
    assert "memory-does-not-fit" not in q
    lora = found(tmp_path, bare(gpus_per_node=1, workload={"model_params_b": 70, "method": "lora"}))
    f = lora["memory-does-not-fit"]
    assert f.path == ("node_groups", 0, "gpu")
    assert "qlora" in f.fix


def test_70b_full_needs_enough_nodes(tmp_path):
    w = {"model_params_b": 70, "method": "full"}
    one = found(tmp_path, aws(count=1, workload=w))
    # 1120 GB of state over 8 GPUs is 140 GB each: the fix names how many GPUs would do.
    assert "use at least 18 such GPUs (3 node(s) of 8)" in one["memory-does-not-fit"].fix
    assert "memory-does-not-fit" not in found(tmp_path, aws(count=3, workload=w))


def test_ddp_replica_is_not_sharded(tmp_path):
    w = {"model_params_b": 13, "method": "full", "sharding": "ddp"}
    out = found(tmp_path, aws("p4de.24xlarge", count=1, workload=w))
    assert "set workload.sharding: fsdp" in out["memory-does-not-fit"].fix
    w["sharding"] = "fsdp"
    assert "memory-does-not-fit" not in found(tmp_path, aws("p4de.24xlarge", count=1, workload=w))


def test_activation_checkpointing_off_is_named_in_the_fix(tmp_path):
    w = {"model_params_b": 70, "method": "full", "activation_checkpointing": False}
    f = found(tmp_path, aws(count=4, workload=w))["memory-does-not-fit"]
    assert "activation_checkpointing: true" in f.fix
    w["activation_checkpointing"] = True
    assert "memory-does-not-fit" not in found(tmp_path, aws(count=4, workload=w))


def test_oversized_gpu_for_a_small_finetune(tmp_path):
    out = found(tmp_path, aws(workload={"model_params_b": 7, "method": "lora"}))
    f = out["memory-oversized"]
    assert f.level == "warning"
    assert "of one H100-SXM's 80.0 GB" in f.message
    assert "e.g. A10G" in f.fix
    # Pre-training buys GPUs for compute: no oversize warning.
    out = found(tmp_path, aws(workload={"model_params_b": 1, "method": "pretrain"}))
    assert "memory-oversized" not in out


def test_more_gpus_than_the_batch_can_use(tmp_path):
    w = {"model_params_b": 13, "method": "full", "global_batch": 16}
    f = found(tmp_path, aws(count=4, workload=w))["nodes-unused"]
    assert f.path == ("node_groups", 0, "count")
    assert "32 GPUs at tensor_parallel 1 make 32 data-parallel ranks" in f.message
    assert "16 GPUs would sit idle" in f.message
    assert f.fix.startswith("use 2 node(s)")
    w["global_batch"] = 32
    assert "nodes-unused" not in found(tmp_path, aws(count=4, workload=w))


def test_no_workload_no_memory_findings(tmp_path):
    out = found(tmp_path, aws(count=2))
    assert not {"memory-does-not-fit", "memory-oversized", "nodes-unused"} & set(out)
