"""The sizing arithmetic against the figures the project's domain notes quote."""

from __future__ import annotations

import pytest

from rackform.catalog import load_catalog
from rackform.catalog.preflight import load_preflight_figures
from rackform.preflight import sizing
from rackform.blueprint.schema.sections import CheckpointStorage, WorkloadSpec
from rackform.plan.model import NodeGroupSpec

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
    shape = sizing.shape(70, F)
    assert s.kv_cache_gb == pytest.approx(2 * shape.layers * shape.hidden * 2 * 8192 / 1e9)


def test_checkpoint_sizes():
    assert sizing.checkpoint_gb(work(70, "full", checkpoint_contents="weights"), F) == 140
    assert sizing.checkpoint_gb(work(70, "full"), F) == pytest.approx(70 * 14)
    # LoRA saves its adapters (1% of 7B) only.
    assert sizing.checkpoint_gb(work(7, "lora", checkpoint_contents="weights"), F) == (
        pytest.approx(0.07 * 2)
    )
    assert sizing.checkpoint_gb(work(8, "serve"), F) == 0


def group(instance: str | None, count: int = 1, drives: int = 0) -> NodeGroupSpec:
    return NodeGroupSpec("g", count, "H100-SXM", 8, instance, (), None, None, 0, drives)


@pytest.mark.parametrize(("raid", "gbps", "tb"), [(0, 28, 30.72), (10, 14, 15.36), (1, 3.5, 3.84)])
def test_instance_store_array(raid, gbps, tb):
    a = sizing.array_speed(
        (group("p5.48xlarge"),), CheckpointStorage(raid_level=raid), load_catalog()
    )
    assert a.gbps == pytest.approx(gbps)
    assert a.capacity_gb == pytest.approx(tb * 1000)


def test_array_speed_from_blueprint_or_unknown():
    cat = load_catalog()
    a = sizing.array_speed((group(None),), CheckpointStorage(write_gbps=20), cat)
    assert (a.gbps, a.capacity_gb) == (20, None)
    assert sizing.array_speed((group(None),), CheckpointStorage(), cat) is None
    # The slowest group's array decides.
    both = (group("p5.48xlarge"), group("g5.xlarge"))
    assert sizing.array_speed(both, CheckpointStorage(), cat).gbps == pytest.approx(1.0)
