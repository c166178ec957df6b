"""The sizing arithmetic against the figures the project's domain notes quote."""

from __future__ import annotations

import pytest
from blueprint_helpers import AWS_TRAINING

from rackform.blueprint.loader import load_effective
from rackform.blueprint.schema.sections import CheckpointStorage, WorkloadSpec
from rackform.blueprint.targets.aws.catalog import load_aws_catalog
from rackform.catalog.preflight import load_preflight_figures
from rackform.engine import compile_effective
from rackform.plan import sizing
from rackform.plan.arrays import array_plan

F = load_preflight_figures().memory
USABLE_24 = 24 * (1 - F.reserve_fraction.value)
USABLE_80 = 80 * (1 - F.reserve_fraction.value)


def work(params_b: float, method: str, **kw) -> WorkloadSpec:
    return WorkloadSpec(model_params_b=params_b, method=method, **kw)


@pytest.mark.parametrize(
    ("params_b", "layers", "hidden"), [(7, 32, 4096), (13, 40, 5120), (70, 80, 8192)]
)
def test_shape_is_near_the_llama_models(params_b, layers, hidden):
    s = sizing.shape(params_b, F)
    assert abs(s.layers - layers) / layers < 0.15
    assert abs(s.hidden - hidden) / hidden < 0.15
    # And it is a shape of the size asked for: 12 x layers x hidden^2 ~= params.
    assert 12 * s.layers * s.hidden**2 == pytest.approx(params_b * 1e9, rel=0.01)


def test_13b_full_finetune_needs_200_to_300_gb():
    m = sizing.training_memory(work(13, "full", seq_len=2048), gpus=8, f=F)
    assert (m.weights_gb, m.grads_gb, m.optimizer_gb) == pytest.approx((26, 26, 156))
    assert 200 <= m.replica_gb <= 300
    # Sharded over 8 GPUs each holds an eighth of the state plus its own activations.
    assert m.per_gpu_gb == pytest.approx(208 / 8 + m.activations_gb)


def test_7b_lora_fits_one_24gb_gpu():
    m = sizing.training_memory(work(7, "lora"), gpus=1, f=F)
    assert m.per_gpu_gb == m.replica_gb
    assert 14 < m.replica_gb <= USABLE_24  # more than the frozen bf16 base, less than 24 GB


def test_70b_qlora_fits_one_80gb_gpu_and_lora_does_not():
    qlora = sizing.training_memory(work(70, "qlora"), gpus=1, f=F)
    assert 35 < qlora.replica_gb <= USABLE_80
    lora = sizing.training_memory(work(70, "lora"), gpus=1, f=F)
    assert lora.replica_gb > 140  # a bf16 70B base alone is 140 GB


def test_activation_checkpointing_trades_memory():
    on = sizing.activations_gb(work(70, "full"), F)
    off = sizing.activations_gb(work(70, "full", activation_checkpointing=False), F)
    assert off > 10 * on
    # Activations grow linearly with micro-batch and sequence length.
    assert sizing.activations_gb(work(70, "full", micro_batch=4), F) == pytest.approx(4 * on)


def test_ddp_divides_state_only_by_tensor_parallelism():
    w = work(13, "full", sharding="ddp", tensor_parallel=4)
    m = sizing.training_memory(w, gpus=32, f=F)
    assert m.shards == 4
    assert m.per_gpu_gb == pytest.approx(208 / 4 + m.activations_gb / 4)


def test_serving_memory():
    s = sizing.serving_memory(work(70, "serve", seq_len=8192), F)
    assert s.weights_gb == pytest.approx(140)
    # No shape given: estimated from the size (71 layers x 9064), heads of 128, as many KV heads
    # as attention heads: round(9064 / 128) = 71 heads, so 71 x 128 = 9088 per layer for K
    # (and as much for V), within 0.3% of the old 2 x layers x hidden estimate.
    shape = sizing.shape(70, F)
    assert (shape.layers, shape.hidden) == (71, 9064)
    assert s.dims.kv_heads == s.dims.attention_heads == 71 and s.dims.estimated
    assert s.kv_cache_gb == pytest.approx(2 * 71 * 71 * 128 * 2 * 8192 / 1e9)
    assert s.kv_cache_gb == pytest.approx(
        2 * shape.layers * shape.hidden * 2 * 8192 / 1e9, rel=3e-3
    )


def test_checkpoint_sizes():
    assert sizing.checkpoint_gb(work(70, "full", checkpoint_contents="weights"), F) == 140
    assert sizing.checkpoint_gb(work(70, "full"), F) == pytest.approx(70 * 14)
    # LoRA saves its adapters (1% of 7B) only.
    assert sizing.checkpoint_gb(work(7, "lora", checkpoint_contents="weights"), F) == (
        pytest.approx(0.07 * 2)
    )
    assert sizing.checkpoint_gb(work(8, "serve"), F) == 0


def p5_array(ckpt: CheckpointStorage):
    it = load_aws_catalog().instance("p5.48xlarge")
    return array_plan(
        ckpt,
        drives=int(it.nvme_drives.value),
        drive_gb=it.nvme_drive_gb.value,
        per_drive=it.nvme_write_gbps_per_drive,
        where="p5.48xlarge instance store",
    )


@pytest.mark.parametrize(("raid", "gbps", "tb"), [(0, 28, 30.72), (10, 14, 15.36), (1, 3.5, 3.84)])
def test_instance_store_array(raid, gbps, tb):
    a = p5_array(CheckpointStorage(raid_level=raid))
    assert a.write_gbps == pytest.approx(gbps)
    assert a.capacity_gb == pytest.approx(tb * 1000)
    assert not a.declared and a.write_source.startswith("estimate: ")


def test_array_speed_from_blueprint_or_unknown():
    a = array_plan(CheckpointStorage(write_gbps=20), drives=None)
    assert (a.write_gbps, a.capacity_gb, a.declared) == (20, None, True)
    assert array_plan(CheckpointStorage(), drives=None).write_gbps is None
    # A declared speed wins over the estimate; the drives' capacity stays known.
    both = p5_array(CheckpointStorage(write_gbps=5))
    assert (both.write_gbps, both.declared) == (5, True)
    assert both.capacity_gb == pytest.approx(30720)


def test_the_slowest_groups_array_decides(write):
    text = (
        AWS_TRAINING.replace("count: 2", "count: 1")
        + "  - {name: small, instance_type: g5.xlarge, count: 1}\n"
    ).replace("network: {fabric: efa}\n", "") + "network: {fabric: ethernet}\n"
    text = text.replace("node_groups:\n  - name: gpu", "node_groups:\n  - name: gpu", 1)
    plan = compile_effective(load_effective(write(text)))
    assert [g.array.write_gbps for g in plan.node_groups] == pytest.approx([28.0, 1.0])
    assert plan.sizing.array.write_gbps == pytest.approx(1.0)
